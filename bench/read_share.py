"""Questions asked while another part of their document is read: how soon each is answered, and how far
the reading gets meanwhile (server/engine/slices.py ``ReadShare``).

One fresh server (``python -m server`` from ``--root``, default this checkout), the default model with the
layout this Zen 4 chooses pinned (the pair, flash attention off; no self-test), a ~9k-token stretch of
*Around the World in Eighty Days* (bench/ask_while_reading.py ``document``) read in one piece. At 40 % of
the reading four questions are asked one after another, streamed, two quote-first and two direct (64
tokens at most). Reported: each one's seconds to its first token and to its end, its token events, the
seconds the four took and the share of the document read meanwhile.

Usage: ``python -m bench.read_share LABEL [--root DIR]``; prints one JSON object (bench/results/read-share.md).
"""

from __future__ import annotations

import argparse
import http.client
import json
import tempfile
import time
from pathlib import Path

from bench.ask_while_reading import document
from runtime.models import model_path
from testkit.live import ROOT, Live

QUESTIONS = [
    ("quote", "Where did Phileas Fogg live?"),
    ("direct", "Which club was Phileas Fogg a member of?"),
    ("quote", "Why did Phileas Fogg dismiss James Forster?"),
    ("direct", "Describe Phileas Fogg's habits at the club."),
]


def ask(live: Live, doc_id: str, question: str, mode: str) -> dict:
    body = json.dumps({"question": question, "max_tokens": 64, "stream": True, "mode": mode})
    c = http.client.HTTPConnection("127.0.0.1", live.port, timeout=1800)
    t0 = time.perf_counter()
    c.request("POST", f"/v1/documents/{doc_id}/answers", body, {"Content-Type": "application/json"})
    kind, first, events = None, None, 0
    for raw in iter(c.getresponse().readline, b""):
        line = raw.decode().strip()
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            if kind in ("token", "quote") and first is None:
                first = time.perf_counter() - t0
            events += kind == "token"
            if kind == "done":
                break
    c.close()
    return {"mode": mode, "question": question, "first_s": first, "total_s": time.perf_counter() - t0, "events": events}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("label")
    p.add_argument("--root", type=Path, default=ROOT)
    args = p.parse_args()
    path = model_path("qwen-coder-1.5b", Path(tempfile.gettempdir()) / "docqa-models")
    env = {"DOCQA_N_THREADS": "2", "DOCQA_N_CTX": "24576", "DOCQA_SELFTEST": "false", "DOCQA_FLASH_ATTN": "off",
           "DOCQA_CPU_REPACK": "pair", "DOCQA_ANSWER_MODE": "quote"}  # fmt: skip
    live = Live(Path(tempfile.mkdtemp(prefix="docqa-read-share-")) / "data", path, root=args.root, **env)
    live.start(timeout=900)
    try:
        _, doc = live.upload("around-the-world.txt", document(40_000).encode())
        while (info := live.get(f"/v1/documents/{doc['id']}")[1])["progress"] < 0.4:
            time.sleep(0.5)
        t0, before = time.perf_counter(), info["progress"]
        rows = [ask(live, doc["id"], q, mode) for mode, q in QUESTIONS]
        took, after = time.perf_counter() - t0, live.get(f"/v1/documents/{doc['id']}")[1]["progress"]
        tokens = live.wait_ready(doc["id"], timeout=3600)["tokens"]
    finally:
        live.stop()
    print(json.dumps({"label": args.label, "tokens": tokens, "read_from": before, "read_to": after,
                      "questions_s": took, "rows": rows}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
