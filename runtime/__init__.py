"""The model runtime: one llama.cpp model and context, driven through llama-cpp-python's low-level API.

``ingest/`` (prefill, snapshots) and ``spec/`` (draft/verify) build on it; only the server's engine
thread owns a live instance.
"""
