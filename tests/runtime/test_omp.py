"""runtime/omp.py: docqa's OpenMP wait default, applied before llama_cpp loads, and the user's own kept."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from runtime import omp

ROOT = Path(__file__).resolve().parents[2]


def test_libgomps_default_when_the_user_set_nothing(monkeypatch):
    env: dict[str, str] = {"PATH": "/bin"}
    assert omp.apply(env).startswith("libgomp's default") and env == {"PATH": "/bin"}
    monkeypatch.setattr(omp, "DEFAULT", {"GOMP_SPINCOUNT": "1000"})
    assert omp.apply(env) == "GOMP_SPINCOUNT=1000 (docqa's default)" and env["GOMP_SPINCOUNT"] == "1000"


def test_the_users_choice_is_kept():
    for given in ({"OMP_WAIT_POLICY": "ACTIVE"}, {"GOMP_SPINCOUNT": "300000"}):
        env = dict(given)
        assert omp.apply(env).endswith("(set by the user)")
        assert env == given


def test_set_before_llama_cpp_is_loaded_in_a_fresh_process():
    """Importing any runtime module (the server's first) applies the choice before libgomp, loaded with
    llama_cpp's library, reads the environment, and says so; the user's own variable wins."""
    env = {k: v for k, v in os.environ.items() if k not in omp.VARIABLES} | {"GOMP_SPINCOUNT": "1000"}
    code = (
        "import sys, os\n"
        "from runtime.llama import Model\n"  # imports llama_cpp, which loads libgomp
        "from runtime.omp import described\n"
        "assert 'llama_cpp' in sys.modules\n"
        "print(os.environ.get('GOMP_SPINCOUNT'), described())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, check=True, timeout=120)  # fmt: skip
    assert out.stdout.strip() == "1000 GOMP_SPINCOUNT=1000 (set by the user)"
