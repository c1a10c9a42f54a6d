"""``docqa tune``: replay the recorded traffic against candidate settings on this machine, print a
table of throughput and TTFT, and write the winner to ``DATA_DIR/settings.json``.

Candidates come from ``--candidate KEY=VALUE,...`` (each one measured), or by default from the axes
of :func:`default_axes`, searched one axis at a time: every value of the first axis is measured
against the current settings, the best is kept, then the next axis is measured on top of it, so the
winner is always a measured configuration and the cost grows with the sum of the axes' values, not
their product. Each candidate runs in a real server process (server/tools/candidate.py) that prefills the
recorded documents and answers the replayed questions (server/tools/replay.py).

The winner: of the candidates that answered every question, those within ``--tolerance`` of the
best throughput, and of those the lowest TTFT p95. Replayed at the recorded arrival times, every
candidate that keeps up serves about the same tok/s, so its TTFT decides.
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from server.config.tuned import TUNABLE, check_value, read_tuned, settings_path, shadowed, write_tuned

#: Shorthands of --candidate: kv=q8_0 sets both KV cache types.
SHORTHANDS = {"kv": ("type_k", "type_v")}
DATA_DIR_HELP = "the server's data directory (documents, traffic log) [default: DOCQA_DATA_DIR, else data]"
LOG_HELP = "traffic log to replay [default: DATA_DIR/traffic.jsonl and its rotated files]"
TOLERANCE_HELP = "throughput within this fraction of the best counts as equal; then TTFT p95 decides"


@dataclass(slots=True)
class Measured:
    """One candidate and what its replay gave."""

    settings: dict[str, Any]  # the candidate's settings (TUNABLE keys)
    label: str
    result: Any = None  # server.tools.replay.ReplayResult, or None when the server failed
    failure: str = ""

    @property
    def ok(self) -> bool:
        return self.result is not None and not self.result.errors and bool(self.result.stats)


def parse_candidate(text: str, fields: dict) -> dict[str, Any]:
    """``n_seq_max=8,kv=q8_0,default_draft_tokens=adaptive`` -> checked settings; ValueError says why."""
    out: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"{item!r} is not KEY=VALUE")
        value: Any = None if raw.lower() in ("adaptive", "unset", "none") else raw
        for name in SHORTHANDS.get(key, (key,)):
            if name not in TUNABLE:
                raise ValueError(f"{key} cannot be tuned (tunable: {', '.join(TUNABLE)}, kv)")
            out[name] = check_value(name, value, fields)
    if not out:
        raise ValueError(f"empty candidate {text!r}")
    return out


def default_axes(current: dict[str, Any], n_batch: int, has_mtp: bool) -> list[tuple[str, list[dict]]]:
    """The issue's axes, in the order searched: questions at once, the window policy, MTP draft depth
    (models with an MTP head only), the micro-batch, the KV cache type. Each value is a dict of
    settings; the current value is always among them."""
    axes = [
        ("n_seq_max", [{"n_seq_max": n} for n in (1, 2, 4, 8)]),
        ("default_draft_tokens", [{"default_draft_tokens": w} for w in (None, 0, 8)]),
        ("mtp_draft_tokens", [{"mtp_draft_tokens": d} for d in (1, 2, 3)] if has_mtp else []),
        ("n_ubatch", [{"n_ubatch": u} for u in (128, 256, 512) if u <= n_batch]),
        ("kv", [{"type_k": t, "type_v": t} for t in ("f16", "q8_0")]),
    ]
    for _, values in axes:
        now = {k: current[k] for k in values[0]} if values else None
        if values and now not in values:
            values.insert(0, now)
    return [(name, values) for name, values in axes if len(values) > 1]


def label(settings: dict[str, Any], current: dict[str, Any]) -> str:
    """The settings that differ from the current ones, as --candidate would write them."""
    diff = {k: v for k, v in settings.items() if current.get(k) != v}
    if {"type_k", "type_v"} & diff.keys() and settings.get("type_k") == settings.get("type_v"):
        diff.pop("type_v", None)
        diff["kv"] = diff.pop("type_k", settings["type_k"])
    text = ",".join(f"{k}={'adaptive' if v is None else v}" for k, v in sorted(diff.items()))
    return text or "current settings"


def winner(measured: list[Measured], tolerance: float) -> Measured | None:
    """Of the candidates that answered every question, those within ``tolerance`` (a fraction) of the
    best tok/s, and of those the lowest TTFT p95; None when no candidate answered every question."""
    good = [m for m in measured if m.ok]
    if not good:
        return None
    best = max(m.result.tokens_per_s for m in good)
    near = [m for m in good if m.result.tokens_per_s >= (1 - tolerance) * best]
    return min(near, key=lambda m: (m.result.ttft_ms(0.95), -m.result.tokens_per_s))


def render(measured: list[Measured], best: Measured | None, recorded_concurrency: float) -> str:
    """A Markdown table, the winner marked with ``*`` and in bold."""
    lines = [
        "| candidate | answers | tok/s | TTFT p50 ms | TTFT p95 ms | concurrency | accepted/drafted |",
        "|---|---|---|---|---|---|---|",
        f"| (recorded) | | | | | {recorded_concurrency:.2f} | |",
    ]
    for m in measured:
        r = m.result
        if r is None:
            reason = (m.failure.splitlines() or ["?"])[0][:80].replace("|", "/")
            lines.append(f"| {m.label} | failed: {reason} | | | | | |")
            continue
        conc = sum(r.concurrency) / len(r.concurrency) if r.concurrency else float("nan")
        name = f"**{m.label}** *" if m is best else m.label
        lines.append(
            f"| {name} | {len(r.stats)}/{len(r.stats) + len(r.errors)} | {r.tokens_per_s:.1f} | "
            f"{r.ttft_ms(0.5):.0f} | {r.ttft_ms(0.95):.0f} | {conc:.2f} | {r.accepted_per_drafted:.0%} |"
        )
    return "\n".join(lines)


class Tuner:
    """Measures candidates on one workload, each in a fresh data directory under ``data_dir``."""

    def __init__(self, data_dir: Path, model: Path, workload, base: dict, current: dict, start_timeout_s: float):
        self.data_dir, self.model, self.workload = data_dir, model, workload
        self.base = base  # the settings file's values that the server uses (the environment does not hide them)
        self.current = current  # every TUNABLE setting, as the server runs it now
        self.start_timeout_s = start_timeout_s
        self.measured: dict[tuple, Measured] = {}

    def measure(self, settings: dict[str, Any], name: str) -> Measured:
        """Replay on ``settings`` (over ``base``); a configuration already measured is not run again."""
        from server.tools.candidate import CandidateFailed, CandidateServer
        from server.tools.replay import replay

        full = {**self.base, **settings}
        key = tuple(sorted({**self.current, **settings}.items(), key=lambda kv: kv[0]))  # what the server runs
        if key in self.measured:
            return self.measured[key]
        m = self.measured[key] = Measured(settings, name)
        click.echo(f"tune: {name} ...", err=True)
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="tune-", dir=self.data_dir) as tmp:
            server = CandidateServer(Path(tmp) / "data", self.model, full, self.data_dir)
            try:
                with server.start(self.start_timeout_s):
                    t_started = time.monotonic()
                    m.result = replay(server, self.workload)
                click.echo(
                    f"tune: {name}: server ready in {t_started - t0:.1f} s, documents and replay "
                    f"{time.monotonic() - t_started:.1f} s (questions {m.result.wall_s:.1f} s)",
                    err=True,
                )
            except (CandidateFailed, RuntimeError, OSError) as exc:
                m.failure = str(exc)
                click.echo(f"tune: {name} failed: {exc}", err=True)
        return m

    def search(self, axes: list[tuple[str, list[dict]]], tolerance: float) -> None:
        """One axis at a time, each on top of the best so far."""
        chosen: dict[str, Any] = {}
        for _, values in axes:
            tried = [self.measure({**chosen, **v}, label({**chosen, **v}, self.current)) for v in values]
            best = winner(tried, tolerance)
            if best is not None:
                chosen = dict(best.settings)


@click.command()
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None, help=DATA_DIR_HELP)
@click.option("--log", "log_path", type=click.Path(dir_okay=False, path_type=Path), default=None, help=LOG_HELP)
@click.option(
    "--candidate",
    "candidates",
    multiple=True,
    metavar="KEY=VALUE,...",
    help="settings to measure (repeatable); keys: " + ", ".join(TUNABLE) + ", kv (both KV types)",
)
@click.option("--last", type=click.IntRange(1), default=100, show_default=True, help="replay the last N answers")
@click.option("--speed", type=click.FloatRange(min=0.01), default=1.0, show_default=True, help="replay N times faster")
@click.option("--max-gap-s", type=click.FloatRange(min=0), default=5.0, show_default=True, help="longest idle gap kept")
@click.option("--tolerance", type=click.FloatRange(0, 1), default=0.05, show_default=True, help=TOLERANCE_HELP)
@click.option("--write/--no-write", default=True, show_default=True, help="write the winner to DATA_DIR/settings.json")
def tune(data_dir, log_path, candidates, last, speed, max_gap_s, tolerance, write) -> None:
    """Replay recorded traffic against candidate settings; print throughput and TTFT; keep the winner."""
    from ingest.prompt import layout_for
    from runtime.llama import Model
    from runtime.models import model_path as embedded_path
    from server.config.settings import Settings
    from server.engine.traffic import LOG_FILE, read_log_counted
    from server.tools.replay import build_workload
    from store.stores import open_store

    try:
        settings = Settings(**({"data_dir": data_dir} if data_dir else {}))
        fields = Settings.model_fields
        grid = [parse_candidate(c, fields) for c in candidates]
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    data_dir = settings.data_dir
    records, skipped = read_log_counted(log_path or data_dir / LOG_FILE)
    records = records[-last:]
    if skipped:
        click.echo(f"skipped {skipped} lines of the traffic log that are not valid records", err=True)
    if not records:
        raise click.ClickException(f"no answers recorded in {log_path or data_dir / LOG_FILE}; serve some first")
    model_path = settings.model_path or embedded_path(settings.model, data_dir)
    tok = Model(model_path, n_gpu_layers=0, extra_bufts=False)  # the tokenizer; weights stay mapped, unread
    store = open_store(data_dir, settings.database_url)
    try:
        workload = build_workload(records, store, tok, layout_for(tok), speed, max_gap_s)
        has_mtp = tok.n_layer_nextn > 0 and settings.mtp != "off"
    finally:
        store.close()
        tok.close()
    if not workload.arrivals:
        raise click.ClickException("none of the recorded documents is in the data directory any more")
    click.echo(
        f"tune: {len(workload.arrivals)} answers on {len(workload.documents)} documents "
        f"({workload.dropped} dropped: document gone or not ready), question length off by "
        f"{workload.question_token_error / len(workload.arrivals):.2f} tokens on average",
        err=True,
    )
    path = settings_path(data_dir)
    base_file = read_tuned(path, fields)
    base = {k: v for k, v in base_file.items() if k not in shadowed(tuple(base_file))}
    current = {k: getattr(settings, k) for k in TUNABLE}
    tuner = Tuner(data_dir, model_path, workload, base, current, settings.selftest_timeout_s + 300)
    if grid:
        for c in grid:
            tuner.measure(c, label(c, {}))  # as given
    else:
        tuner.search(default_axes(current, settings.n_batch, has_mtp), tolerance)
    measured = list(tuner.measured.values())
    best = winner(measured, tolerance)
    recorded = sum(a.concurrency for a in workload.arrivals) / len(workload.arrivals)
    click.echo(render(measured, best, recorded))
    if best is None:
        click.echo("tune: no candidate answered every question; nothing written", err=True)
        sys.exit(1)
    if write:
        write_tuned(path, {**base_file, **best.settings})
        click.echo(f"winner: {best.label}; written to {path}")
        for name in shadowed(tuple(best.settings)):
            click.echo(f"note: DOCQA_{name.upper()} is set in this environment and wins over {path}", err=True)
        if any(best.settings.get(k, current[k]) != current[k] for k in ("type_k", "type_v")):
            click.echo(
                "note: the KV cache type changed: documents ingested before are refused (409) until they are "
                "prefilled again with POST /v1/documents/{id}/reingest",
                err=True,
            )
    else:
        click.echo(f"winner: {best.label} (not written)")
