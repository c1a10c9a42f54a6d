"""``docqa serve --cluster N``: a local Ray with N reader replicas behind the ingress, for trying the
cluster on one machine. The replicas share this machine's data directory, and the SQLite store
unless ``DOCQA_DATABASE_URL`` names a PostgreSQL; each reader gets ``cpus_per_reader`` cores."""

from __future__ import annotations

import logging
import os

log = logging.getLogger("docqa.cluster")


def serve_locally(num_readers: int, host: str, port: int, cpus_per_reader: int = 1) -> None:
    """Start Ray and Serve, deploy the app, and block until Ctrl-C."""
    import ray
    from ray import serve

    env = {k: v for k, v in os.environ.items() if k.startswith("DOCQA_")}
    env.setdefault("DOCQA_N_THREADS", str(cpus_per_reader))
    env["DOCQA_DATA_DIR"] = os.path.abspath(os.environ.get("DOCQA_DATA_DIR", "data"))
    env["DOCQA_HOST"] = host  # what the ingress's Host check allows, as `docqa serve` binds
    os.environ.update(env)
    ray.init(num_cpus=num_readers * cpus_per_reader, runtime_env={"env_vars": env}, include_dashboard=False)
    serve.start(http_options={"host": host, "port": port})
    from cluster.app import build

    serve.run(build(num_readers, num_cpus=cpus_per_reader), name="docqa", route_prefix="/", blocking=True)
