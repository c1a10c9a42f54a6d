"""Questions asked while their own document is read (issue 52): answered from the part read so far.

One fresh server (``python -m server``) per run, the default model, a ~20k-token document read in one
piece (a stretch of *Around the World in Eighty Days* with two planted sentences: one at 10 % of its
depth, one at 80 %). Run "alone": the document is read with no question. Run "asked": at 30 % of the
reading five questions are asked one after another (streamed, the server's default answer form):
the fact planted at 10 %, the fact planted at 80 %, and three about the book's opening. Reported: each
question's time to its ``partial`` event and to its first answer token, its answer, whether its
quote is verified, its reason when refused, how far it says the document was read; the reading's
time in both runs (upload to ready); and the two planted questions asked again once it is ready.

Run on an idle machine: ``python -m bench.ask_while_reading`` (``--help``). Writes
bench/results/ask-while-reading.{json,md}.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import tempfile
import time
from pathlib import Path

from bench.quality import machine
from runtime.models import model_path
from runtime.system import system_info
from server.config.model import ModelSettings
from testkit.live import Live

ROOT = Path(__file__).resolve().parent.parent
BOOK = (ROOT.parent / "shared" / "cases" / "text" / "gutenberg" / "around-the-world-in-80-days-pg103.txt").read_text(
    encoding="utf-8-sig"
)
NEAR = "The night porter of the Reform Club kept the spare key of the library in a blue tin box."
FAR = "The harbour master at Suez that autumn was a Dane named Oskar Lindqvist."
QUESTIONS = [
    ("near (10 %)", "Where did the night porter of the Reform Club keep the spare key of the library?"),
    ("far (80 %)", "What was the name of the harbour master at Suez?"),
    ("opening", "Where did Phileas Fogg live?"),
    ("opening", "Which club was Phileas Fogg a member of?"),
    ("opening", "Why did Phileas Fogg dismiss James Forster?"),
]


def document(n_chars: int) -> str:
    """The book from its first chapter, ``n_chars`` long, with NEAR at 10 % and FAR at 80 % (each at a
    paragraph break)."""
    text = BOOK[BOOK.index("Mr. Phileas Fogg lived") :][:n_chars]
    for share, sentence in ((0.8, FAR), (0.1, NEAR)):
        at = text.index("\n\n", int(share * len(text)))
        text = f"{text[:at]}\n\n{sentence}{text[at:]}"
    return text


def ask(live: Live, doc_id: str, question: str) -> dict:
    """One streamed question: seconds to its ``partial`` event and first token, its answer and quote."""
    body = json.dumps({"question": question, "max_tokens": 64, "stream": True})
    c = http.client.HTTPConnection("127.0.0.1", live.port, timeout=1800)
    t0 = time.perf_counter()
    c.request("POST", f"/v1/documents/{doc_id}/answers", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    out: dict = {"status": r.status, "answer": "", "partial": None, "partial_s": None, "first_token_s": None}
    kind = None
    for raw in iter(r.readline, b""):
        line = raw.decode().strip()
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            data = json.loads(line[6:])
            if kind == "partial":
                out["partial"], out["partial_s"] = data, time.perf_counter() - t0
            elif kind in ("token", "quote") and out["first_token_s"] is None:
                out["first_token_s"] = time.perf_counter() - t0
            if kind == "token":
                out["answer"] += data["text"]
            elif kind == "citations":
                out["quote"] = data.get("quote")
            elif kind == "error":
                out["error"] = data
            elif kind == "done":
                break
    c.close()
    out["total_s"] = time.perf_counter() - t0
    return out


def run(model: Path, text: str, threads: int, asked: bool, mode: str, n_ctx=24576, at=0.3, repack="auto") -> dict:
    data = Path(tempfile.mkdtemp(prefix="docqa-ask-reading-"))
    # n_ctx room for the whole document in one piece (the served default on this machine may be smaller,
    # which reads it in segments: bench/long.py measures those)
    # and the default model's served answer form (auto is "direct" for a GGUF named by its path, as Live names it)
    env = {"DOCQA_N_THREADS": str(threads), "DOCQA_N_CTX": str(n_ctx), "DOCQA_ANSWER_MODE": mode}
    env["DOCQA_CPU_REPACK"] = repack  # pair: a reader of plain weights (server/engine/layout.py)
    live = Live(data / "data", model, **env)
    live.start(timeout=900)
    try:
        t0 = time.perf_counter()
        _, doc = live.upload("around-the-world.txt", text.encode())
        answers = []
        if asked:
            while (info := live.get(f"/v1/documents/{doc['id']}")[1])["progress"] < at:
                assert info["status"] == "ingesting", info
                time.sleep(0.5)
            for label, q in QUESTIONS:
                answers.append({"label": label, "question": q, **ask(live, doc["id"], q)})
        info = live.wait_ready(doc["id"], timeout=7200)
        read_s = time.perf_counter() - t0
        again = QUESTIONS[:2] if asked else []
        after = [{"label": label, "question": q, **ask(live, doc["id"], q)} for label, q in again]
    finally:
        live.stop()
    segments = len(live_segments) if (live_segments := info.get("segments")) else 1
    return {"tokens": info["tokens"], "read_s": read_s, "asked": answers, "after": after, "segments": segments}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen-coder-1.5b")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--chars", type=int, default=80_000, help="the document's length (about 4 characters a token)")
    p.add_argument("--n-ctx", type=int, default=24576, help="smaller than the document: read in segments")
    p.add_argument("--at", type=float, default=0.3, help="the share read when the questions are asked")
    p.add_argument("--repack", default="auto", help="DOCQA_CPU_REPACK (the server starts without its self-test)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "ask-while-reading")
    args = p.parse_args()
    path = model_path(args.model, Path(tempfile.gettempdir()) / "docqa-models")
    text = document(args.chars)
    load0 = os.getloadavg()
    mode = ModelSettings(model=args.model).answer_mode_for_model()
    alone = run(path, text, args.threads, asked=False, mode=mode, n_ctx=args.n_ctx, repack=args.repack)
    asked = run(path, text, args.threads, asked=True, mode=mode, n_ctx=args.n_ctx, at=args.at, repack=args.repack)
    m = {**machine(), "load_before": load0, "load_after": os.getloadavg(), "system_info": system_info()}
    results = {"model": args.model, "mode": mode, "alone": alone, "asked": asked, "machine": m}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    lines = [
        f"# Questions asked while their document is read ({args.model}, {mode} answers, bench/ask_while_reading.py)",
        "",
        f"{m['cpu']}, {m['cores']} cores, {args.threads} threads; load before/after {m['load_before']} / "
        f"{m['load_after']}. A {asked['tokens']:,}-token document read in "
        f"{'one piece' if asked['segments'] == 1 else str(asked['segments']) + ' segments'} (n_ctx {args.n_ctx}, "
        f"DOCQA_CPU_REPACK={args.repack}): "
        f"alone in {alone['read_s']:.0f} s, with five questions asked at {args.at:.0%} in {asked['read_s']:.0f} s "
        f"({asked['read_s'] / alone['read_s']:.2f}x).",
        "",
        "| when | question | to `partial` s | to first token s | read so far | answer | quote verified | reason |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for when, rows in (("reading", asked["asked"]), ("ready", asked["after"])):
        for r in rows:
            q = r.get("quote") or {}
            share = f"{r['partial']['share']:.0%}" if r["partial"] else "whole"
            answer = r["answer"].replace("|", "/").replace("\n", " ")[:80]
            cells = [when, f"{r['label']}: {r['question']}", _s(r["partial_s"]), _s(r["first_token_s"]), share,
                     answer, str(q.get("verified", "")), (q.get("reason") or "").replace("|", "/")[:90]]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def _s(x: float | None) -> str:
    return "" if x is None else f"{x:.1f}"


if __name__ == "__main__":
    main()
