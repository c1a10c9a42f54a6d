"""``python -m server`` as an operator starts it (server/api/serve.py): what it says when it cannot start."""

from __future__ import annotations

import subprocess
import sys

from store.sqlite_store import SqliteStore
from testkit.live import ROOT, Live
from tests.conftest import make_settings


def test_a_damaged_database_stops_the_start_with_the_right_advice(tmp_path, gemma_path):
    """A corrupt database header got "make it writable by this user" advice, which cannot help."""
    data = tmp_path / "data"
    SqliteStore(data).close()
    with (data / "docqa.sqlite3").open("r+b") as f:
        f.write(bytes(100))  # the header
    env = Live(data, gemma_path).env
    run = subprocess.run(
        [sys.executable, "-m", "server"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("docqa: ") and "is damaged" in last and "backup" in last, run.stderr[-2000:]
    assert "writable" not in last


def test_the_measured_layout_is_served_only_where_the_setting_is_auto(tmp_path):
    from server.api.serve import with_layout
    from server.engine.layout import Choice
    from server.engine.selftest import SelfTest

    pair = SelfTest("cached", None, "", Choice(False, None, None, "", pair=True))
    plain = SelfTest("passed", False, "", Choice(True, None, None, ""))
    kept = SelfTest("passed", None, "", Choice(False, None, None, ""))
    auto = make_settings(tmp_path, tmp_path / "m.gguf")
    assert with_layout(auto, pair).cpu_repack == "pair" and with_layout(auto, pair).read_plain
    assert with_layout(auto, plain).cpu_repack == "off"
    assert with_layout(auto, kept).cpu_repack == "auto"
    assert with_layout(make_settings(tmp_path, tmp_path / "m.gguf", cpu_repack="on"), pair).cpu_repack == "on"


def test_the_pair_is_not_chosen_where_its_reader_would_crowd_the_memory(tmp_path, gemma_path):
    from server.api.serve import with_layout
    from server.config.memory import reader_cost
    from server.engine.layout import Choice
    from server.engine.selftest import SelfTest

    pair = SelfTest("cached", None, "", Choice(False, None, None, "", pair=True))
    settings = make_settings(tmp_path, gemma_path)
    need = sum(reader_cost(settings, gemma_path))
    assert with_layout(settings, pair, lambda: (need, 4 * need)).cpu_repack == "pair"
    assert with_layout(settings, pair, lambda: (need, need)).cpu_repack == "auto", "one instance, as it was"
    assert with_layout(settings, pair, lambda: None).cpu_repack == "pair", "not known: the measurement decides"
