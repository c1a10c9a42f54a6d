"""Long documents in segments (issue 18): needles in a Gutenberg novel, answered from the segment that
holds them, against a "first 31k tokens only" baseline (what a page or character range alone gives).

The novel (Around the World in Eighty Days, ~86k tokens) gets three sentences of our own at 10 %, 50 %
and 90 % of its depth, and one more next to the first that only makes sense with the last (a two-hop
question). With DOCQA_N_CTX 32768 it is ingested as three segments. For every needle question:

* **hit**: the segment(s) answered from hold the needle sentence;
* **exact**: the answer contains the needle's key word (case-insensitive);
* **TTFT first / repeated**: the question's first ask (its segment restored into the document
  sequence, from RAM, after another segment was in use) and the same question again (already in use);
  and the first ask after a server restart (the segment's snapshot from disk).

The baseline server refuses long documents (DOCQA_LONG_DOCUMENTS=refuse) and gets the leading part
that the 413 offers (``chars=0-N``), about 31k tokens. Ingest time is set against a plain prefill of
the same segment tokens through llama.cpp (runtime.Context, n_batch 512: what llama-bench pp does),
and against llama-bench itself when ``bench/.build/bin/llama-bench`` exists (bench/setup.sh).

Usage: .venv/bin/python -m bench.long [--threads N] [--n-ctx 32768] [--chars N] [--out bench/results/long.md]
``--chars`` keeps only the first N characters of the novel (a reduced run; the .md says so).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient

from runtime.embedded import embedded_model_path
from runtime.system import system_info
from server.api.app import create_app
from server.config.settings import Settings
from testkit.live import LOCAL

ROOT = Path(__file__).resolve().parent.parent
NOVEL = ROOT.parent / "shared/cases/text/gutenberg/around-the-world-in-80-days-pg103.txt"
LLAMA_BENCH = ROOT / "bench/.build/bin/llama-bench"

# (depth, sentence, [(question, key word)]): sentences of our own, not in the novel.
NEEDLES = [
    (
        0.10,
        "The lighthouse keeper Zebulon Quarry kept a blue parrot, and the parrot was named Marigold.",
        [
            ("What was the parrot of Zebulon Quarry named?", "marigold"),
            ("What was the name of the lighthouse keeper Zebulon Quarry's parrot?", "marigold"),
            ("Which bird did Zebulon Quarry keep?", "parrot"),
        ],
    ),
    (
        0.50,
        "The harbour master Ignatius Pell kept his savings in a tin box painted with seventeen yellow stars.",
        [
            ("How many stars were painted on the tin box of Ignatius Pell?", "seventeen"),
            ("Where did the harbour master Ignatius Pell keep his savings?", "box"),
            ("What colour were the stars on the box of Ignatius Pell?", "yellow"),
        ],
    ),
    (
        0.90,
        "The retired cartographer Octavia Thistlewood grew purple crocuses on her balcony in Valletta.",
        [
            ("In which city did Octavia Thistlewood grow crocuses?", "valletta"),
            ("What flowers did the cartographer Octavia Thistlewood grow?", "crocus"),
            ("What colour were the crocuses of Octavia Thistlewood?", "purple"),
        ],
    ),
]
# A fact next to the first needle that only answers with the third one: two segments apart.
HOP = (0.10, "Zebulon Quarry had one sister, the cartographer Octavia Thistlewood.")
MULTI_HOP = [
    ("In which city did the sister of Zebulon Quarry grow crocuses?", "valletta"),
    ("What colour were the flowers grown by the sister of the lighthouse keeper Zebulon Quarry?", "purple"),
]


def with_needles(text: str) -> tuple[str, dict[float, str]]:
    """The novel with each needle as a paragraph of its own at its depth (the next paragraph break)."""
    inserts = [(d, s) for d, s, _ in NEEDLES] + [HOP]
    out, placed = text, {}
    for depth, sentence in sorted(inserts, key=lambda x: -x[0]):  # deepest first: offsets stay valid
        at = out.find("\n\n", int(depth * len(text)))
        at = len(out) if at == -1 else at + 2
        out = out[:at] + sentence + "\n\n" + out[at:]
        placed[depth] = placed.get(depth, "") + sentence
    return out, placed


def _wait(client, doc_id: str) -> dict:
    while (doc := client.get(f"/v1/documents/{doc_id}").json())["status"] == "ingesting":
        time.sleep(0.2)
    return doc


def _ask(client, doc_id: str, question: str) -> dict:
    r = client.post(f"/v1/documents/{doc_id}/answers", json={"question": question, "max_tokens": 32})
    r.raise_for_status()
    return r.json()


def _settings(data_dir: Path, model: Path, args, **extra) -> Settings:
    return Settings(
        data_dir=data_dir, model_path=model, n_ctx=args.n_ctx, n_threads=args.threads, selftest=False, **extra
    )


def _holds(text: str, segments: list[dict], index: int, sentence: str) -> bool:
    s = segments[index]
    return sentence in text[s["start"] : s["end"]]


def run_segmented(args, model: Path, data: bytes, text: str) -> dict:
    data_dir = Path(tempfile.mkdtemp(prefix="docqa-long-"))
    out: dict = {"questions": []}
    with TestClient(create_app(_settings(data_dir, model, args)), base_url=LOCAL) as client:
        t0 = time.perf_counter()
        doc = _wait(client, client.post("/v1/documents", files={"file": ("novel.txt", data)}).json()["id"])
        out["ingest_s"] = round(time.perf_counter() - t0, 1)
        out["tokens"], out["segments"] = doc["tokens"], doc["segments"]
        print(f"ingested {doc['tokens']} tokens in {out['ingest_s']} s: {len(doc['segments'])} segments", flush=True)
        stored = client.get(f"/v1/documents/{doc['id']}/text").json()["text"]
        for depth, sentence, questions in NEEDLES:
            for question, word in questions:
                first, again = _ask(client, doc["id"], question), _ask(client, doc["id"], question)
                used = [u["index"] for u in first["stats"]["segments"]]
                out["questions"].append({
                    "depth": depth, "question": question, "answer": first["answer"], "segments_used": used,
                    "hit": any(_holds(stored, doc["segments"], i, sentence) for i in used),
                    "exact": word in first["answer"].lower(),
                    "ttft_first_ms": round(first["stats"]["ttft_ms"], 1),
                    "ttft_repeat_ms": round(again["stats"]["ttft_ms"], 1),
                })  # fmt: skip
        for question, word in MULTI_HOP:
            answer = _ask(client, doc["id"], question)
            used = [u["index"] for u in answer["stats"]["segments"]]
            needed = {
                i
                for i in range(len(doc["segments"]))
                for s in (HOP[1], NEEDLES[2][1])
                if _holds(stored, doc["segments"], i, s)
            }
            out.setdefault("multi_hop", []).append({
                "question": question, "answer": answer["answer"], "segments_used": used,
                "needed_segments": sorted(needed), "exact": word in answer["answer"].lower(),
            })  # fmt: skip
        missing = _ask(client, doc["id"], "Where is the zeppelin of Quenby Vortigern?")
        out["not_found"] = {"answer": missing["answer"], "segments": missing["stats"]["segments"]}
    # A restart: the first question per depth restores its segment's snapshot from disk.
    with TestClient(create_app(_settings(data_dir, model, args)), base_url=LOCAL) as client:
        out["ttft_after_restart_ms"] = [
            round(_ask(client, doc["id"], qs[0][0])["stats"]["ttft_ms"], 1) for _, _, qs in NEEDLES
        ]
    out["data_dir"] = str(data_dir)
    return out


def run_baseline(args, model: Path, data: bytes, text: str) -> dict:
    """The leading part that the 413 offers, with long documents refused."""
    data_dir = Path(tempfile.mkdtemp(prefix="docqa-long-base-"))
    out: dict = {"questions": []}
    with TestClient(create_app(_settings(data_dir, model, args, long_documents="refuse")), base_url=LOCAL) as client:
        r = client.post("/v1/documents", files={"file": ("novel.txt", data)})
        a, b = r.json()["error"]["fits"]["chars"]
        t0 = time.perf_counter()
        r = client.post("/v1/documents", files={"file": ("novel.txt", data)}, data={"chars": f"{a}-{b}"})
        doc = _wait(client, r.json()["id"])
        out.update(ingest_s=round(time.perf_counter() - t0, 1), tokens=doc["tokens"], chars=[a, b])
        print(f"baseline: ingested {doc['tokens']} tokens in {out['ingest_s']} s", flush=True)
        part = client.get(f"/v1/documents/{doc['id']}/text").json()["text"]
        for depth, sentence, questions in NEEDLES:
            for question, word in questions:
                first, again = _ask(client, doc["id"], question), _ask(client, doc["id"], question)
                out["questions"].append({
                    "depth": depth, "question": question, "answer": first["answer"], "hit": sentence in part,
                    "exact": word in first["answer"].lower(), "ttft_first_ms": round(first["stats"]["ttft_ms"], 1),
                    "ttft_repeat_ms": round(again["stats"]["ttft_ms"], 1),
                })  # fmt: skip
    return out


def plain_prefill(args, model_path: Path, data_dir: str) -> dict:
    """Tokens/s of a plain llama.cpp prefill of the first ``--pp-tokens`` tokens of the first
    segment's prefix (n_batch 512), the llama-bench pp of our own; and llama-bench pp itself when it
    is built."""
    import numpy as np

    from runtime.llama import Context, ContextConfig, Model

    prefix = np.load(next(Path(data_dir).glob("documents/*/segments/0/prefix.npy")))[: args.pp_tokens]
    model = Model(model_path)
    ctx = Context(model, ContextConfig(n_ctx=args.n_ctx, n_batch=512, n_ubatch=512, n_threads=args.threads,
                                       n_threads_batch=args.threads))  # fmt: skip
    t0 = time.perf_counter()
    ctx.prefill(prefix, 0)
    seconds = time.perf_counter() - t0
    ctx.close()
    model.close()
    out = {"tokens": len(prefix), "seconds": round(seconds, 1), "tokens_per_s": round(len(prefix) / seconds, 1)}
    if LLAMA_BENCH.is_file():
        proc = subprocess.run(
            [str(LLAMA_BENCH), "-m", str(model_path), "-p", str(len(prefix)), "-n", "0", "-t", str(args.threads),
             "-r", "1", "-o", "json"], capture_output=True, text=True, check=True,
        )  # fmt: skip
        out["llama_bench_pp_tokens_per_s"] = round(json.loads(proc.stdout)[0]["avg_ts"], 1)
    return out


def _rate(rows: list[dict], key: str) -> str:
    return f"{sum(r[key] for r in rows)}/{len(rows)}"


def _median(rows: list[dict], key: str) -> str:
    return f"{statistics.median(r[key] for r in rows):,.0f}" if rows else "–"


def report(args, results: dict) -> str:
    seg = results["segmented"]
    missing = [name for name in ("baseline", "plain_prefill") if name not in results]
    base = results.get("baseline") or {"questions": [], "chars": [0, 0], "tokens": 0, "ingest_s": 0}
    pp = results.get("plain_prefill") or {"tokens": 0, "seconds": 0, "tokens_per_s": 0}
    seg_list = ", ".join(f"{s['tokens']:,} (pages {s['pages'][0]}–{s['pages'][1]})" for s in seg["segments"])
    llama_bench = (
        f"; llama-bench pp{pp['tokens']}: {pp['llama_bench_pp_tokens_per_s']:,} tok/s"
        if "llama_bench_pp_tokens_per_s" in pp
        else "; llama-bench is not built here (bench/setup.sh), so it was not run"
    )
    lines = [
        "# Long documents in segments (issue 18)",
        "",
        f"`python -m bench.long` on {results['machine']}, {args.threads} threads, embedded Gemma 3 270M "
        f"Q4_K_M, n_ctx {args.n_ctx} (segments of at most {args.n_ctx - 1024} tokens), default decoding, "
        "max_tokens 32.",
        f"Document: {results['document']}.",
        *([f"**Not run in this session (out of time): {', '.join(missing)}.**"] if missing else []),
        f"llama.cpp: `{results['system_info']}`",
        "",
        f"Size: one run; {sum(len(q) for _, _, q in NEEDLES)} needle questions ({len(NEEDLES[0][2])} per depth), "
        f"each asked twice (first, repeated), {len(MULTI_HOP)} two-hop questions, one not-in-the-document "
        "question. Load average of the machine (shared with other work) at start / end: "
        f"{results.get('load_avg', ['?', '?'])[0]} / {results.get('load_avg', ['?', '?'])[-1]}.",
        "",
        "## Needles: segment retrieval and answers",
        "",
        "| depth | retrieval hit (segments) | exact match (segments) | exact match, first 31k tokens only | "
        "TTFT first / repeated, ms (segments) | TTFT first / repeated, ms (baseline) |",
        "|---|---|---|---|---|---|",
    ]
    for depth, _, _ in NEEDLES:
        s = [q for q in seg["questions"] if q["depth"] == depth]
        b = [q for q in base["questions"] if q["depth"] == depth]
        lines.append(
            f"| {depth:.0%} | {_rate(s, 'hit')} | {_rate(s, 'exact')} | {_rate(b, 'exact')} (needle in part: "
            f"{_rate(b, 'hit')}) | {_median(s, 'ttft_first_ms')} / {_median(s, 'ttft_repeat_ms')} | "
            f"{_median(b, 'ttft_first_ms')} / {_median(b, 'ttft_repeat_ms')} |"
        )
    all_s, all_b = seg["questions"], base["questions"]
    lines += [
        f"| all | {_rate(all_s, 'hit')} | {_rate(all_s, 'exact')} | {_rate(all_b, 'exact')} | "
        f"{_median(all_s, 'ttft_first_ms')} / {_median(all_s, 'ttft_repeat_ms')} | "
        f"{_median(all_b, 'ttft_first_ms')} / {_median(all_b, 'ttft_repeat_ms')} |",
        "",
        f"TTFT of the first question per depth after a server restart (segment snapshot from disk): "
        f"{', '.join(f'{t:,.0f}' for t in seg['ttft_after_restart_ms'])} ms.",
        "",
        "Two-hop questions (a fact at 10 % and one at 90 %):",
        "",
        "| question | segments needed | segments used | exact |",
        "|---|---|---|---|",
        *[
            f"| {m['question']} | {m['needed_segments']} | {m['segments_used']} | {m['exact']} |"
            for m in seg.get("multi_hop", [])
        ],
        "",
        f"Not in the document (question about Quenby Vortigern): segments {seg['not_found']['segments']}, "
        f"answer {seg['not_found']['answer'][:60]!r}…",
        "",
        "## Ingest",
        "",
        "| document | tokens | segments | ingest wall time | ingest tok/s |",
        "|---|---|---|---|---|",
        f"| whole novel, segmented | {seg['tokens']:,} | "
        f"{seg_list} | "
        f"{seg['ingest_s']} s | {seg['tokens'] / seg['ingest_s']:,.0f} |",
        f"| first part only (chars {base['chars'][0]}–{base['chars'][1]}) | {base['tokens']:,} | 1 | "
        f"{base['ingest_s']} s | {base['tokens'] / max(base['ingest_s'], 1e-9):,.0f} |",
        "",
        f"Plain llama.cpp prefill of the first {pp['tokens']:,} tokens of segment 0 (runtime.Context, n_batch "
        f"512, no server): {pp['seconds']} s, {pp['tokens_per_s']:,} tok/s" + llama_bench + ".",
        "",
        "## Answers",
        "",
        "| depth | question | segments used | answer (segments) | answer (first 31k only) |",
        "|---|---|---|---|---|",
        *[
            f"| {s['depth']:.0%} | {s['question']} | {s['segments_used']} | {s['answer'].strip()[:70]!r} | "
            f"{b['answer'].strip()[:70]!r} |"
            for s, b in zip(all_s, all_b or [{"answer": "(not run)"}] * len(all_s), strict=True)
        ],
        "",
    ]
    return "\n".join(lines).replace("|  |", "| |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--n-ctx", type=int, default=32768)
    parser.add_argument("--chars", type=int, default=0, help="keep only the first N characters (0: all)")
    parser.add_argument("--pp-tokens", type=int, default=8192, help="tokens of the plain prefill (pp) run")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/long.md")
    parser.add_argument("--report-only", action="store_true", help="write the .md from the .json of a run")
    args = parser.parse_args()
    if args.report_only:
        args.out.write_text(report(args, json.loads(args.out.with_suffix(".json").read_text())))
        print(args.out.read_text())
        return

    text = NOVEL.read_text(encoding="utf-8-sig").replace("\r\n", "\n")
    if args.chars:
        text = text[: args.chars]
    novel, _ = with_needles(text)
    data = novel.encode()
    model = embedded_model_path(Path(tempfile.mkdtemp(prefix="docqa-long-model-")))
    results: dict = {
        "machine": f"{platform.processor() or platform.machine()} ({os.cpu_count()} cores)",
        "system_info": system_info(),
        "document": f"{NOVEL.name}{f' (first {args.chars:,} characters)' if args.chars else ''}, "
        f"{len(novel):,} characters with the needles",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_suffix(".json")
    results["load_avg"] = [round(os.getloadavg()[0], 1)]
    t0 = time.perf_counter()
    results["segmented"] = seg = run_segmented(args, model, data, novel)
    print(f"segmented: {time.perf_counter() - t0:.0f} s", flush=True)
    partial.write_text(json.dumps(results, indent=1, ensure_ascii=False))
    results["baseline"] = run_baseline(args, model, data, novel)
    print(f"baseline done: {time.perf_counter() - t0:.0f} s", flush=True)
    partial.write_text(json.dumps(results, indent=1, ensure_ascii=False))
    results["plain_prefill"] = plain_prefill(args, model, seg["data_dir"])
    results["wall_s"] = round(time.perf_counter() - t0)
    results["load_avg"].append(round(os.getloadavg()[0], 1))
    partial.write_text(json.dumps(results, indent=1, ensure_ascii=False))
    args.out.write_text(report(args, results))
    print(args.out.read_text())


if __name__ == "__main__":
    main()
