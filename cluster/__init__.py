"""docqa on Ray Serve: many GPUs and machines as one endpoint, questions routed by document.

``cluster/app.py`` builds the application (``serve run cluster.app:app``, or a config file from
``cluster/*.yaml``); ``cluster/ingress.py`` is the HTTP API, ``cluster/reader.py`` today's engine per
replica, multiplexed by document id. Needs the ``cluster`` extra (``ray[serve]``, ``psycopg``).
"""
