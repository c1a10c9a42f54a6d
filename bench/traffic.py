"""Record a mixed workload in a data directory's traffic log, for ``docqa tune`` (README "Tuning").

A real server (``python -m server``) in ``--data-dir`` gets two documents and ``--answers``
questions of several kinds, sent at random arrival times in bursts (1-3 questions at once, mean gap
6 s): quotes asked with ``verify16``, open questions left to the server's window, questions with
``draft_tokens: 0``, and sampled answers (T=0.7), 16 to 64 tokens each. Then ``docqa tune
--data-dir DIR`` replays what the server logged.

`.venv/bin/python -m bench.traffic --data-dir /tmp/tune-data` (about 3 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from bench.run import CASES
from testkit.live import Live
from testkit.traffic import record

DOCS = (("alice-in-wonderland-pg11.txt", 8_000), ("around-the-world-in-80-days-pg103.txt", 6_000))
KINDS = (
    ("Quote the paragraph that begins with {opening!r}.", {"verify16": True}),
    ("What happens in the passage about {opening!r}?", {}),
    ("Who speaks in the lines starting {opening!r}?", {"draft_tokens": 0}),
    ("Write a short note about {opening!r}.", {"temperature": 0.7}),
)


def mixed(doc_texts: dict[str, str], n_answers: int, seed: int) -> list[tuple[float, str, dict]]:
    """``n_answers`` questions over the documents: kinds and lengths at random, bursts of 1-3
    questions at once between exponential gaps (mean 6 s)."""
    rng = random.Random(seed)
    openings = {
        doc: [" ".join(p.split()[:5]) for p in text.split("\n\n") if len(p.split()) >= 12]
        for doc, text in doc_texts.items()
    }
    out: list[tuple[float, str, dict]] = []
    t = 0.0
    while len(out) < n_answers:
        doc = rng.choice(list(doc_texts))
        for _ in range(min(rng.choice((1, 1, 2, 3)), n_answers - len(out))):
            question, extra = rng.choice(KINDS)
            body = {
                "question": question.format(opening=rng.choice(openings[doc])),
                "max_tokens": rng.choice((16, 32, 48, 64)),
            }
            out.append((t, doc, {**body, **extra}))
        t += rng.expovariate(1 / 6.0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--answers", type=int, default=24)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    from runtime.embedded import embedded_model_path

    model = embedded_model_path(args.data_dir)
    server = Live(args.data_dir, model, DOCQA_N_CTX="16384", DOCQA_N_THREADS=str(args.threads)).start()
    try:
        texts = {}
        for name, chars in DOCS:
            text = (CASES / name).read_text(encoding="utf-8-sig")[:chars]
            texts[server.ingest(name, text.encode())] = text
        stats = record(server, mixed(texts, args.answers, args.seed))
    finally:
        server.stop()
    tokens = sum(s["completion_tokens"] for s in stats)
    print(f"{len(stats)} answers, {tokens} tokens, logged in {args.data_dir / 'traffic.jsonl'}")
    print(f"now: .venv/bin/docqa tune --data-dir {args.data_dir}")


if __name__ == "__main__":
    main()
