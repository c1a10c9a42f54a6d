"""The Serve application: the ingress in front of the reader deployment.

``serve run cluster.app:app`` (one reader, defaults), or a config file (``cluster/serve.yaml`` for
GPUs, ``cluster/serve-cpu.yaml``) whose ``deployments`` set replicas, autoscaling and resources;
``docqa serve --cluster N`` builds it with :func:`build` on a local Ray.
"""

from __future__ import annotations

from ray.serve import Application

from cluster.ingress import Ingress
from cluster.reader import Reader


def build(num_replicas: int | None = None, num_cpus: float = 1, num_gpus: float = 0) -> Application:
    """The application with ``num_replicas`` readers (None: the deployment's or config's), each on
    ``num_cpus`` cores and ``num_gpus`` GPUs."""
    options: dict = {"ray_actor_options": {"num_cpus": num_cpus, "num_gpus": num_gpus}}
    if num_replicas is not None:
        options["num_replicas"] = num_replicas
    return Ingress.bind(Reader.options(**options).bind())


app = build()
