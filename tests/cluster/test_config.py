"""The Serve config files in the repo are valid for this Ray and name the app's deployments, and
``docqa serve --cluster`` is wired to ``python -m cluster`` (no cluster is started here)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.parametrize("name", ["serve.yaml", "serve-cpu.yaml"])
def test_serve_configs_are_valid_and_name_the_deployments(name):
    schema = pytest.importorskip("ray.serve.schema", reason="the `cluster` extra is not installed")
    import yaml  # Ray's dependency

    config = schema.ServeDeploySchema.model_validate(yaml.safe_load((ROOT / "cluster" / name).read_text()))
    (app,) = config.applications
    assert app.import_path == "cluster.app:app"
    deployments = {d.name: d for d in app.deployments}
    assert set(deployments) == {"Reader", "Ingress"}
    reader = deployments["Reader"]
    assert reader.autoscaling_config["target_ongoing_requests"] > 0  # queue depth is the signal
    resources = reader.ray_actor_options
    assert resources.num_gpus == 1 if name == "serve.yaml" else resources.num_cpus == 1


def test_docqa_serve_cluster_runs_the_cluster_package(monkeypatch):
    from click.testing import CliRunner

    from server.tools import cli

    calls = []
    monkeypatch.setattr(cli.os, "execv", lambda exe, argv: calls.append(argv))
    monkeypatch.setattr("server.api.serve.main", lambda: calls.append("single"))
    result = CliRunner().invoke(cli.main, ["serve", "--cluster", "3", "--port", "8123"])
    assert result.exit_code == 0, result.output
    assert calls[0][1:] == ["-m", "cluster", "--readers", "3"]
