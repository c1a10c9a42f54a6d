"""What bench/device/run.sh measures once llama.cpp is built: docqa's own code on a random-weight Qwen3.5
model with its MTP block, at a real model's shapes on a GPU (``--cpu``: the tiny test model, here).

Stages, each timed against ``--deadline`` (one that would not fit is skipped and named in the result):

1. the model: testkit/random_qwen35.py writes Qwen3.5-27B's shapes with Q4_K_M's tensor types (all 64
   blocks when the time left allows, else fewer, the scale stated); ``--cpu``: testkit/tiny_qwen35.py;
2. load and contexts as the ``rtx3090-27b`` preset makes them (server/config/memory.py
   ``context_config``: q8_0 K/V, flash attention, n_ctx 139,264, a document and a question sequence in
   one unified pool, the MTP context beside it), but with the widest rollback, 16 recurrent snapshots
   (the server's default where memory allows; the preset settles for 6 on 24 GiB), so that every
   window up to verify16 can be run; the buffers llama.cpp logs against runtime/plan.py's plan of the
   same configuration, and the start-up calibration (spec/cost.py ``calibrate``);
3. prefill of one document (``Context.prefill`` with the MTP catch-up after every chunk, as ingestion
   does) timed to each size of ``--sizes``; at each of the two largest, the snapshot saved
   (ingest/snapshot.py ``save``) and later restored (``load``);
4. at the largest depth reached, in a question sequence that shares the document's cells: verify
   calls of 1..17 rows, the MTP draft step, greedy decoding through the answer loop (spec/loop.py via
   testkit/harness.py ``generate``) with drafting off and with a 3-token MTP window (the tokens must
   be the same), and the loop with every draft accepted (``accept_drafts``, the debug setting:
   random weights accept no drafts).

Writes ``result.json`` and ``result.md`` (bench/device/report.py) under ``--out`` after every stage.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
import traceback
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from bench.device import report

N_CTX = 139_264  # the rtx3090-27b preset's context (server/config/memory.py)
N_BATCH = 512  # Settings' n_batch and n_ubatch defaults
N_RS_SEQ = 16  # spec/limits.py MAX_WINDOW: the widest rollback (the 24 GiB preset picks 6)
DOC, QUESTION = 0, 1  # sequence ids: the document's, a question's (n_seq_max 2: the preset with one question)
QUESTION_TOKENS = 16
ANSWER_TOKENS = 64
GPU_SIZES = (8192, 32768, 131072)
CPU_SIZES = (1024, 4096, 16384)
LAYER_CHOICES = (64, 48, 32, 16, 8)


class Budget:
    def __init__(self, deadline: float) -> None:
        self.deadline = deadline

    def left(self) -> float:
        return self.deadline - time.time()


def gpu_name() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def gpu_used_bytes() -> int | None:
    if shutil.which("nvidia-smi") is None:
        return None
    q = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"]
    out = subprocess.run(q, capture_output=True, text=True)
    return int(out.stdout.split()[0]) * 2**20 if out.returncode == 0 and out.stdout.strip() else None


def choose_layers(seconds_left: float) -> int:
    """The most 27B blocks whose file, load and measurements should fit: a file written at ~1 GB/s and
    read back at ~2 GB/s, and ~150 s of measurements at 64 blocks (scaling with the blocks), + 60 s spare."""
    from testkit.qwen35_shapes import QWEN35_27B
    from testkit.random_qwen35 import file_bytes

    for n in LAYER_CHOICES:
        gb = file_bytes(QWEN35_27B.with_layers(n) if n != 64 else QWEN35_27B) / 1e9
        if gb * 1.5 + 150 * n / 64 + 60 <= seconds_left:
            return n
    return LAYER_CHOICES[-1]


def model_dir(work: Path, need: int) -> Path:
    """Where to write the GGUF: /dev/shm when it has room for it and 8 GB more (no disk in the way of
    writing 17 GB and reading it back: the lent machine's disk speed is unknown), else ``work``."""
    shm = Path("/dev/shm")
    try:
        if shm.is_dir() and shutil.disk_usage(shm).free > need + 8e9:
            path = Path(tempfile.mkdtemp(prefix="docqa-device-", dir=shm))
            return path
    except OSError:
        pass
    return work


def make_model(mode: str, work: Path, layers: int, res: dict) -> Path:
    from testkit.qwen35_shapes import QWEN35_27B
    from testkit.random_qwen35 import file_bytes

    shape = QWEN35_27B if layers == 64 else QWEN35_27B.with_layers(layers)
    path = (work if mode == "cpu" else model_dir(work, file_bytes(shape))) / "model.gguf"
    t0 = time.perf_counter()
    if mode == "cpu":
        from testkit.tiny_qwen35 import write_tiny_qwen35

        write_tiny_qwen35(path)
        res["model"] = {"name": "docqa-tiny-qwen35 (f32)", "n_layer": 4, "scale": None}
    else:
        from testkit.random_qwen35 import write_random_qwen35

        write_random_qwen35(path, shape)
        res["model"] = {"name": shape.name, "n_layer": layers, "scale": layers / 64}
    res["model"].update(file_gb=path.stat().st_size / 1e9, write_s=time.perf_counter() - t0, path=str(path))
    return path


@dataclass(frozen=True)
class Variant:
    """What the run loads: the served configuration, or a fallback after a crash (a process killed by
    a signal leaves no Python error to record): ``--no-mtp``, which run.sh runs when its probe without
    the MTP block loads, and ``--safe`` (by hand: f16 K/V, no flash attention, no extra CPU buffer
    types, 4 recurrent snapshots)."""

    mtp: bool = True
    safe: bool = False

    @property
    def name(self) -> str:
        return "served" if self.mtp and not self.safe else ("no MTP" + (", safe" if self.safe else ""))


def context_configs(mode: str, variant: Variant = Variant()):
    from runtime.llama import ContextConfig

    threads = os.cpu_count() or 1
    if mode == "cpu":
        threads = 1  # the tiny model is fastest on one thread beside other work (testkit/harness.py)
    kv, fa, rs = ("f16", "off", 4) if variant.safe else ("q8_0", "on", N_RS_SEQ)
    target = ContextConfig(
        n_ctx=N_CTX, n_batch=N_BATCH, n_ubatch=N_BATCH, n_threads=threads, n_threads_batch=threads,
        type_k=kv, type_v=kv, flash_attn=fa, n_rs_seq=rs, n_seq_max=2, kv_unified=True,
    )  # fmt: skip
    return target, (replace(target, mtp=True, n_rs_seq=0) if variant.mtp else None)


def plan_rows(path: Path, mode: str, bufs: dict, res: dict, tcfg) -> None:
    """runtime/plan.py's plan of this configuration against what llama.cpp logged, row by row."""
    from runtime.plan import plan
    from runtime.plan_config import PlanConfig
    from runtime.shape import ModelShape

    mtp_on = bufs["mtp"] is not None
    cfg = PlanConfig(
        n_ctx=N_CTX, n_seq_max=2, n_rs_seq=tcfg.n_rs_seq, type_k=tcfg.type_k, type_v=tcfg.type_v,
        flash_attn=tcfg.flash_attn == "on", kv_unified=True, n_batch=N_BATCH, n_ubatch=N_BATCH, mtp=mtp_on,
        backend="cpu" if mode == "cpu" else "cuda",
    )  # fmt: skip
    p = plan(ModelShape.from_gguf(path), cfg)
    load, target, mtp = bufs["load"], bufs["target"], bufs["mtp"]

    def logged(log, kind: str) -> int | None:
        return None if log is None else log.total(kind)

    rows = [
        ("weights", p.bytes("weights"), logged(load, "model")),
        ("kv", p.bytes("kv"), logged(target, "KV")),
        ("rs", p.bytes("rs"), logged(target, "RS")),
        ("mtp_kv", p.bytes("mtp_kv") if mtp_on else None, logged(mtp, "KV")),
        ("compute", p.bytes("compute"), logged(target, "compute")),
        ("mtp_compute", p.bytes("mtp_compute") if mtp_on else None, logged(mtp, "compute")),
        ("output", p.bytes("output"), logged(target, "output")),  # the target's logits (the MTP's: not planned)
    ]
    rows = [r for r in rows if r[1] is not None]
    res["plan"] = {
        "rows": [{"name": n, "planned": a, "allocated": b} for n, a, b in rows],
        "device_planned": p.device_total,
        "entries": [(e.kind, e.backend, e.size) for log in (load, target, mtp) if log for e in log.entries],
    }


def document(n: int, seed: int = 1) -> np.ndarray:
    """``n`` document tokens: random ids among the byte and merge tokens (any ids prefill alike)."""
    return np.random.default_rng(seed).integers(0, 284, size=n, dtype=np.int32)


class Run:
    """The loaded model, its two contexts and the document sequence, for the stages."""

    def __init__(self, path: Path, mode: str, res: dict, variant: Variant = Variant()) -> None:
        from runtime.buffers import capture_buffers
        from runtime.llama import Context, Model
        from spec.cost import calibrate

        self.mode, self.res = mode, res
        used0 = gpu_used_bytes()
        t0 = time.perf_counter()
        with capture_buffers() as load:
            self.model = Model(path, load_mtp=variant.mtp, extra_bufts=False if variant.safe else None)
        res["model"]["load_s"] = time.perf_counter() - t0
        tcfg, mcfg = context_configs(mode, variant)
        with capture_buffers() as target:
            self.t = Context(self.model, tcfg)
        self.d, mtp = None, None
        if mcfg is not None:
            with capture_buffers() as mtp:
                self.d = Context(self.model, mcfg)
        fa = "flash attention" if tcfg.flash_attn == "on" else "no flash attention"
        res["context"] = {
            "summary": f"n_ctx {N_CTX:,}, {tcfg.type_k} K/V, {fa}, n_batch {N_BATCH}, n_rs_seq {self.t.n_rs_seq}, "
            f"2 sequences in one unified pool, {'MTP context' if self.d else 'no MTP'} ({variant.name})",
            "config": repr(tcfg),
        }
        plan_rows(path, mode, {"load": load, "target": target, "mtp": mtp}, res, tcfg)
        used1 = gpu_used_bytes()
        if used0 is not None and used1 is not None:
            res["plan"]["gpu_used"] = used1 - used0
        steps = {}
        if self.d is not None:
            zeros = np.zeros((1, self.d.n_embd), dtype=np.float32)

            def mtp_step() -> None:
                self.d.decode([0], 0, outputs="all", embd=zeros)
                self.d.logits()[0].argmax()
                self.d.seq_rm(0, 0)

            steps["mtp"] = mtp_step
        self.steps = calibrate(self.t, 0, steps, repeats=3)  # as the engine does at start-up
        res["calibration_ms"] = {"verify": [round(s * 1000, 3) for s in self.steps.verify]}
        if "mtp" in self.steps.draft_steps:
            res["calibration_ms"]["mtp"] = round(self.steps.draft_steps["mtp"] * 1000, 3)
        self.doc = np.zeros(0, dtype=np.int32)
        self.doc_h: np.ndarray | None = None
        from spec.mtp import MtpDrafter

        self.doc_mtp = MtpDrafter(self.t, self.d, DOC) if self.d is not None else None

    # -- the document ---------------------------------------------------------------------------------
    def prefill_to(self, tokens: np.ndarray) -> float:
        """Extend the document sequence to ``tokens`` (which start with what it holds); returns seconds."""
        have = len(self.doc)
        t0 = time.perf_counter()
        self.t.prefill(tokens[have:], have, seq_id=DOC, on_chunk=self.doc_mtp.process if self.doc_mtp else None)
        seconds = time.perf_counter() - t0
        self.doc, self.doc_h = tokens, (self.doc_mtp.pending_h.copy() if self.doc_mtp else None)
        return seconds

    def save(self, directory: Path) -> tuple[float, int]:
        from ingest import snapshot

        directory.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        snapshot.save(self.t, DOC, self.doc, directory, mtp=self.d, mtp_h=self.doc_h)
        seconds = time.perf_counter() - t0
        return seconds, sum(p.stat().st_size for p in directory.iterdir())

    def load(self, directory: Path, tokens: np.ndarray) -> float:
        from ingest import snapshot

        self.t.seq_rm(DOC, 0)
        if self.d is not None:
            self.d.seq_rm(DOC, 0)
        t0 = time.perf_counter()
        h = snapshot.load(self.t, DOC, tokens, directory, mtp=self.d)
        seconds = time.perf_counter() - t0
        self.doc, self.doc_h = tokens, h
        return seconds

    # -- a question -----------------------------------------------------------------------------------
    def question(self):
        """Share the document into the question sequence (both contexts, as server/engine/mtp.py
        ``share`` does) and prefill a question; returns its MTP drafter and its first position."""
        from spec.mtp import MtpDrafter

        self.release()
        self.t.seq_cp(DOC, QUESTION, 0, -1)
        drafter = None
        if self.d is not None:
            self.d.seq_cp(DOC, QUESTION, 0, len(self.doc))
            drafter = MtpDrafter(self.t, self.d, QUESTION)
            drafter.reset(self.doc_h)
        q = document(QUESTION_TOKENS, seed=2)
        self.t.prefill(q, len(self.doc), seq_id=QUESTION, on_chunk=drafter.process if drafter else None)
        return drafter, len(self.doc) + QUESTION_TOKENS

    def release(self) -> None:
        self.t.seq_rm(QUESTION, 0)
        if self.d is not None:
            self.d.seq_rm(QUESTION, 0)

    def verify_curve(self, repeats: int) -> dict[int, float]:
        """Median ms of a decode of 1..17 rows (logits of every row read, argmax taken) after the question."""
        out = {}
        for rows in range(1, 18):
            times = []
            for _ in range(repeats):
                _, pos = self.question()
                tokens = document(rows, seed=3 + rows)
                t0 = time.perf_counter()
                self.t.decode(tokens, pos, seq_id=QUESTION, outputs="all")
                self.t.logits().argmax(axis=1)
                times.append(time.perf_counter() - t0)
            out[rows] = round(statistics.median(times) * 1000, 3)
        self.release()
        return out

    def mtp_step_ms(self, repeats: int = 9) -> float:
        drafter, pos = self.question()
        last = int(self.t.logits()[-1].argmax())
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            drafter.draft(last, pos, 1)
            times.append(time.perf_counter() - t0)
        self.release()
        return round(statistics.median(times) * 1000, 3)

    def plain(self, n: int) -> tuple[list[int], list[float], float]:
        """Reference: one decode per token, no answer loop; tokens, top-2 margins, seconds."""
        _, pos = self.question()
        row = self.t.logits()[-1]
        tokens, margins = [], []
        t0 = time.perf_counter()
        for _ in range(n):
            top2 = np.partition(row, -2)[-2:]
            tokens.append(int(np.argmax(row)))
            margins.append(float(top2[1] - top2[0]))
            self.t.decode([tokens[-1]], pos, seq_id=QUESTION, outputs="all")
            pos += 1
            row = self.t.logits()[0]
        seconds = time.perf_counter() - t0
        self.release()
        return tokens, margins, seconds

    def answer(self, n: int, window: int | None, sources: tuple[str, ...], accept_all: bool = False):
        """docqa's answer loop (testkit/harness.py ``generate``) on the question; (tokens, stats, seconds)."""
        from spec.cost import CostModel
        from spec.limits import MAX_WINDOW
        from spec.lookup import LookupDrafter, NgramIndex
        from spec.loop import AnswerParams, AnswerRun, AnswerStats
        from spec.sampling import SamplingParams
        from testkit.harness import generate

        drafter, pos = self.question()
        lookup = LookupDrafter(NgramIndex(self.doc, 2, 4), self.model.piece, self.model.unspaced)
        lookup.extend(document(QUESTION_TOKENS, seed=2).tolist())
        drafters = {"lookup": lookup}
        if drafter is not None:
            drafter.depth = min(3, window or 3)
            drafters["mtp"] = drafter
        sources = tuple(s for s in sources if s in drafters)
        stats = AnswerStats()
        run = AnswerRun(
            self.t, self.model, drafters, pos, stats, time.perf_counter(),
            seq_id=QUESTION, max_window=min(MAX_WINDOW, self.t.n_rs_seq), costs=CostModel(self.steps),
        )  # fmt: skip
        params = AnswerParams(
            max_tokens=n, sampling=SamplingParams(temperature=0.0), window=window, sources=sources, stops=(),
            accept_drafts=accept_all,
        )  # fmt: skip
        t0 = time.perf_counter()
        tokens = [t for event in generate(run, params) for t in event.token_ids]
        seconds = time.perf_counter() - t0
        self.release()
        return tokens, stats, seconds


def first_divergence(ref: list[int], got: list[int]) -> int | None:
    """Index of the first token of ``got`` that differs from ``ref``; None when ``got`` is a prefix of
    it (an answer ends early at an end-of-generation token or a loop; the reference runs on)."""
    return next((i for i, (x, y) in enumerate(zip(ref, got, strict=False)) if x != y), None)


def write(out: Path, res: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(res, indent=1, default=str))
    (out / "result.md").write_text(report.markdown(res))


def stage(res: dict, out: Path, name: str, fn, *args):
    """Run one stage; an error is recorded (with its traceback's tail) and the run goes on."""
    t0 = time.perf_counter()
    try:
        return fn(*args)
    except Exception as exc:  # a stage that fails must not lose the others' numbers
        res.setdefault("errors", []).append(f"{name}: {type(exc).__name__}: {exc}")
        res.setdefault("tracebacks", {})[name] = traceback.format_exc()[-3000:]
        return None
    finally:
        res.setdefault("stage_s", {})[name] = round(time.perf_counter() - t0, 2)
        write(out, res)


def llama_log_to(path: Path) -> None:
    """llama.cpp's log lines (runtime/backend.py routes them to ``docqa.llama``) into ``path``, each
    flushed as it comes, so that a crash inside llama.cpp leaves its last lines."""
    import logging

    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(relativeCreated)8.0f ms %(message)s"))
    logger = logging.getLogger("docqa.llama")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)


