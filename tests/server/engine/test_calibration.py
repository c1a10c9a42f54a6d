"""Start-up step costs (server/engine/calibration.py): a calibration taken under load is not kept as
the truth, a stored one is reused only while it still holds. The timings are stood in for (what is
tested is the rule, and a machine under load must not make it flaky); the key and the file are real."""

from __future__ import annotations

import json
import time

import pytest

from runtime.llama import Context, ContextConfig
from server.engine import calibration
from server.engine.contexts import Contexts
from spec.cost import StepCosts

ONE_ROW = 0.01  # seconds
PLAUSIBLE = StepCosts(tuple(ONE_ROW * (1 + 0.5 * k) for k in range(17)))
INFLATED = StepCosts(tuple(ONE_ROW * (1 + 4 * k) for k in range(17)))  # 17 rows = 65x one row: impossible


def test_a_call_of_n_rows_costing_more_than_n_one_row_calls_is_implausible():
    assert calibration.implausible(PLAUSIBLE) is None
    assert calibration.implausible(StepCosts(tuple([1.0] * 17))) is None  # a GPU: rows are nearly free
    assert calibration.implausible(INFLATED) == "a 17-row call measured 65x a one-row call"


@pytest.mark.parametrize(
    ("why", "age_s", "one_row_s", "holds"),
    [
        ("fresh and agreeing", 60.0, ONE_ROW * 1.3, True),
        ("older than a week", calibration.MAX_AGE_S + 1, ONE_ROW, False),
        ("the machine is 10x slower today (busy now, or busy then)", 60.0, ONE_ROW * 10, False),
        ("10x faster today", 60.0, ONE_ROW / 10, False),
    ],
)
def test_a_stored_calibration_still_holds(why, age_s, one_row_s, holds):
    now = 1e9
    assert calibration.still_holds(PLAUSIBLE, now - age_s, one_row_s, now) is holds, why


@pytest.fixture
def ctx(gemma):
    ctx = Context(gemma, ContextConfig(n_ctx=512, n_batch=64, n_ubatch=64, n_threads=1, n_threads_batch=1))
    yield ctx
    ctx.close()


@pytest.fixture
def measured(monkeypatch):
    """Calibrations come from this list, one per measurement; today's one-row decode takes ONE_ROW."""
    results: list[StepCosts] = []
    monkeypatch.setattr(calibration, "calibrate", lambda *a, **k: results.pop(0))
    monkeypatch.setattr(calibration, "one_row_now", lambda *a: ONE_ROW)
    monkeypatch.setattr(calibration, "busy", lambda: None)  # an idle machine
    return results


def test_an_implausible_calibration_is_measured_again_and_only_a_plausible_one_is_kept(ctx, gemma, tmp_path, measured):
    measured += [INFLATED, PLAUSIBLE]
    assert calibration.step_costs(Contexts(ctx), gemma, tmp_path / "calibration.json") == PLAUSIBLE
    (entry,) = json.loads((tmp_path / "calibration.json").read_text()).values()
    assert entry["verify"] == list(PLAUSIBLE.verify) and time.time() - entry["measured_at"] < 60
    assert calibration.step_costs(Contexts(ctx), gemma, tmp_path / "calibration.json") == PLAUSIBLE and not measured, (
        "reused"
    )


def test_a_stored_inflated_calibration_is_not_reused(ctx, gemma, tmp_path, measured):
    measured += [PLAUSIBLE, PLAUSIBLE]
    calibration.step_costs(Contexts(ctx), gemma, tmp_path / "calibration.json")
    path = tmp_path / "calibration.json"
    table = json.loads(path.read_text())
    (key,) = table
    table[key]["verify"] = list(INFLATED.verify)  # as one taken under load by an older docqa would be
    path.write_text(json.dumps(table))
    assert calibration.step_costs(Contexts(ctx), gemma, tmp_path / "calibration.json") == PLAUSIBLE and not measured


def test_a_calibration_measured_under_load_is_used_but_not_stored(ctx, gemma, tmp_path, measured, monkeypatch):
    monkeypatch.setattr(calibration, "busy", lambda: "load average 64.0 on 2 cores")
    measured.append(PLAUSIBLE)
    assert calibration.step_costs(Contexts(ctx), gemma, tmp_path / "calibration.json") == PLAUSIBLE
    assert not (tmp_path / "calibration.json").exists()


def test_a_calibration_file_that_cannot_be_written_is_a_warning(ctx, gemma, tmp_path, measured, caplog):
    """DOCQA_CALIBRATION_FILE in a place this server may not write: it serves, and measures next time."""
    (tmp_path / "a-file").write_text("")
    measured.append(PLAUSIBLE)
    assert calibration.step_costs(Contexts(ctx), gemma, tmp_path / "a-file" / "calibration.json") == PLAUSIBLE
    assert "verify costs not stored" in caplog.text


def test_servers_of_two_data_directories_share_one_calibration_file(tmp_path, gemma_path, measured, monkeypatch):
    """The second server, in another data directory, reuses what the first measured."""
    from tests.conftest import app_client

    shared = tmp_path / "machine" / "calibration.json"
    measured.append(PLAUSIBLE)
    with app_client(tmp_path / "one", gemma_path, calibration_file=shared) as client:
        assert client.get("/health").status_code == 200
    assert not measured and shared.is_file() and not (tmp_path / "one" / "calibration.json").exists()
    with app_client(tmp_path / "two", gemma_path, calibration_file=shared) as client:  # `measured` is empty:
        assert client.get("/health").status_code == 200  # a second measurement would fail here
