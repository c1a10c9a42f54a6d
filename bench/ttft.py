"""Measure ingest prefill rate, TTFT (cold / document state in RAM / after a restart from disk) and
decode tok/s with and without 16-token verification, on the embedded model and a ~5k-token document
(the first 20,000 characters of the Alice text in ../shared/cases).

The cold baseline is what plain llama-cpp-python needs for the same document and question: the
high-level ``Llama`` prefills the whole prompt and samples one token. All numbers come from one run
on one machine; ratios are what to compare across machines.

Usage: .venv/bin/python -m bench.ttft [--threads N] [--out bench/results/ttft.json]
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

from ingest.prompt import plain_layout
from runtime.embedded import embedded_model_path
from server.api.app import create_app
from server.config.settings import Settings
from testkit.live import LOCAL

ROOT = Path(__file__).resolve().parent.parent
ALICE = ROOT.parent / "shared/cases/text/gutenberg/alice-in-wonderland-pg11.txt"
QUESTION = "What did Alice see when she looked down the well?"
QUOTE = "Repeat the document from the beginning, word for word."
OPEN = "Write a short poem about the sea."
CRAZY = ROOT.parent / "shared/cases/pdf/pypdf-resources/crazyones.pdf"
EXACT = "Quote the whole text of the document verbatim."


def _ask(client, doc_id: str, question: str, **body) -> dict:
    r = client.post(f"/v1/documents/{doc_id}/answers", json={"question": question, **body})
    r.raise_for_status()
    return r.json()["stats"]


def _decode_summary(runs: list[dict]) -> dict:
    return {
        "tokens_per_s": round(statistics.median(s["decode_tokens_per_s"] for s in runs), 1),
        "drafted": runs[0]["drafted_tokens"],
        "accepted": runs[0]["accepted_tokens"],
        "verify_steps": runs[0]["verify_steps"],
        "completion_tokens": runs[0]["completion_tokens"],
    }


def _cold_llama_cpp_python(model_path: Path, text: str, threads: int, n_ctx: int) -> float:
    """TTFT in ms of plain llama-cpp-python: prefill document + question, then one token."""
    from llama_cpp import Llama

    layout = plain_layout(add_bos=False)
    prompt = layout.head + text + layout.between + QUESTION + layout.tail
    llm = Llama(str(model_path), n_ctx=n_ctx, n_threads=threads, n_batch=512, verbose=False)
    t0 = time.perf_counter()
    llm.create_completion(prompt, max_tokens=1, temperature=0.0)
    ms = (time.perf_counter() - t0) * 1000
    llm.close()
    return ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--chars", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/ttft.json")
    args = parser.parse_args()

    text = ALICE.read_bytes()[: args.chars * 2].decode("utf-8-sig", errors="ignore")[: args.chars]
    data_dir = Path(tempfile.mkdtemp(prefix="docqa-bench-"))
    model_path = embedded_model_path(data_dir)
    settings = Settings(data_dir=data_dir, model_path=model_path, n_threads=args.threads, n_ctx=32768)
    results: dict = {
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "threads": args.threads,
            "python": platform.python_version(),
        }
    }

    with TestClient(create_app(settings), base_url=LOCAL) as client:
        t0 = time.perf_counter()
        r = client.post("/v1/documents", files={"file": ("alice.txt", text.encode())})
        doc_id = r.json()["id"]
        while (doc := client.get(f"/v1/documents/{doc_id}").json())["status"] == "ingesting":
            time.sleep(0.05)
        ingest_s = time.perf_counter() - t0
        results["document_tokens"] = doc["tokens"]
        results["ingest_seconds"] = round(ingest_s, 2)
        results["prefill_tokens_per_s"] = round(doc["tokens"] / ingest_s, 1)
        first = _ask(client, doc_id, QUESTION, max_tokens=8)
        ram = [_ask(client, doc_id, QUESTION, max_tokens=8)["ttft_ms"] for _ in range(args.runs)]
        results["ttft_ms_first_question_after_ingest"] = round(first["ttft_ms"], 1)
        results["ttft_ms_state_in_ram"] = round(statistics.median(ram), 1)
        for name, question, body in (
            ("copy_draft_tokens_0", QUOTE, {"draft_tokens": 0}),
            ("copy_verify16", QUOTE, {"verify16": True}),
            ("copy_auto", QUOTE, {}),
            ("open_draft_tokens_0", OPEN, {"draft_tokens": 0, "temperature": 0.8, "seed": 3, "stop": []}),
            ("open_auto", OPEN, {"temperature": 0.8, "seed": 3, "stop": []}),
        ):
            runs = [_ask(client, doc_id, question, max_tokens=128, **body) for _ in range(args.runs)]
            results[f"decode_{name}"] = _decode_summary(runs)
        # An answer that copies the document exactly: the crazyones PDF quoted verbatim.
        r = client.post("/v1/documents", files={"file": ("crazyones.pdf", CRAZY.read_bytes())})
        crazy_id = r.json()["id"]
        while client.get(f"/v1/documents/{crazy_id}").json()["status"] == "ingesting":
            time.sleep(0.05)
        for name, body in (
            ("exact_copy_draft_tokens_0", {"draft_tokens": 0}),
            ("exact_copy_verify16", {"verify16": True}),
            ("exact_copy_auto", {}),
        ):
            runs = [_ask(client, crazy_id, EXACT, max_tokens=128, **body) for _ in range(args.runs)]
            results[f"decode_{name}"] = _decode_summary(runs)

    with TestClient(create_app(settings), base_url=LOCAL) as client:  # restart: the state comes from disk
        results["ttft_ms_after_restart_from_disk"] = round(_ask(client, doc_id, QUESTION, max_tokens=8)["ttft_ms"], 1)

    cold = [_cold_llama_cpp_python(model_path, text, args.threads, 32768) for _ in range(2)]
    results["ttft_ms_cold_llama_cpp_python"] = round(statistics.median(cold), 1)
    results["ratio_cold_over_ram"] = round(
        results["ttft_ms_cold_llama_cpp_python"] / results["ttft_ms_state_in_ram"], 1
    )
    results["ratio_cold_over_disk"] = round(
        results["ttft_ms_cold_llama_cpp_python"] / results["ttft_ms_after_restart_from_disk"], 1
    )
    plain = results["decode_copy_draft_tokens_0"]["tokens_per_s"]
    results["ratio_copy_verify16_over_plain"] = round(results["decode_copy_verify16"]["tokens_per_s"] / plain, 2)
    results["ratio_copy_auto_over_plain"] = round(results["decode_copy_auto"]["tokens_per_s"] / plain, 2)
    exact = results["decode_exact_copy_draft_tokens_0"]["tokens_per_s"]
    results["ratio_exact_copy_verify16_over_plain"] = round(
        results["decode_exact_copy_verify16"]["tokens_per_s"] / exact, 2
    )
    results["ratio_exact_copy_auto_over_plain"] = round(results["decode_exact_copy_auto"]["tokens_per_s"] / exact, 2)
    results["ratio_open_auto_over_plain"] = round(
        results["decode_open_auto"]["tokens_per_s"] / results["decode_open_draft_tokens_0"]["tokens_per_s"], 2
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