def quiet_llama_log() -> None:
    import logging

    logger = logging.getLogger("docqa.llama")
    for handler in [h for h in logger.handlers if isinstance(h, logging.FileHandler)]:
        logger.removeHandler(handler)
        handler.close()


def measure(args: argparse.Namespace) -> dict:
    budget = Budget(args.deadline)
    t_start = time.time()
    res: dict = {"mode": args.mode, "skipped": [], "errors": []}
    from runtime.system import system_info

    res["machine"] = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "gpu": gpu_name()}
    res["build"] = json.loads(args.build) if args.build else {}
    res["build"].setdefault("summary", "the installed llama-cpp-python")
    sizes = CPU_SIZES if args.mode == "cpu" else GPU_SIZES
    if args.sizes:
        sizes = tuple(int(s) for s in args.sizes.split(","))
    layers = args.layers or choose_layers(budget.left())
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    path = stage(res, args.out, "model", make_model, args.mode, work, layers, res)
    if path is None:
        return res
    variant = Variant(mtp=not args.no_mtp, safe=args.safe)
    res["variant"] = variant.name
    run = stage(res, args.out, "load", Run, path, args.mode, res, variant)
    if run is None:
        return res
    quiet_llama_log()  # the load is what a crash log is for; a line per decode would cost the timings
    res["machine"]["system_info"] = system_info()
    doc = document(max(sizes))
    res["prefill"], res["snapshots"] = [], []
    prefill_s = 0.0
    saved: list[tuple[int, Path]] = []
    for i, n in enumerate(sizes):
        if i and prefill_s and budget.left() < (n - len(run.doc)) / (len(run.doc) / prefill_s) * 1.6 + 90:
            res["skipped"].append(f"prefill to {n:,} tokens ({budget.left():.0f} s left)")
            break
        seconds = stage(res, args.out, f"prefill {n}", run.prefill_to, doc[:n])
        if seconds is None:
            break
        prefill_s += seconds
        res["prefill"].append({"tokens": n, "seconds": round(prefill_s, 3), "tok_s": n / prefill_s})
        if i >= len(sizes) - 2:
            directory = work / f"snapshot-{n}"
            done = stage(res, args.out, f"save {n}", run.save, directory)
            if done is not None:
                res["snapshots"].append({"tokens": n, "save_s": done[0], "bytes": done[1], "load_s": None})
                saved.append((n, directory))
    for snap, (n, directory) in zip(res["snapshots"], saved, strict=True):
        snap["load_s"] = stage(res, args.out, f"load {n}", run.load, directory, doc[:n])
    if saved and len(run.doc) != saved[-1][0]:
        stage(res, args.out, "reload", run.load, saved[-1][1], doc[: saved[-1][0]])
    depth = len(run.doc)
    repeats = args.repeats if budget.left() > 60 else min(args.repeats, 2)
    curve = stage(res, args.out, "verify", run.verify_curve, repeats)
    res["verify"] = {str(depth): curve} if curve else {}
    drafts = ("mtp",) if variant.mtp else ("lookup",)  # the fallback without MTP drafts by prompt lookup
    if variant.mtp:
        res["mtp_step_ms"] = stage(res, args.out, "mtp step", run.mtp_step_ms)
    n = args.answer_tokens
    plain = stage(res, args.out, "plain", run.plain, n)
    loop0 = stage(res, args.out, "loop, no drafts", run.answer, n, 0, ("mtp", "lookup"))
    if loop0 is not None:
        res["decode"] = {
            "depth": depth,
            "tok_s": len(loop0[0]) / loop0[2],
            "tokens": len(loop0[0]),
            "finish": loop0[1].finish_reason,
        }
    if plain is not None:
        res["decode_raw"] = {"tok_s": len(plain[0]) / plain[2], "min_margin": min(plain[1])}
    mtp3 = stage(res, args.out, f"loop, {drafts[0]} 3", run.answer, n, 3, drafts)
    if plain is not None and mtp3 is not None:
        ref = plain[0]
        div = first_divergence(ref, mtp3[0])
        res["equality"] = {
            "depth": depth, "tokens": len(mtp3[0]), "equal": div is None, "first_divergence": div,
            "margin_at_divergence": plain[1][div] if div is not None else None,
            "min_margin_compared": min(plain[1][: len(mtp3[0])], default=None),
            "finish": mtp3[1].finish_reason, "verify_steps": mtp3[1].verify_steps,
            "loop_no_drafts_equal": loop0 is not None and first_divergence(ref, loop0[0]) is None,
            "mtp3_acceptance": mtp3[1].accepted_tokens / max(mtp3[1].drafted_tokens, 1), "drafts": drafts[0],
        }  # fmt: skip
    res["accept_all"] = []
    for window in (1, 2, 3):
        if budget.left() < 20:
            res["skipped"].append(f"every draft accepted, {drafts[0]} window {window} ({budget.left():.0f} s left)")
            continue
        got = stage(res, args.out, f"accept all, {drafts[0]} {window}", run.answer, n, window, drafts, True)
        if got is not None:
            tokens, stats, seconds = got
            res["accept_all"].append({
                "source": "MTP" if variant.mtp else "lookup", "window": window, "tok_s": len(tokens) / seconds,
                "tokens_per_step": len(tokens) / max(stats.verify_steps, 1),
            })  # fmt: skip
    res["measure_s"] = time.time() - t_start
    if path.parent.parent == Path("/dev/shm"):
        shutil.rmtree(path.parent, ignore_errors=True)
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("gpu", "cpu"), default="gpu")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--work", default=tempfile.gettempdir() + "/docqa-device-work")
    p.add_argument("--deadline", type=float, default=time.time() + 480, help="unix time by which to be done")
    p.add_argument("--layers", type=int, default=0, help="27B blocks to write (0: as many as the time allows)")
    p.add_argument("--sizes", default="", help="document sizes to time, comma-separated")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per verify size (the median is kept)")
    p.add_argument("--answer-tokens", type=int, default=ANSWER_TOKENS, help="tokens per answer")
    p.add_argument("--build", default="", help="JSON about the build (run.sh)")
    p.add_argument("--started", type=float, default=time.time(), help="unix time the whole run began")
    p.add_argument("--no-mtp", action="store_true", help="load no MTP block (a fallback after a crash)")
    p.add_argument("--safe", action="store_true", help="f16 K/V, no flash attention, no extra buffer types")
    p.add_argument("--llama-log", type=Path, help="write llama.cpp's log lines here as they come (for a crash)")
    args = p.parse_args()
    if args.llama_log:
        llama_log_to(args.llama_log)
    res = measure(args)
    res["wall_s"] = time.time() - args.started
    write(args.out, res)
    print(report.markdown(res))


if __name__ == "__main__":
    main()
