"""Answer accuracy, side by side in one run: docqa on the whole document, docqa on segments, and a RAG
baseline, on the same models and questions, each question asked in each way of answering
(``--modes``: ``direct``, today's answer; ``quote``, quote-first, spec/quote.py). Results:
bench/results/quality.md and .json (issues 26 and 34).

Systems:

* ``whole``: ``python -m server`` (a real process, testkit/live.py) with DOCQA_N_CTX large enough for
  every document; each document is uploaded once and its saved state answers all of its questions,
  in every mode (the ``mode`` field of the answers route).
* ``whole-v1``: the same server from another checkout (``--baseline-root``), for a prompt comparison.
* ``segments``: the same server with a small DOCQA_N_CTX (``--segment-ctx``), so documents are split
  into segments of about the RAG prompt's size and answered from the best-ranked one(s). A document
  that fits one segment is answered exactly as by ``whole`` (the same prefix), so its answers are
  taken from ``whole`` and marked ``reused``.
* ``rag``: bench/rag.py, in-process: 512-token chunks, BM25 top 4, prefilled with each question (once
  for all modes). ``--rag-sample N``: a fixed sample of N questions per set (seeded), the same for
  every model and run, since RAG prefills its prompt for every question.
* ``inproc``: bench/rag.py's Whole: the whole-document path in-process, with ``--wording``.

Sets (bench/sets.py): ``tpo``, ``quality``, ``needles``, ``counterfactual``, ``injection``, ``pdf10``,
``examples``. Scores: bench/score.py. Each answer's record (text, quote, score, TTFT, seconds, finish
reason, citations) goes to the JSON and the tables are made from it (bench/quality_report.py), so a
run cut short still reports what it finished, and ``--resume`` goes on from it: run one set at a time
(``--sets tpo``), each under an hour on 2 cores for the default model.

Run ``nice -n 5 python -m bench.quality --help`` for the knobs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import tempfile
import time
from pathlib import Path

from bench.quality_report import write_report
from bench.quality_sets import Doc
from bench.score import cites_needle, score
from bench.sets import SETS, build_sets
from runtime.models import model_path
from testkit.live import Live

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
THREADS = 2


def ask_server(live: Live, doc_id: str, item, mode: str) -> dict:
    body = {"question": item.question, "max_tokens": item.max_tokens, "temperature": 0, "mode": mode}
    t0 = time.perf_counter()
    status, r = live.post_json(f"/v1/documents/{doc_id}/answers", body, timeout=900)
    seconds = time.perf_counter() - t0
    if status != 200:
        return {"answer": "", "error": r, "seconds": seconds, "ttft_ms": None, "finish_reason": "error"}
    stats, quote = r["stats"], r.get("quote")
    return {
        "answer": r["answer"],
        "quote": quote["text"] if quote else None,
        "quote_verified": quote["verified"] if quote else None,
        "citations": r["citations"] + [c for a in r.get("answers") or [] for c in a["citations"]],
        "seconds": seconds,
        "ttft_ms": stats["ttft_ms"],
        "finish_reason": stats["finish_reason"],
        "completion_tokens": stats["completion_tokens"],
        "segments": [s["index"] for s in stats.get("segments") or []] if stats.get("segments") is not None else None,
    }


def run_server(system: str, model: str, path: Path, docs: list[Doc], args, out: list[dict], root: Path, save) -> dict:
    """Upload each document to a fresh server, ask its questions in every mode; returns {doc_id:
    (tokens, ready s)}."""
    n_ctx = args.segment_ctx if system == "segments" else args.whole_ctx
    data = Path(tempfile.mkdtemp(prefix=f"docqa-quality-{model}-{system}-"))
    env = {"DOCQA_N_CTX": str(n_ctx), "DOCQA_N_THREADS": str(args.threads), "DOCQA_SELFTEST": "false"}
    live = Live(data / "data", path, root=root, **env)
    ready: dict[str, tuple[int, float]] = {}
    live.start(timeout=900)
    try:
        for doc in docs:
            whole = args.ready.get(f"{model}/whole", {}).get(doc.doc_id)
            if system == "segments" and whole is not None and whole[0] <= args.segment_ctx - 1024:
                mine = [r for r in out if (r["model"], r["system"], r["doc"]) == (model, "whole", doc.doc_id)]
                out.extend({**r, "system": system, "reused": True} for r in mine)
                continue
            t0 = time.perf_counter()
            status, created = live.upload(doc.name, doc.data if doc.data is not None else doc.text.encode())
            info = live.wait_ready(created["id"], timeout=3600)
            ready[doc.doc_id] = (info["tokens"], time.perf_counter() - t0)
            print(f"  {system} {model} {doc.doc_id}: {info['status']}, {info['tokens']} tokens, "
                  f"{ready[doc.doc_id][1]:.1f} s", flush=True)  # fmt: skip
            for item in doc.items:
                for mode in args.modes:
                    out.append(record(model, system, mode, doc, item, ask_server(live, created["id"], item, mode)))
            save(ready)  # a run cut short keeps every document it finished (--resume goes on from there)
    finally:
        live.stop()
    return ready


def run_inprocess(system: str, model: str, path: Path, docs: list[Doc], args, out: list[dict], save) -> dict:
    from bench.rag import Rag, Whole
    from ingest.extract import extract
    from ingest.prompt import WORDINGS

    wording = WORDINGS[args.wording]
    ready = {}
    reader = Rag(path, args.threads, n_ctx=4096, wording=wording) if system == "rag" else None
    try:
        for doc in docs:
            text = extract(doc.data if doc.data is not None else doc.text.encode()).text  # as docqa reads it
            if system == "rag":
                ready[doc.doc_id] = (reader.index(text), 0.0)
            else:
                reader = Whole(path, args.threads, n_ctx=min(32768, 2048 + len(text) // 3), wording=wording)
                ready[doc.doc_id] = reader.ingest(text)
            for item in doc.items:
                if system == "rag" and item.qid not in args.rag_items:
                    continue
                for mode, r in reader.ask_modes(item.question, item.max_tokens, args.modes).items():
                    rec = {"answer": r.text, "quote": r.quote_sentence or r.quote, "quote_verified": r.quote_verified,
                           "citations": [], "seconds": r.seconds, "ttft_ms": r.ttft_ms,
                           "finish_reason": r.finish_reason, "completion_tokens": r.completion_tokens,
                           "prompt_tokens": r.prompt_tokens}  # fmt: skip
                    label = system if system == "rag" else f"inproc-{args.wording}"
                    out.append(record(model, label, mode, doc, item, rec))
            if system != "rag":
                reader.close()
            print(f"  {system} {model} {doc.doc_id} done", flush=True)
            save(ready)
    finally:
        if system == "rag":
            reader.close()
    return ready


def rag_sample(docs: list[Doc], n: int, seed: int) -> set[str]:
    """A fixed sample of ``n`` scored questions per set (all of a smaller set), the same for every model
    and run with this seed; RAG answers only these (it prefills its prompt for every question)."""
    rng, out = random.Random(seed), set()
    for set_name in SETS:
        qids = sorted(i.qid for d in docs if d.set == set_name for i in d.items if i.kind != "free")
        out |= set(qids if n <= 0 or len(qids) <= n else rng.sample(qids, n))
    return out


def first_docs(docs: list[Doc], spec: str) -> list[Doc]:
    """The first N documents of each set named in ``spec`` ("tpo=8,quality=4"), in bench/sets.py's seeded
    order; the other sets whole. Every run with the same spec and seed answers the same questions."""
    limit = {k: int(v) for k, v in (x.split("=") for x in spec.split(",") if x)}
    seen: dict[str, int] = {}
    keep = []
    for d in docs:
        seen[d.set] = seen.get(d.set, 0) + 1
        if seen[d.set] <= limit.get(d.set, len(docs)):
            keep.append(d)
    return keep


def record(model: str, system: str, mode: str, doc: Doc, item, rec: dict) -> dict:
    s = score(item, rec["answer"])
    cited = cites_needle(item, rec.get("citations") or []) if item.needle and item.kind != "mc" else None
    absent = item.qid.split("-absent-")[1].rstrip("0123456789") if "-absent-" in item.qid else None
    return {
        "model": model, "system": system, "mode": mode, "set": doc.set, "doc": doc.doc_id, "qid": item.qid,
        "kind": item.kind, "absent": absent, "depth": item.depth, "gold": item.gold, **rec, **s,
        "cites_needle": cited,
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
    p.add_argument("--models", default="qwen-coder-1.5b,gemma-270m")
    p.add_argument("--systems", default="whole,rag", help="whole, whole-v1, segments, rag, inproc")
    p.add_argument("--modes", default="direct,quote", help="ways of answering, each question asked in each")
    p.add_argument("--seed", type=int, default=34)
    p.add_argument("--sets", default=",".join(s for s in SETS if s != "examples"), help=f"of {', '.join(SETS)}")
    p.add_argument("--docs", default="", help="first N documents of a set, e.g. tpo=8,quality=4 (all otherwise)")
    p.add_argument("--whole-ctx", type=int, default=28672)
    p.add_argument("--segment-ctx", type=int, default=3072)
    p.add_argument("--rag-sample", type=int, default=60, help="questions per set RAG answers (0: all)")
    p.add_argument("--threads", type=int, default=THREADS)
    p.add_argument("--wording", default="grounded", help="inproc/rag: ingest/prompt.py WORDINGS name")
    p.add_argument("--baseline-root", type=Path, default=None, help="checkout for whole-v1")
    p.add_argument("--out", type=Path, default=RESULTS / "quality")
    p.add_argument("--resume", action="store_true", help="keep the records of --out.json and skip what they cover")
    args = p.parse_args()
    args.modes = args.modes.split(",")
    docs = first_docs(build_sets(args.seed, tuple(args.sets.split(","))), args.docs)
    args.rag_items = rag_sample(build_sets(args.seed), args.rag_sample, args.seed)  # independent of --sets
    json_path = args.out.with_suffix(".json")
    results = {"records": [], "ready": {}, "runs": []}
    if args.resume and json_path.is_file():
        results = json.loads(json_path.read_text())
    out = results["records"]
    args.ready = results["ready"]  # the whole system's document sizes tell which documents fit one segment
    models_dir = Path(tempfile.gettempdir()) / "docqa-quality-models"
    for model in args.models.split(","):
        path = model_path(model, models_dir)
        for system in args.systems.split(","):
            label = f"inproc-{args.wording}" if system == "inproc" else system
            done = {r["doc"] for r in out if r["model"] == model and r["system"] == label}
            todo = [d for d in docs if d.doc_id not in done]  # --resume: what the JSON does not hold yet
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
                    k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                    if k not in ("ready", "rag_items")
                }  # fmt: skip
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
