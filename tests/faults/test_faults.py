"""The seeded fault loop (issue 37 item 2; tests/faults/loop.py): kill points at random places of
extraction, prefill, snapshot writing, re-ingest, eviction, a collection's index and 8 questions in
flight, with a full disk, a store outage and a slow disk, the invariant (docs/internals.md "After a
crash") checked after each restart. ``make test`` runs 2 seeds of 10 kill points (one on SQLite, one
on PostgreSQL); ``make test-faults`` the long run (``DOCQA_FAULT_SEEDS``, ``DOCQA_FAULT_KILLS`` per
seed), which writes bench/results/faults.md. Needs root for the tmpfs (tests/smallfs.py), as CI."""

from __future__ import annotations

import os
import re
import time

import pytest

from tests.faults.loop import run
from tests.faults.workload import PHASES
from tests.ingest.samples import pdf

ALICE = "text/gutenberg/alice-in-wonderland-pg11.txt"


@pytest.fixture
def sources(cases):
    book = (cases / ALICE).read_text(encoding="utf-8-sig")

    def text(serial: int, chars: int) -> bytes:
        start = (serial * 1777) % (len(book) - chars)
        return f"Document {serial}.\n\n{book[start : start + chars]}".encode()

    def make_pdf(serial: int) -> bytes:
        start = (serial * 2333) % (len(book) - 2000)
        lines = [re.sub(r"[^A-Za-z0-9 .,;:!?']", " ", book[start + i * 150 : start + i * 150 + 100]) for i in range(10)]
        return pdf([f"Page {i} of document {serial}: {line}" for i, line in enumerate(lines)])

    return text, make_pdf


@pytest.fixture
def postgres(postgres_server):
    from tests.pg import Postgres, pg_bin

    server = Postgres(pg_bin()).start()
    yield server
    server.remove()


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_ten_kill_points_keep_the_invariant(store, request, sources, tmp_path, gemma_path):
    postgres = request.getfixturevalue("postgres") if store == "postgresql" else None
    seed = 37 if store == "sqlite" else 38
    report = run(seed, 10, tmp_path, gemma_path, *sources, postgres=postgres)
    print(report.line())
    assert not report.violations, "\n".join(report.violations)


@pytest.mark.faults
def test_the_long_fault_loop(request, sources, tmp_path, gemma_path):
    seeds = [int(s) for s in os.environ.get("DOCQA_FAULT_SEEDS", "1,2,3").split(",")]
    kills = int(os.environ.get("DOCQA_FAULT_KILLS", "170"))
    seconds = float(os.environ["DOCQA_FAULT_SECONDS"]) if os.environ.get("DOCQA_FAULT_SECONDS") else None
    phases = tuple(p for p in os.environ.get("DOCQA_FAULT_PHASES", "").split(",") if p) or PHASES
    assert set(phases) <= set(PHASES), f"DOCQA_FAULT_PHASES names no phase of {PHASES}: {phases}"
    reports, t0 = [], time.monotonic()
    for i, seed in enumerate(seeds):
        postgres = request.getfixturevalue("postgres") if i % 3 == 2 else None
        root = tmp_path / f"seed{seed}"
        reports.append(run(seed, kills, root, gemma_path, *sources, postgres=postgres, seconds=seconds, phases=phases))
        print(reports[-1].line())
    violations = [v for r in reports for v in r.violations]
    out = os.environ.get("DOCQA_FAULT_RESULTS")
    if out:
        lines = [f"- {r.line()}" for r in reports]
        total = sum(r.kills for r in reports)
        with open(out, "a", encoding="utf-8") as f:
            took, found = time.monotonic() - t0, len(violations)
            only = "" if phases == PHASES else f" (phases {', '.join(phases)} only)"
            f.write(f"\n{total} kill points over seeds {seeds}{only} in {took:.0f} s, {found} violations:\n\n")
            f.write("\n".join(lines) + "\n")
            f.writelines(f"  - {v}\n" for v in violations)
    assert not violations, "\n".join(violations)
