"""``python -m cluster --readers N`` (what ``docqa serve --cluster N`` runs): see cluster/local.py."""

from __future__ import annotations

import logging
import os
import sys

import click


@click.command()
@click.option("--readers", type=click.IntRange(1, 64), default=2, show_default=True, help="reader replicas")
@click.option("--cpus-per-reader", type=click.IntRange(1, 256), default=1, show_default=True)
def main(readers: int, cpus_per_reader: int) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        import ray.serve  # noqa: F401

        from cluster.local import serve_locally
    except ImportError as exc:
        sys.exit(f"docqa: the cluster needs Ray Serve ({exc}); pip install -e '.[cluster]'")
    host = os.environ.get("DOCQA_HOST", "127.0.0.1")
    port = int(os.environ.get("DOCQA_PORT", "8000"))
    serve_locally(readers, host, port, cpus_per_reader)


if __name__ == "__main__":
    main()
