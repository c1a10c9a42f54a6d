"""The default (adaptive) draft window against every fixed window, side by side in one run (issue 17).

The workloads of bench/policy_sim.py, asked through the real server (in-process, embedded model,
DOCQA_BATCH_INVARIANT: q8_0 KV cache, flash attention, no repack, per-row matmul kernels at every row
count, runtime/numerics.py; so every mode writes the same answer and speeds are like for like),
128 tokens each, with the modes
default, ``draft_tokens`` 0, 1, 2, 4, 8 and 16 alternated within each repeat. Reported: median decode
tok/s per workload and mode, and the default's ratio to the best fixed window.

Usage: .venv/bin/python -m bench.windows [--repeats 3] [--threads 2]. Writes bench/results/windows.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient

from bench.policy_sim import QUOTED
from bench.run import RESULTS
from runtime.embedded import embedded_model_path
from runtime.numerics import TILED_ENV
from runtime.system import system_info
from server.api.app import create_app
from server.config.settings import Settings
from testkit.live import LOCAL

CASES = Path(__file__).resolve().parent.parent.parent / "shared/cases"
MODES = {"default": {}, **{str(k): {"draft_tokens": k} for k in (0, 1, 2, 4, 8, 16)}}


def _workloads() -> dict[str, tuple[str, bytes, str, dict]]:
    alice = (CASES / "text/gutenberg/alice-in-wonderland-pg11.txt").read_bytes().decode("utf-8-sig")[:24_000]
    crazy = (CASES / "pdf/pypdf-resources/crazyones.pdf").read_bytes()
    spec03 = (CASES / "synthetic/agreement-880-tokens.txt").read_bytes()
    a = ("alice.txt", alice.encode())
    return {
        "re-read (Alice, 6k tokens)": (*a, "Repeat the document from the beginning, word for word.", {}),
        "quote (Alice)": (*a, f"Copy, word for word, the paragraph that begins with '{QUOTED}'.", {}),
        "extractive (Alice)": (*a, "What did Alice see when she looked down the well?", {}),
        "open, sampled (Alice)": (*a, "Write a short poem about the sea.", {"temperature": 0.8, "seed": 3}),
        "exact quote (crazyones, 259 tokens)": (
            "crazy.pdf",
            crazy,
            "Quote the whole text of the document verbatim.",
            {},
        ),
        "repeated structure (SPEC-03, 894 tokens)": ("spec03.txt", spec03, "List every clause, word for word.", {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp(prefix="docqa-windows-"))
    settings = Settings(
        data_dir=data, model_path=embedded_model_path(data), n_threads=args.threads, n_ctx=16384,
        batch_invariant=True, selftest=False,
    )  # fmt: skip
    rates: dict[str, dict[str, list[float]]] = {}
    answers: dict[str, dict[str, set[str]]] = {}
    with TestClient(create_app(settings), base_url=LOCAL) as client:
        docs: dict[str, str] = {}
        for name, (filename, data_bytes, _, _) in _workloads().items():
            if filename not in docs:
                docs[filename] = client.post("/v1/documents", files={"file": (filename, data_bytes)}).json()["id"]
                while client.get(f"/v1/documents/{docs[filename]}").json()["status"] == "ingesting":
                    time.sleep(0.1)
            rates[name], answers[name] = {m: [] for m in MODES}, {m: set() for m in MODES}
        for _ in range(args.repeats):
            for name, (filename, _, question, body) in _workloads().items():
                for mode, window in MODES.items():
                    r = client.post(
                        f"/v1/documents/{docs[filename]}/answers",
                        json={"question": question, "max_tokens": 128, "stop": [], **body, **window},
                    ).json()
                    rates[name][mode].append(r["stats"]["decode_tokens_per_s"])
                    answers[name][mode].add(r["answer"])
    lines = [
        "# The default draft window against every fixed window",
        "",
        f"One run, {args.repeats} alternating repeats (medians), 128-token answers, {args.threads} threads, embedded "
        f"Gemma 3 270M Q4_K_M, DOCQA_BATCH_INVARIANT (q8_0 KV cache, flash attention on, no CPU repack, "
        f"{TILED_ENV}=0); CPU "
        f"{platform.processor() or platform.machine()}; {system_info()}",
        "",
        "| workload | " + " | ".join(MODES) + " | default / best fixed | same text as the default | "
        "default / best of those |",
        "|---|" + "---|" * (len(MODES) + 3),
    ]
    results = {}
    for name, by_mode in rates.items():
        med = {m: statistics.median(v) for m, v in by_mode.items()}
        fixed = [m for m in MODES if m != "default"]
        best = max(fixed, key=med.get)
        # Should the per-row kernels not be in force (runtime/numerics.py), a window could answer in
        # other words; speeds of different texts are not like for like.
        same = [m for m in fixed if answers[name][m] == answers[name]["default"]]
        best_same = max(same, key=med.get) if same else None
        results[name] = {
            "tokens_per_s": med,
            "best_fixed": best,
            "same_text_as_default": same,
            "identical_answers": all(len(a) == 1 for a in answers[name].values()) and len(same) == len(fixed),
        }
        cells = " | ".join(f"**{v:.1f}**" if m == best else f"{v:.1f}" for m, v in med.items())
        like = f"{med['default'] / med[best_same]:.2f} (best: {best_same})" if best_same else "-"
        ratio = f"{med['default'] / med[best]:.2f} (best: {best})"
        lines.append(f"| {name} | {cells} | {ratio} | {', '.join(same) or 'none'} | {like} |")
    lines.append("")
    lines.append(f"Same answer in every mode and repeat: {all(r['identical_answers'] for r in results.values())}.")
    (RESULTS / "windows.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / "windows.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
