"""Answer accuracy, side by side in one run: docqa on the whole document, docqa on segments, and a RAG
baseline, on the same models and questions (issue 26). Results: bench/results/quality.md and .json.

Systems:

* ``whole``: ``python -m server`` (a real process, testkit/live.py) with DOCQA_N_CTX large enough for
  every document but the long one; each document is uploaded once and its saved state answers all of
  its questions (the long one is split into segments by the server itself).
* ``whole-v1``: the same server from another checkout (``--baseline-root``, e.g. main before issue 26),
  for the prompt comparison: same model, same questions, the old prompt layout.
* ``segments``: the same server with a small DOCQA_N_CTX (``--segment-ctx``), so documents are split
  into segments of about the RAG prompt's size and answered from the best-ranked one(s). A document
  that fits one segment is answered exactly as by ``whole`` (the same prefix), so its answers are
  taken from ``whole`` and marked ``reused``.
* ``rag``: bench/rag.py, in-process: 512-token chunks, BM25 top 4, prefilled with each question.
* ``inproc``: bench/rag.py's Whole: the whole-document path in-process, with ``--wording`` (for
  choosing a prompt wording quickly; not a system of the final table).

Sets: bench/quality_sets.py. Scores: bench/score.py. Each answer's record (text, score, TTFT, seconds,
finish reason, citations) goes to the JSON, and the tables are made from it (:func:`report`), so a
run that was cut short still reports what it finished (``--resume`` goes on from it).

Run ``nice -n 5 python -m bench.quality`` (about an hour on 2 cores; ``--help`` for the knobs).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path

from bench.quality_report import write_report
from bench.quality_sets import Doc, build
from bench.score import cites_needle, score
from runtime.models import model_path
from testkit.live import Live

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
THREADS = 2


def ask_server(live: Live, doc_id: str, item) -> dict:
    body = {"question": item.question, "max_tokens": item.max_tokens, "temperature": 0}
    t0 = time.perf_counter()
    status, r = live.post_json(f"/v1/documents/{doc_id}/answers", body, timeout=900)
    seconds = time.perf_counter() - t0
    if status != 200:
        return {"answer": "", "error": r, "seconds": seconds, "ttft_ms": None, "finish_reason": "error"}
    stats = r["stats"]
    return {
        "answer": r["answer"],
        "citations": r["citations"] + [c for a in r.get("answers") or [] for c in a["citations"]],
        "seconds": seconds,
        "ttft_ms": stats["ttft_ms"],
        "finish_reason": stats["finish_reason"],
        "completion_tokens": stats["completion_tokens"],
        "segments": [s["index"] for s in stats.get("segments") or []] if stats.get("segments") is not None else None,
    }


def run_server(system: str, model: str, path: Path, docs: list[Doc], args, out: list[dict], root: Path, save) -> dict:
    """Upload each document to a fresh server, ask its questions; returns {doc_id: (tokens, ready s)}."""
    n_ctx = args.segment_ctx if system == "segments" else args.whole_ctx
    data = Path(tempfile.mkdtemp(prefix=f"docqa-quality-{model}-{system}-"))
    env = {"DOCQA_N_CTX": str(n_ctx), "DOCQA_N_THREADS": str(args.threads), "DOCQA_SELFTEST": "false"}
    live = Live(data / "data", path, root=root, **env)
    ready: dict[str, tuple[int, float]] = {}
    live.start(timeout=900)
    try:
        for doc in docs:
            whole = args.ready.get(f"{model}/whole", {}).get(doc.doc_id)
            reuse = system == "segments" and whole is not None and whole[0] <= n_fit(args)
            if reuse:
                for rec in [
                    r for r in out if r["model"] == model and r["system"] == "whole" and r["doc"] == doc.doc_id
                ]:
                    out.append({**rec, "system": system, "reused": True})
                continue
            t0 = time.perf_counter()
            status, created = live.upload(doc.name, doc.data if doc.data is not None else doc.text.encode())
            info = live.wait_ready(created["id"], timeout=3600)
            ready[doc.doc_id] = (info["tokens"], time.perf_counter() - t0)
            print(f"  {system} {model} {doc.doc_id}: {info['status']}, {info['tokens']} tokens, "
                  f"{ready[doc.doc_id][1]:.1f} s", flush=True)  # fmt: skip
            for item in doc.items:
                rec = ask_server(live, created["id"], item)
                out.append(record(model, system, doc, item, rec))
            save(ready)  # a run cut short keeps every document it finished (--resume goes on from there)
    finally:
        live.stop()
    return ready


def n_fit(args) -> int:
    """Document tokens that fit one segment of the ``segments`` server (its budget, less scaffolding)."""
    return args.segment_ctx - 1024


def run_inprocess(system: str, model: str, path: Path, docs: list[Doc], args, out: list[dict], save) -> dict:
    from bench.rag import Rag, Whole
    from ingest.prompt import WORDINGS

    wording = WORDINGS[args.wording]
    ready = {}
    if system == "rag":
        reader = Rag(path, args.threads, n_ctx=4096, wording=wording)
    else:
        reader = Whole(path, args.threads, n_ctx=args.whole_ctx, wording=wording)
    try:
        for doc in docs:
            if system == "rag":
                n = reader.index(doc.text)
                ready[doc.doc_id] = (n, 0.0)
            else:
                ready[doc.doc_id] = reader.ingest(doc.text)
            for item in doc.items:
                r = reader.ask(item.question, item.max_tokens)
                rec = {"answer": r.text, "citations": [], "seconds": r.seconds, "ttft_ms": r.ttft_ms,
                       "finish_reason": r.finish_reason, "completion_tokens": r.completion_tokens,
                       "prompt_tokens": r.prompt_tokens}  # fmt: skip
                label = system if system == "rag" else f"inproc-{args.wording}"
                out.append(record(model, label, doc, item, rec))
            print(f"  {system} {model} {doc.doc_id} done", flush=True)
            save(ready)
    finally:
        reader.close()
    return ready


def record(model: str, system: str, doc: Doc, item, rec: dict) -> dict:
    s = score(item, rec["answer"])
    cited = cites_needle(item, rec.get("citations") or []) if item.needle and item.kind != "mc" else None
    return {
        "model": model, "system": system, "set": doc.set, "doc": doc.doc_id, "qid": item.qid, "kind": item.kind,
        "depth": item.depth, "gold": item.gold, **rec, **s, "cites_needle": cited,
    }  # fmt: skip


def machine() -> dict:
    cpu = next((x.split(":", 1)[1].strip() for x in open("/proc/cpuinfo") if x.startswith("model name")), "")
    return {"cpu": cpu or platform.processor(), "cores": os.cpu_count(), "load": os.getloadavg()}


def git_rev(root: Path) -> str:
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=root, text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="gemma-270m,qwen-coder-0.5b,qwen-coder-1.5b")
    p.add_argument("--systems", default="whole,segments,rag", help="whole, whole-v1, segments, rag, inproc")
    p.add_argument("--seed", type=int, default=26)
    p.add_argument("--sizes", default="needles-2k=2000,needles-8k=8000,long=24000", help="needle documents, tokens")
    p.add_argument("--sets", default="", help="only these sets (comma-separated); default all")
    p.add_argument("--quality", default="", help="only these QuALITY articles (doc ids, comma-separated)")
    p.add_argument("--model-sets", default="", help="model=set+set;... to run fewer sets on a slow model")
    p.add_argument("--whole-ctx", type=int, default=10240)
    p.add_argument("--segment-ctx", type=int, default=3072)
    p.add_argument("--threads", type=int, default=THREADS)
    p.add_argument("--wording", default="grounded", help="inproc/rag: ingest/prompt.py WORDINGS name")
    p.add_argument("--baseline-root", type=Path, default=None, help="checkout for whole-v1 (the old prompt)")
    p.add_argument("--out", type=Path, default=RESULTS / "quality")
    p.add_argument("--resume", action="store_true", help="keep the records of --out.json and skip what they cover")
    args = p.parse_args()
    sizes = {k: int(v) for k, v in (x.split("=") for x in args.sizes.split(","))}
    docs = build(args.seed, sizes, args.quality.split(",") if args.quality else None)
    if args.sets:
        docs = [d for d in docs if d.set in args.sets.split(",")]
    model_sets = {k: v.split("+") for k, v in (x.split("=") for x in args.model_sets.split(";") if x)}
    json_path = args.out.with_suffix(".json")
    results = {"records": [], "ready": {}, "runs": []}
    if args.resume and json_path.is_file():
        results = json.loads(json_path.read_text())
    out = results["records"]
    args.ready = results["ready"]  # the whole system's document sizes tell which documents fit one segment
    models_dir = Path(tempfile.gettempdir()) / "docqa-quality-models"
    for model in args.models.split(","):
        path = model_path(model, models_dir)
        mdocs = [d for d in docs if model not in model_sets or d.set in model_sets[model]]
        for system in args.systems.split(","):
            if system == "whole-v1" and model == "gemma-270m":
                continue  # no chat template: v1 and the new plain layout differ only in wording (inproc compares them)
            label = f"inproc-{args.wording}" if system == "inproc" else system
            done = {r["doc"] for r in out if r["model"] == model and r["system"] == label}
            todo = [d for d in mdocs if d.doc_id not in done]  # --resume: what the JSON does not hold yet
            if not todo:
                continue
            t0, load0 = time.time(), os.getloadavg()
            print(f"{model} / {system}: {len(todo)} documents", flush=True)

            def save(ready: dict, final: bool = False, model=model, label=label, t0=t0, load0=load0) -> None:
                results["ready"].setdefault(f"{model}/{label}", {}).update(ready)
                if final:
                    results["runs"].append({"model": model, "system": label, "seconds": time.time() - t0,
                                            "load_before": load0, "load_after": os.getloadavg()})  # fmt: skip
                results["machine"], results["rev"] = machine(), git_rev(ROOT)
                results["args"] = {
                    k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "ready"
                }
                json_path.parent.mkdir(parents=True, exist_ok=True)
                json_path.write_text(json.dumps(results, indent=1))
                write_report(results, args.out.with_suffix(".md"))

            if system in ("rag", "inproc"):
                ready = run_inprocess(system, model, path, todo, args, out, save)
            else:
                root = args.baseline_root if system == "whole-v1" else ROOT
                ready = run_server(system, model, path, todo, args, out, root, save)
            save(ready, final=True)
    print(args.out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
