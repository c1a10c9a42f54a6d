"""Start-up self-test: a native crash in llama.cpp becomes a message, never a bare segfault.

Before the server binds its port, a child process loads the configured model with the configured
context settings and decodes a 1-row call and a full verify call (``MAX_WINDOW + 1`` rows; plus one
MTP step when the model drafts with MTP). Then:

* the child exits normally: the settings are safe;
* it dies by a signal (or hangs past ``selftest_timeout_s``) with llama.cpp's extra CPU buffer types
  on: once more without them (``use_extra_bufts = False``, llama-server's ``--no-repack``), and, if that
  works, the server runs that way and logs a warning naming the CPU feature (the AMX crash of
  llama.cpp issue 20824 on Xeon Sapphire Rapids and later: a general-protection fault at
  ``ldtilecfg`` in ``ggml_backend_amx_mul_mat`` on the first decode);
* it dies again: :class:`SelfTestFailed`, whose message names the model, the settings and the signal.

A Python-level failure in the child (a missing file, a context that does not fit) is not a crash:
the engine reports it at load as before.

Where the child passed with ``DOCQA_CPU_REPACK=auto`` on a CPU-only build with repacking kernels, the
weight layout is then measured and chosen (server/engine/layout.py): the plain weights where they
read faster without slowing answers; and with ``DOCQA_FLASH_ATTN=auto``, flash attention, timed at a
document's depth.

The result is kept in ``data_dir/selftest.json`` per (model fingerprint, llama.cpp build and system
info, context settings), so a normal restart starts no child.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import signal
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from runtime.atomic import write_atomic
from runtime.llama import Context, Model, model_fingerprint
from runtime.models import model_path as embedded_path
from runtime.system import backends, build_id, features, has_amx_kernels
from server.config.memory import context_config
from server.config.settings import Settings
from server.engine import layout
from server.engine.layout import Choice
from spec.limits import MAX_WINDOW

log = logging.getLogger("docqa.selftest")
CACHE_FILE = "selftest.json"
#: Settings that shape what the child loads and decodes; any change runs the test again.
_KEYED = (
    "n_ctx n_batch n_ubatch n_threads n_threads_batch n_gpu_layers type_k type_v flash_attn swa_full mtp "
    "n_rs_seq n_seq_max cpu_repack"
).split()
#: What a kept result holds; a result kept by an older version is measured again (2: flash attention
#: chosen with the weight layout, server/engine/layout.py; 3: timed after 2,048 tokens, not 1,024).
MEASURES = 3

Probe = Callable[[Settings, Path, "bool | None"], None]
Measure = Callable[[Settings, Path], Choice]


class SelfTestFailed(Exception):
    """The model crashed the child with and without the fallback; the message says what to do."""


@dataclass(frozen=True, slots=True)
class SelfTest:
    """What the server should load with. ``status``: passed, fallback, cached, skipped or inconclusive."""

    status: str
    extra_bufts: bool | None  # for runtime.llama.Model (None: the build decides)
    note: str = ""
    layout: Choice | None = None  # the measured weight layout (server/engine/layout.py); None: not measured


def probe(settings: Settings, model_path: Path, extra_bufts: bool | None) -> None:
    """Runs in the child: load, create the contexts the engine creates, decode 1 and 17 rows."""
    model = Model(
        model_path, n_gpu_layers=settings.n_gpu_layers, load_mtp=settings.mtp != "off", extra_bufts=extra_bufts
    )
    config = context_config(settings, model.is_recurrent)
    ctx = Context(model, config)
    token = max(model.bos, 0)
    for n_rows in (1, MAX_WINDOW + 1):
        ctx.decode([token] * n_rows, 0, outputs="all")
        ctx.logits().argmax(axis=1)
        ctx.seq_rm(0, 0)
    if model.mtp_loaded:
        import numpy as np

        mtp = Context(model, replace(config, mtp=True, n_rs_seq=0))
        mtp.decode([token], 0, outputs="all", embd=np.zeros((1, mtp.n_embd), dtype=np.float32))
        mtp.close()
    ctx.close()
    model.close()


def _child(run: Probe, settings: Settings, model_path: Path, extra_bufts: bool | None, errors) -> None:
    try:
        run(settings, model_path, extra_bufts)
    except BaseException as exc:  # reported to the parent; a signal never gets here
        errors.send(f"{type(exc).__name__}: {exc}")
        traceback.print_exc()
        raise SystemExit(1) from None


@dataclass(frozen=True, slots=True)
class _Outcome:
    crashed: str | None = None  # "SIGSEGV", "a hang of 600 s": the child died or was killed
    error: str | None = None  # a Python exception in the child


def _run_child(run: Probe, settings: Settings, model_path: Path, extra_bufts: bool | None) -> _Outcome:
    mp = multiprocessing.get_context("spawn")
    receive, send = mp.Pipe(duplex=False)
    child = mp.Process(target=_child, args=(run, settings, model_path, extra_bufts, send), name="docqa-selftest")
    child.start()
    send.close()
    child.join(settings.selftest_timeout_s)
    if child.is_alive():
        child.kill()
        child.join()
        return _Outcome(crashed=f"no result within {settings.selftest_timeout_s:.0f} s (killed)")
    code = child.exitcode
    if code is not None and code < 0:
        return _Outcome(crashed=signal.Signals(-code).name)
    if code:
        return _Outcome(error=receive.recv() if receive.poll() else f"exit code {code}")
    return _Outcome()


def _key(settings: Settings, model_path: Path) -> str:
    fields = {name: getattr(settings, name) for name in _KEYED}
    raw = json.dumps([model_fingerprint(model_path), build_id(), fields, MEASURES], sort_keys=True, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def _describe(settings: Settings, model_path: Path) -> str:
    s = settings
    return (
        f"{model_path.name} (n_ctx {s.n_ctx}, n_batch {s.n_batch}/{s.n_ubatch}, KV {s.type_k}/{s.type_v}, "
        f"flash_attn {s.flash_attn}, n_gpu_layers {s.n_gpu_layers}, {s.n_threads} threads)"
    )


def check(settings: Settings, run: Probe | None = None, choose: Measure | None = None) -> SelfTest:
    """Run the self-test (or read its cached result) and return what the server should load with.

    ``run``: the child's probe (a test's own; then the layout is measured only with ``choose``);
    ``choose``: what measures and chooses the weight layout (server/engine/layout.py ``measured``).
    Raises SelfTestFailed when the model crashes the child with the fallback too, or with an explicit
    ``cpu_repack`` setting, which is honoured rather than overridden.
    """
    if not settings.selftest:
        return SelfTest("skipped", settings.extra_bufts)
    if run is None:
        run, choose = probe, choose or layout.measured
    model_path = settings.model_path or embedded_path(settings.model, settings.data_dir)
    if not Path(model_path).is_file():
        return SelfTest("inconclusive", settings.extra_bufts, f"no model file at {model_path}")
    cache = settings.data_dir / CACHE_FILE
    key = _key(settings, model_path)
    known = _read(cache).get(key)
    if known is not None:
        chosen = Choice.from_dict(known["layout"]) if known.get("layout") else None
        return SelfTest("cached", known["extra_bufts"], known.get("note", ""), chosen)
    log.info(  # a first start (or new settings) is silent for a minute or two otherwise
        "self-test: loading the model in a child process and timing this CPU's kernels (once per model, "
        "build and settings; about 2 minutes on 2 idle cores; kept in %s)",
        cache,
    )
    first = _run_child(run, settings, model_path, settings.extra_bufts)
    if first.error is not None:
        return SelfTest("inconclusive", settings.extra_bufts, f"the self-test could not load the model: {first.error}")
    if first.crashed is None:
        result = SelfTest("passed", settings.extra_bufts)
        if choose is not None and _layout_matters(settings):
            chosen = choose(settings, model_path)
            log.info("weight layout: %s", chosen.note)
            result = SelfTest("passed", False if chosen.plain else settings.extra_bufts, chosen.note, chosen)
    elif settings.cpu_repack == "auto":
        feature = "AMX_INT8 kernels" if has_amx_kernels() else "CPU_REPACK kernels"
        log.warning(
            "the self-test of %s died (%s) with llama.cpp's extra CPU buffer types (%s; llama.cpp issue 20824); "
            "retrying without them (DOCQA_CPU_REPACK=off, as llama-server's --no-repack)",
            model_path.name,
            first.crashed,
            feature,
        )
        second = _run_child(run, settings, model_path, False)
        if second.crashed is not None or second.error is not None:
            raise SelfTestFailed(_failure(settings, model_path, first.crashed, second.crashed or second.error))
        note = f"{first.crashed} with the {feature}; serving with DOCQA_CPU_REPACK=off"
        log.warning("the self-test passed without extra CPU buffer types: %s", note)
        result = SelfTest("fallback", False, note)
    else:
        raise SelfTestFailed(_failure(settings, model_path, first.crashed, None))
    _write(cache, key, result)
    return result


def _layout_matters(settings: Settings) -> bool:
    """Whether the weight layout is this CPU's to choose: DOCQA_CPU_REPACK=auto, no GPU backend in the
    build, and repacking (or AMX) kernels in it."""
    cpu = features().get("CPU", {})
    return settings.cpu_repack == "auto" and not backends() and "1" in (cpu.get("REPACK"), cpu.get("AMX_INT8"))


def _failure(settings: Settings, model_path: Path, first: str, second: str | None) -> str:
    how = f"died ({first}) with DOCQA_CPU_REPACK={settings.cpu_repack}"
    if second is not None:
        how = f"died ({first}) with llama.cpp's extra CPU buffer types and again ({second}) without them"
    return (
        f"docqa: the start-up self-test of {_describe(settings, model_path)} {how}. This llama.cpp build "
        f"cannot run this model here ({build_id()}). Try DOCQA_CPU_REPACK=off, a smaller DOCQA_N_CTX, or "
        "rebuild llama-cpp-python (`make clean && make setup`); include these lines when you report it."
    )


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _write(path: Path, key: str, result: SelfTest) -> None:
    table = _read(path)
    table[key] = {"extra_bufts": result.extra_bufts, "status": result.status, "note": result.note}
    if result.layout is not None:
        table[key]["layout"] = result.layout.as_dict()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(table, indent=1).encode())
    except OSError as exc:  # a read-only data directory fails later with its own message
        log.warning("could not keep the self-test result in %s: %s", path, exc)
