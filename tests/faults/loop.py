"""The seeded fault loop (issue 37): a seed picks a schedule of kill points (tests/faults/workload.py
phases, SIGKILL or SIGTERM, where in the phase, and a storage fault: tests/faults/lab.py); each is
run against a real server, the server restarted, and the invariant checked over every document
(tests/faults/invariant.py). ``run(seed, n)`` returns a Report; a violation names its seed and kill
point, so ``make test-faults FAULT_SEEDS=<seed> FAULT_KILLS=<n>`` replays it.
"""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.faults.invariant import World, check
from tests.faults.lab import MIB, Fault, Lab
from tests.faults.workload import PHASES, Workload

FAULTS_SQLITE = ("none", "none", "full_disk", "slow_disk")
FAULTS_PG = (*FAULTS_SQLITE, "store_outage")
BUDGET = 24 * MIB  # DOCQA_DISK_BUDGET_BYTES: about 5 snapshots of the loop's documents, so eviction happens
TMPFS = 96 * MIB


@dataclass(frozen=True, slots=True)
class KillPoint:
    index: int
    phase: str
    sig: int
    at: float  # 0..1: where in the phase
    fault: str

    def __str__(self) -> str:
        return f"#{self.index} {self.phase} {signal.Signals(self.sig).name} at {self.at:.2f} fault={self.fault}"


def schedule(seed: int, n: int, postgres: bool, phases: tuple[str, ...] = PHASES) -> list[KillPoint]:
    """The seed's ``n`` kill points: the same for the same seed (and ``phases``, all of them by default)."""
    rng = random.Random(seed)
    faults = FAULTS_PG if postgres else FAULTS_SQLITE
    sigs = (signal.SIGKILL, signal.SIGKILL, signal.SIGTERM)
    return [KillPoint(i, rng.choice(phases), rng.choice(sigs), rng.random(), rng.choice(faults)) for i in range(n)]


@dataclass
class Report:
    seed: int
    store: str
    kills: int = 0
    seconds: float = 0.0
    violations: list[str] = field(default_factory=list)
    phases: Counter = field(default_factory=Counter)
    landed: dict[str, int] = field(default_factory=dict)
    faults: Counter = field(default_factory=Counter)
    signals: Counter = field(default_factory=Counter)
    documents_checked: int = 0
    spent: Counter = field(default_factory=Counter)  # seconds by part: phase, kill, start, check

    def line(self) -> str:
        return (
            f"seed {self.seed} ({self.store}): {self.kills} kill points in {self.seconds:.0f} s, "
            f"{len(self.violations)} violations; phases {dict(self.phases)} (landed inside {self.landed}); "
            f"faults {dict(self.faults)}; signals {dict(self.signals)}; {self.documents_checked} document checks; "
            f"seconds in {', '.join(f'{k} {v:.0f}' for k, v in self.spent.items())}"
        )


def run(
    seed: int, n: int, root: Path, model: Path, text, pdf, postgres=None, seconds: float | None = None,
    phases: tuple[str, ...] = PHASES,
) -> Report:  # fmt: skip
    """Run seed ``seed``'s first ``n`` kill points in ``root`` (module docstring), or as many as
    ``seconds`` allow (the report says how many ran); ``phases``: the phases drawn from (all)."""
    report = Report(seed, "postgresql" if postgres is not None else "sqlite")
    env = {
        "DOCQA_N_CTX": "2048", "DOCQA_ANSWER_RESERVE": "512", "DOCQA_BATCH_INVARIANT": "true",
        "DOCQA_DISK_BUDGET_BYTES": str(BUDGET), "DOCQA_SHUTDOWN_TIMEOUT_S": "2", "DOCQA_RESUME_CHECK_S": "2",
        "DOCQA_N_SEQ_MAX": "4", "DOCQA_N_BATCH": "128", "DOCQA_N_UBATCH": "128",
    }  # fmt: skip
    folder = root / "watched" / "docs"  # on the disk, not the tmpfs: the server reads it as it is
    env |= {"DOCQA_WATCH": str(folder), "DOCQA_WATCH_SETTLE_S": "0.2", "DOCQA_WATCH_RESCAN_S": "2"}
    lab = Lab(root, model, TMPFS, postgres, **env)
    rng = random.Random(seed * 7919 + 1)
    world, work = World(), Workload(text, pdf, rng, folder)
    work.setup_folder(world)
    t0 = time.monotonic()
    try:
        server = lab.start()
        for point in schedule(seed, n, postgres is not None, phases):
            if seconds is not None and time.monotonic() - t0 > seconds:
                break
            fault = Fault(point.fault, lab, rng)
            work._full_disk = point.fault == "full_disk"
            fault.begin()
            t = time.monotonic()

            def kill(p=point) -> None:
                nonlocal t
                report.spent["phase"] += time.monotonic() - t
                t = time.monotonic()
                lab.kill(p.sig)
                report.spent["kill"] += time.monotonic() - t

            try:
                work.run(point.phase, point.at, server, lab.data, world, kill)
            except (AssertionError, OSError, ValueError, KeyError) as exc:  # a fault met the workload: kill now
                print(f"seed {seed} kill point {point}: the workload stopped early: {exc!r}")
            finally:
                lab.kill(signal.SIGKILL)  # a phase that failed before its kill
                fault.end()
            report.kills += 1
            report.phases[point.phase] += 1
            report.faults[point.fault] += 1
            report.signals[signal.Signals(point.sig).name] += 1
            t = time.monotonic()
            try:
                server = lab.start()
                report.spent["start"] += time.monotonic() - t
                t = time.monotonic()
            except (RuntimeError, TimeoutError) as exc:  # a restart that fails breaks the invariant outright
                report.violations.append(f"seed {seed} kill point {point}: the server did not start again: {exc}")
                break
            try:
                found = check(server, lab.data, world, BUDGET, lab.log_tail(10**9))
            except (AssertionError, OSError, ValueError, KeyError) as exc:
                found = [f"checking the invariant failed: {exc!r}"]
            report.spent["check"] += time.monotonic() - t
            report.documents_checked += len(world.ready)
            report.violations += [f"seed {seed} kill point {point}: {v}" for v in found]
            if found:
                print(f"VIOLATION seed {seed} kill point {point}:", *found, "server log:", lab.log_tail(), sep="\n  ")
    finally:
        report.seconds = time.monotonic() - t0
        report.landed = dict(work.hit)
        lab.close()
    return report
