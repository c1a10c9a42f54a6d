"""The model runtime: one llama.cpp model and context, driven through llama-cpp-python's low-level API.

``ingest/`` (prefill, snapshots) and ``spec/`` (draft/verify) build on it; only the server's engine
thread owns a live instance.
"""

from runtime import omp as _omp

# Before any runtime module imports llama_cpp: libgomp reads its wait policy once, when it is loaded.
_omp.apply()
