"""The draft sources side by side in one run (issue 28): drafts from earlier answers, and a separate
draft model. Results in bench/results/drafters.{json,md}.

Part 1, earlier answers (the embedded Gemma, in-process, DOCQA_BATCH_INVARIANT so that every mode
writes the same text and speeds compare like for like): a 6k-token Alice document; for each of
several questions, greedy, 96 tokens, the default adaptive window:

* the first asking, then the same question asked again: decode tok/s against the first asking
  (goal: 2.5x), and against the same second asking with earlier answers left out
  (``draft_source: lookup``);
* a paraphrase of it, and a conversation's follow-up that restates the last answer, each with and
  without earlier answers;
* a fresh question with and without earlier answers (must not get slower: 0.97x).

Part 2, a draft model (``--target`` and ``--draft`` GGUFs, e.g. Qwen2.5-Coder-1.5B-Instruct with its
0.5B, runtime/models.py): one server without the draft model, one with it, alternated, the default
adaptive window on a chat-like question and on re-reading the document; then the draft model forced
(``draft_source: draft``, 4 tokens) for its acceptance per step and its cost.

Usage: .venv/bin/python -m bench.drafters [--part history|draft|both] [--target X.gguf --draft Y.gguf]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient

from bench.run import RESULTS
from runtime.embedded import embedded_model_path
from runtime.system import system_info
from server.api.app import create_app
from server.api.deps import services_of
from server.config.settings import Settings
from testkit.live import LOCAL

CASES = Path(__file__).resolve().parent.parent.parent / "shared/cases"
QUESTIONS = [  # (question, a paraphrase of it)
    ("What did Alice see when she looked down the well?", "When Alice peered down the well, what did she notice?"),
    ("Why did Alice follow the White Rabbit?", "What made Alice run after the White Rabbit?"),
    ("What was written on the little bottle?", "Which words were on the label of the bottle Alice found?"),
    ("Describe the hall Alice fell into.", "What was the hall that Alice landed in like?"),
]
FRESH = [
    "What did Alice think about the cat Dinah?",
    "How did Alice get through the little door in the end?",
    "What did the White Rabbit drop when he was startled?",
    "How did Alice feel about growing so large?",
]
RESTATE = "Say that again, in the same words."
BODY = {"max_tokens": 96, "stop": []}


def _ready(client: TestClient, doc_id: str) -> None:
    while client.get(f"/v1/documents/{doc_id}").json()["status"] == "ingesting":
        time.sleep(0.2)


def _ask(client: TestClient, doc: str, question: str, **extra) -> dict:
    r = client.post(f"/v1/documents/{doc}/answers", json={"question": question, **BODY, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def _chat(client: TestClient, doc: str, turns: list[tuple[str, str]], question: str, **extra) -> dict:
    messages = [m for q, a in turns for m in ({"role": "user", "content": q}, {"role": "assistant", "content": a})]
    body = {"model": f"doc:{doc}", "messages": [*messages, {"role": "user", "content": question}], **BODY, **extra}
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    return {"answer": out["choices"][0]["message"]["content"], "stats": out["docqa"]}


def history_part(threads: int) -> dict:
    data = Path(tempfile.mkdtemp(prefix="docqa-drafters-"))
    settings = Settings(
        data_dir=data, model_path=embedded_model_path(data), n_threads=threads, n_ctx=16384,
        batch_invariant=True, selftest=False,
    )  # fmt: skip
    alice = (CASES / "text/gutenberg/alice-in-wonderland-pg11.txt").read_bytes().decode("utf-8-sig")[:24_000]
    rows: list[dict] = []
    with TestClient(create_app(settings), base_url=LOCAL) as client:
        doc = client.post("/v1/documents", files={"file": ("alice.txt", alice.encode())}).json()["id"]
        _ready(client, doc)
        _ask(client, doc, "Who is the author?", max_tokens=4)  # warm: the cost model's first one-row calls
        for (question, paraphrase), fresh in zip(QUESTIONS, FRESH, strict=True):
            first = _ask(client, doc, question)
            services_of(client.app).engine.histories.flush()
            without = _ask(client, doc, question, draft_source="lookup")
            again = _ask(client, doc, question)
            para_without = _ask(client, doc, paraphrase, draft_source="lookup")
            para = _ask(client, doc, paraphrase)
            turns = [(question, first["answer"])]
            follow_without = _chat(client, doc, turns, RESTATE, draft_source="lookup")
            follow = _chat(client, doc, turns, RESTATE)
            fresh_without = _ask(client, doc, fresh, draft_source="lookup")
            fresh_with = _ask(client, doc, fresh)
            rows.append({
                "question": question,
                "same_text": again["answer"] == first["answer"] == without["answer"],
                "tok_s": {
                    "first": first["stats"]["decode_tokens_per_s"],
                    "again": again["stats"]["decode_tokens_per_s"],
                    "again_without": without["stats"]["decode_tokens_per_s"],
                    "paraphrase": para["stats"]["decode_tokens_per_s"],
                    "paraphrase_without": para_without["stats"]["decode_tokens_per_s"],
                    "follow_up": follow["stats"]["decode_tokens_per_s"],
                    "follow_up_without": follow_without["stats"]["decode_tokens_per_s"],
                    "fresh": fresh_with["stats"]["decode_tokens_per_s"],
                    "fresh_without": fresh_without["stats"]["decode_tokens_per_s"],
                },
                "history_accepted": {
                    "again": again["stats"]["accepted_by_source"]["history"],
                    "paraphrase": para["stats"]["accepted_by_source"]["history"],
                    "follow_up": follow["stats"]["accepted_by_source"]["history"],
                    "fresh": fresh_with["stats"]["accepted_by_source"]["history"],
                },
                "tokens": again["stats"]["completion_tokens"],
            })  # fmt: skip
    return {"rows": rows}


def _median_ratio(rows: list[dict], a: str, b: str) -> float:
    return statistics.median(r["tok_s"][a] / r["tok_s"][b] for r in rows)


def draft_part(target: Path, draft: Path, threads: int, repeats: int) -> dict:
    text = (CASES / "text/gutenberg/alice-in-wonderland-pg11.txt").read_bytes().decode("utf-8-sig")[:6_000]
    workloads = {
        "chat-like": ("What happens to Alice in this passage? Answer in a few sentences.", {}),
        "re-read": ("Repeat the document from the beginning, word for word.", {}),
    }
    out: dict = {"modes": {}, "forced": {}}
    clients = {}
    docs = {}
    apps = []
    try:
        for mode, extra in (("without", {}), ("with", {"draft_model_path": draft})):
            data = Path(tempfile.mkdtemp(prefix=f"docqa-draft-{mode}-"))
            settings = Settings(
                data_dir=data, model_path=target, n_threads=threads, n_ctx=8192, batch_invariant=True,
                selftest=False, **extra,
            )  # fmt: skip
            client = TestClient(create_app(settings), base_url=LOCAL)
            client.__enter__()
            apps.append(client)
            clients[mode] = client
            docs[mode] = client.post("/v1/documents", files={"file": ("alice.txt", text.encode())}).json()["id"]
            _ready(client, docs[mode])
        for name in workloads:
            out["modes"][name] = {m: [] for m in clients}
        for _ in range(repeats):
            for name, (question, body) in workloads.items():
                for mode, client in clients.items():
                    r = _ask(client, docs[mode], question, max_tokens=64, **body)
                    out["modes"][name][mode].append(
                        {"tok_s": r["stats"]["decode_tokens_per_s"], "answer": r["answer"], "stats": r["stats"]}
                    )
        for name, (question, _) in workloads.items():
            r = _ask(clients["with"], docs["with"], question, max_tokens=64, draft_source="draft", draft_tokens=4)
            s = r["stats"]
            out["forced"][name] = {
                "tok_s": s["decode_tokens_per_s"],
                "drafted": s["drafted_by_source"]["draft"],
                "accepted": s["accepted_by_source"]["draft"],
                "steps": s["verify_steps"],
            }
        out["costs"] = {}
        for m, c in clients.items():
            costs = services_of(c.app).engine.loaded.costs
            out["costs"][m] = {"rows_s": [costs.rows(n) for n in range(1, 18)], "draft_s": costs.draft_step("draft")}
    finally:
        for client in apps:
            client.__exit__(None, None, None)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("history", "draft", "both"), default="both")
    parser.add_argument("--target", type=Path)
    parser.add_argument("--draft", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    path = RESULTS / "drafters.json"
    results = json.loads(path.read_text()) if path.is_file() else {}
    results["machine"] = {
        "cpu": platform.processor() or platform.machine(), "load": os.getloadavg(), "system_info": system_info()
    }  # fmt: skip
    if args.part in ("history", "both"):
        results["history"] = history_part(args.threads)
    if args.part in ("draft", "both"):
        if not (args.target and args.draft):
            parser.error("--part draft needs --target and --draft")
        results["draft_model"] = draft_part(args.target, args.draft, args.threads, args.repeats)
    path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    (RESULTS / "drafters.md").write_text(render(results))
    print(render(results))


def render(results: dict) -> str:
    m = results.get("machine", {})
    machine = f"One run; CPU {m.get('cpu')}, load average at the start {m.get('load')}; {m.get('system_info')}"
    lines = ["# Draft sources: earlier answers and a separate draft model", "", machine, ""]
    if "history" in results:
        rows = results["history"]["rows"]
        lines += [
            "## Earlier answers (embedded Gemma 3 270M Q4_K_M, 6k-token Alice, 96-token greedy answers, "
            "DOCQA_BATCH_INVARIANT)",
            "",
            f"{len(rows)} questions; medians of the per-question ratios of decode tok/s.",
            "",
            "| workload | with earlier answers / baseline | history tokens accepted (median) |",
            "|---|---|---|",
            f"| the same question asked again / its first asking | {_median_ratio(rows, 'again', 'first'):.2f} | "
            f"{statistics.median(r['history_accepted']['again'] for r in rows)} of "
            f"{statistics.median(r['tokens'] for r in rows)} |",
            f"| asked again / asked again without earlier answers | "
            f"{_median_ratio(rows, 'again', 'again_without'):.2f} | |",
            f"| a paraphrase / without earlier answers | "
            f"{_median_ratio(rows, 'paraphrase', 'paraphrase_without'):.2f} | "
            f"{statistics.median(r['history_accepted']['paraphrase'] for r in rows)} |",
            f"| a follow-up restating the last answer / without | "
            f"{_median_ratio(rows, 'follow_up', 'follow_up_without'):.2f} | "
            f"{statistics.median(r['history_accepted']['follow_up'] for r in rows)} |",
            f"| a fresh question / without earlier answers | {_median_ratio(rows, 'fresh', 'fresh_without'):.2f} | "
            f"{statistics.median(r['history_accepted']['fresh'] for r in rows)} |",
            "",
            f"Same answer text with and without earlier answers, first and second asking: "
            f"{all(r['same_text'] for r in rows)}.",
            "",
            "| question | first tok/s | again | again w/o | paraphrase | w/o | follow-up | w/o | fresh | w/o |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            t = r["tok_s"]
            lines.append(
                f"| {r['question']} | {t['first']:.1f} | {t['again']:.1f} | {t['again_without']:.1f} | "
                f"{t['paraphrase']:.1f} | {t['paraphrase_without']:.1f} | {t['follow_up']:.1f} | "
                f"{t['follow_up_without']:.1f} | {t['fresh']:.1f} | {t['fresh_without']:.1f} |"
            )
        lines.append("")
    if "draft_model" in results:
        d = results["draft_model"]
        lines += ["## A separate draft model", "", "| workload | without, tok/s | with, tok/s | ratio | same text |",
                  "|---|---|---|---|---|"]  # fmt: skip
        for name, modes in d["modes"].items():
            a = statistics.median(x["tok_s"] for x in modes["without"])
            b = statistics.median(x["tok_s"] for x in modes["with"])
            same = {x["answer"] for x in modes["without"]} == {x["answer"] for x in modes["with"]}
            lines.append(f"| {name} | {a:.1f} | {b:.1f} | {b / a:.2f} | {same} |")
        lines += ["", "Forced (draft_source draft, 4 tokens per step):", "",
                  "| workload | tok/s | drafted | accepted | per step |", "|---|---|---|---|---|"]  # fmt: skip
        for name, f in d["forced"].items():
            per = f["accepted"] / max(1, f["steps"])
            lines.append(f"| {name} | {f['tok_s']:.1f} | {f['drafted']} | {f['accepted']} | {per:.2f} |")
        lines.append("")
        lines.append(f"Costs the server learnt: {json.dumps(d.get('costs'))}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
