"""The weight layout for this CPU, measured once at the first start (with the self-test).

llama.cpp's CPU backend can keep quantized weights repacked for its wider kernels (the "extra buffer
types": ``CPU_REPACK``, AMX) or as they are in the file (llama-server's ``--no-repack``). Which one is
faster depends on the CPU and on the job: measured with the default model on 2 cores
(bench/results/prefill.md), the plain weights read 1.6-1.9x faster on an AMD Zen 4 but decode
19-23 % slower; on an AMD Zen 3 (AVX2 only) they read 1.1x faster and decode as fast, but a 17-row
verify call (speculative decoding's) takes 1.5x as long. So the choice is measured here, on the
served model and settings, rather than assumed:

* a child process loads the model with each layout in turn and times the three jobs an answer and a
  reading are made of: a prefill chunk (``READ_ROWS`` rows, tokens/s), a one-row decode and a
  ``MAX_WINDOW + 1``-row verify call (ms);
* the plain layout is chosen only when it reads at least ``GAIN`` times faster and loses no more
  than ``KEEP`` of either answer speed (:func:`choose`); otherwise the repacked one stays.

Where the plain weights read at least ``GAIN`` times faster but answer slower (an AMD Zen 4: AVX-512
without AMX), the pair is chosen instead: documents are read by a second instance of the model with
the plain weights, and answers decoded with the repacked ones; the two share only a finished
reading's state, saved from the reader and restored into the answering context
(server/engine/contexts.py). Its memory cost: the model file mapped a second time (page cache,
shared with the first instance's plain tensors) and a second KV cache of ``n_ctx`` cells for the
reading. The result is kept with the self-test's
(``DATA_DIR/selftest.json``, keyed by the model, the llama.cpp build and its CPU features, and the
settings), shown in /health and logged at start-up. Off unless ``DOCQA_CPU_REPACK=auto``, the model
runs on the CPU, and the build has repacking kernels at all.
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
import traceback
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from server.config.settings import Settings
from spec.limits import MAX_WINDOW

READ_ROWS = 128  # a prefill chunk of a reading on 2 cores (~2 s: DOCQA_PREFILL_ALONE_S)
GAIN = 1.10  # the least reading speed-up that makes the plain layout worth choosing
KEEP = 0.97  # ... while keeping at least this share of the decode and verify speeds
TIMEOUT_S = 600.0
#: Tokens of a document before the attention is timed (the jobs of a question asked after it). At 1,024
#: the difference was within run-to-run noise on an AMD Zen 4 (a verify call 1.05-1.36x faster without
#: flash attention across six fresh starts, two of which kept it on; one of those read a 39k-token book at
#: 15 tok/s); at 2,048 it is 1.22-1.42x, and it grows with depth (1.8x after 6,144: bench/results/prefill.md).
DEPTH = 2048
ATTENTION_GAIN = 1.10  # the least verify speed-up that turns flash attention off ...
ATTENTION_KEEP = 0.95  # ... while keeping this share of the decode and reading speeds


@dataclass(frozen=True, slots=True)
class Rates:
    """One layout's speeds: ``read`` tokens/s over a ``READ_ROWS``-row prefill chunk, ``decode_ms`` one
    row, ``verify_ms`` a ``MAX_WINDOW + 1``-row verify call (medians)."""

    read: float
    decode_ms: float
    verify_ms: float


@dataclass(frozen=True, slots=True)
class Choice:
    """The layout chosen: ``plain`` (extra buffer types off) or not, ``pair`` (read with the plain
    weights, answer with the repacked ones), the rates it was chosen by (None where not measured) and
    one line saying why."""

    plain: bool
    repacked: Rates | None
    unpacked: Rates | None
    note: str
    pair: bool = False
    flash_attn: str | None = None  # "on" or "off" where attention was measured (:func:`choose_attention`)
    attention: tuple[Rates, Rates] | None = None  # the answering weights at DEPTH: flash attention on, off

    def as_dict(self) -> dict:
        return {
            "plain": self.plain,
            "pair": self.pair,
            "repacked": asdict(self.repacked) if self.repacked else None,
            "plain_rates": asdict(self.unpacked) if self.unpacked else None,
            "note": self.note,
            "flash_attn": self.flash_attn,
            "attention": [asdict(r) for r in self.attention] if self.attention else None,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Choice:
        r, p = d.get("repacked"), d.get("plain_rates")
        repacked, plain = Rates(**r) if r else None, Rates(**p) if p else None
        if "pair" not in d and repacked is not None and plain is not None:
            return choose(repacked, plain)  # kept before the pair was built: chosen again by its rates
        on_off = d.get("attention")
        attention = (Rates(**on_off[0]), Rates(**on_off[1])) if on_off else None
        pair = bool(d.get("pair", False))
        return cls(bool(d["plain"]), repacked, plain, d.get("note", ""), pair, d.get("flash_attn"), attention)


def choose(repacked: Rates, plain: Rates) -> Choice:
    """The plain layout when it reads ``GAIN`` times faster and keeps ``KEEP`` of both answer speeds;
    the pair (read plain, answer repacked) when it reads ``GAIN`` times faster and answers slower."""
    read = plain.read / repacked.read
    decode = repacked.decode_ms / plain.decode_ms
    verify = repacked.verify_ms / plain.verify_ms
    numbers = f"plain weights read {read:.2f}x, decode {decode:.2f}x and verify {verify:.2f}x the repacked ones"
    if read < GAIN:
        return Choice(False, repacked, plain, f"{numbers}: keeping the repacked weights (no faster reading)")
    if decode >= KEEP and verify >= KEEP:
        return Choice(True, repacked, plain, f"{numbers}: reading and answering with the plain weights")
    how = "reading with the plain weights and answering with the repacked ones (a second model instance)"
    return Choice(False, repacked, plain, f"{numbers}: {how}", pair=True)


def choose_attention(on: Rates, off: Rates) -> tuple[str, str]:
    """Flash attention ``"off"`` when without it a verify call at :data:`DEPTH` is ``ATTENTION_GAIN``
    times faster and decoding and reading keep ``ATTENTION_KEEP`` of their speed; else ``"on"``. Returns
    (the setting, one line with the ratios)."""
    verify, decode, read = on.verify_ms / off.verify_ms, on.decode_ms / off.decode_ms, off.read / on.read
    numbers = (
        f"at {DEPTH} tokens without flash attention it verifies {verify:.2f}x, decodes {decode:.2f}x and "
        f"reads {read:.2f}x as fast"
    )
    if verify >= ATTENTION_GAIN and min(decode, read) >= ATTENTION_KEEP:
        return "off", f"{numbers}: flash attention off"
    return "on", f"{numbers}: flash attention on"


def rates(settings: Settings, model_path: Path, extra_bufts: bool, depth: int = 16) -> Rates:
    """Runs in the child: load ``model_path`` with or without the extra buffer types and time the jobs
    after ``depth`` tokens (16: a short prefix, as a question has one; :data:`DEPTH`: a document's).
    Each timed call is decoded in a second sequence sharing the first ``depth`` cells (``seq_cp``, a
    recurrent state copy-on-write), then dropped."""
    from runtime.llama import Context, Model
    from server.config.memory import context_config

    model = Model(model_path, n_gpu_layers=0, extra_bufts=extra_bufts)
    ctx = Context(model, context_config(settings, model.is_recurrent))
    ids = (np.arange(depth + READ_ROWS, dtype=np.int32) * 7919 + 101) % model.n_vocab
    for a in range(0, depth, ctx.n_batch):
        ctx.decode(ids[a : min(depth, a + ctx.n_batch)], a, outputs="none")

    def timed(rows: int, repeats: int, outputs: str) -> float:
        times = []
        for _ in range(repeats):
            ctx.seq_cp(0, 1)
            start = time.perf_counter()
            ctx.decode(ids[depth : depth + rows], depth, seq_id=1, outputs=outputs)
            times.append(time.perf_counter() - start)
            ctx.seq_rm(1, 0)
        return statistics.median(times)

    timed(1, 1, "last")  # warm-up: thread pool, first-touch of the weights
    read = READ_ROWS / timed(READ_ROWS, 3, "last")
    decode_ms = 1000 * timed(1, 9, "last")
    verify_ms = 1000 * timed(MAX_WINDOW + 1, 5, "all")
    ctx.close()
    model.close()
    return Rates(read, decode_ms, verify_ms)


def _child(settings: Settings, model_path: Path, extra_bufts: bool, depth: int, send) -> None:
    try:
        send.send(rates(settings, model_path, extra_bufts, depth))
    except BaseException as exc:  # reported to the parent
        send.send(f"{type(exc).__name__}: {exc}")
        traceback.print_exc()


def measure(settings: Settings, model_path: Path, extra_bufts: bool, depth: int = 16) -> Rates | str:
    """One layout's rates (:func:`rates`), measured in a child process (the model loaded there, not
    here); or why not."""
    mp = multiprocessing.get_context("spawn")
    receive, send = mp.Pipe(duplex=False)
    args = (settings, model_path, extra_bufts, depth, send)
    child = mp.Process(target=_child, args=args, name="docqa-layout")
    child.start()
    send.close()
    got = receive.recv() if receive.poll(TIMEOUT_S) else f"no result within {TIMEOUT_S:.0f} s"
    child.join(5)
    if child.is_alive():
        child.kill()
        child.join()
    if isinstance(got, str):
        return got
    if child.exitcode not in (0, None):
        return f"the child exited with {child.exitcode}"
    return got


def measured(settings: Settings, model_path: Path) -> Choice:
    """Measure both layouts and choose (:func:`choose`), then flash attention where it is this CPU's
    to choose (:func:`attention_matters`, :func:`choose_attention`); a measurement that fails keeps
    the repacked weights, or llama.cpp's own choice of attention."""
    repacked = measure(settings, model_path, True)
    plain = measure(settings, model_path, False) if isinstance(repacked, Rates) else repacked
    if isinstance(repacked, str) or isinstance(plain, str):
        why = repacked if isinstance(repacked, str) else plain
        return Choice(False, None, None, f"the layouts could not be measured ({why}); keeping the repacked weights")
    chosen = choose(repacked, plain)
    if not attention_matters(settings):
        return chosen
    on, off = (
        measure(settings.model_copy(update={"flash_attn": fa}), model_path, not chosen.plain, DEPTH)
        for fa in ("on", "off")
    )  # with the weights answers are decoded with
    if isinstance(on, str) or isinstance(off, str):
        why = on if isinstance(on, str) else off
        return replace(chosen, note=f"{chosen.note}; attention could not be measured ({why})")
    flash_attn, note = choose_attention(on, off)
    return replace(chosen, note=f"{chosen.note}; {note}", flash_attn=flash_attn, attention=(on, off))


def attention_matters(settings: Settings) -> bool:
    """Flash attention is this CPU's to choose: ``DOCQA_FLASH_ATTN=auto``, a V cache that is not
    quantized (a quantized one needs flash attention), room for :data:`DEPTH` tokens and a reading
    chunk in the context, and a server of its own data: servers sharing a data directory and database
    (``DOCQA_DATABASE_URL``) could choose apart, and each would read again what another saved."""
    from runtime.kvtypes import GGML

    if settings.flash_attn != "auto" or GGML[settings.type_v].quantized or settings.database_url is not None:
        return False
    return settings.n_ctx >= DEPTH + READ_ROWS
