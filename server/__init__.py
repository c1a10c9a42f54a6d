"""docqa's server, in five rooms, each importing only the rooms before it (tests/test_layers.py):

* ``server.config``: settings (``DOCQA_*``), the tuned-settings file, memory presets, and the error
  classes with their one status table;
* ``server.engine``: the engine thread and everything that touches a llama.cpp object or runs on it
  (scheduler, runner, document state, ingestion, citations, start-up self-test);
* ``server.service``: the work the front doors share (a question's way to the engine, segments and
  collections, intake, watched folders), given its dependencies as one ``Services`` value;
* ``server.api``: the HTTP API (FastAPI app, middleware, schemas, routes, streaming);
* ``server.tools``: operator tools (the ``docqa`` CLI, ``docqa tune`` and its replay).

``python -m server`` (server/__main__.py) serves.
"""
