"""A local Ray with N reader replicas behind the ingress: ``docqa serve --cluster N`` for trying the
cluster on one machine, and what the cluster tests and bench/cluster.py start. The replicas share
this machine's data directory, and its SQLite store unless ``DOCQA_DATABASE_URL`` names a
PostgreSQL; each reader gets ``cpus_per_reader`` cores."""

from __future__ import annotations

import logging
import os
import time

log = logging.getLogger("docqa.cluster")
APP_NAME = "docqa"


def start(num_readers: int, host: str, port: int, cpus_per_reader: int = 1, env: dict[str, str] | None = None) -> str:
    """Start Ray and Serve and deploy the app; its URL. ``env``: DOCQA_* settings for every replica
    (default: this process's), also set here, where the ingress's module reads them."""
    import ray
    from ray import serve

    env = dict(env if env is not None else {k: v for k, v in os.environ.items() if k.startswith("DOCQA_")})
    env.setdefault("DOCQA_N_THREADS", str(cpus_per_reader))
    env["DOCQA_DATA_DIR"] = os.path.abspath(env.get("DOCQA_DATA_DIR", "data"))
    env.setdefault("DOCQA_HOST", host)  # what the ingress's Host check allows, as `docqa serve` binds
    os.environ.update(env)
    ray.init(
        num_cpus=num_readers * cpus_per_reader,
        runtime_env={"env_vars": env},
        include_dashboard=False,
        logging_level="warning",
        log_to_driver=False,
    )
    serve.start(http_options={"host": host, "port": port})
    from cluster.app import build  # after the environment is set: the ingress reads it at import

    serve.run(build(num_readers, num_cpus=cpus_per_reader), name=APP_NAME, route_prefix="/")
    return f"http://{host}:{port}"


def stop() -> None:
    import ray
    from ray import serve

    serve.shutdown()
    ray.shutdown()


def serve_locally(num_readers: int, host: str, port: int, cpus_per_reader: int = 1) -> None:
    """:func:`start`, then serve until Ctrl-C."""
    url = start(num_readers, host, port, cpus_per_reader)
    log.info("docqa cluster with %d readers at %s (Ctrl-C stops it)", num_readers, url)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        stop()
