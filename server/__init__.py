"""docqa's server, in four rooms, each importing only the rooms before it (tests/test_layers.py):

* ``server.config``: settings (``DOCQA_*``), the tuned-settings file, memory presets, and the error
  classes with their one status table;
* ``server.engine``: the engine thread and everything that touches a llama.cpp object or runs on it
  (scheduler, runner, document state, ingestion, citations, start-up self-test);
* ``server.api``: the HTTP API (FastAPI app, middleware, schemas, routes, streaming);
* ``server.tools``: operator tools (the ``docqa`` CLI, ``docqa tune`` and its replay).

``python -m server`` (server/__main__.py) serves.
"""
