"""Routing by document on Ray Serve against one replica and against a plain load balancer.

``python -m bench.cluster`` (needs the `cluster` extra) starts a local Ray cluster per configuration
(cluster/local.py: the embedded model, 1 CPU thread per reader, SQLite in a fresh data directory),
uploads the documents, then asks questions drawn uniformly at random over them (seeded) from
``--clients`` closed-loop clients, and writes bench/results/cluster.md:

* answers per minute over the whole run (first question sent to last answer received);
* TTFT p50 / p95, as the server measures it (queueing, the document's restore and the question's
  prefill included);
* hot-hit rate: answers whose document was already in the replica's RAM or sequence (stats
  ``document_state`` hot or prefilled), not read back from its snapshot on disk.

Each replica's RAM budget (``DOCQA_SNAPSHOT_RAM_BYTES``) holds ``--hot`` document states: the state
of one document is measured first, in this process, on the same model and context size.
"""

from __future__ import annotations

import argparse
import random
import socket
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx

RESULTS = Path(__file__).resolve().parent / "results" / "cluster.md"
QUESTIONS = ("How many crates are in section 2?", "Which item is stored?", "Quote section 1.", "What day?")
N_CTX = 8192


def document(n: int, paragraphs: int = 40) -> str:
    lines = [f"# Inventory report {n}"]
    for p in range(paragraphs):
        lines.append(
            f"Section {p + 1} of report {n}. The warehouse in district {n * 7 + p} stores {n * 100 + p} crates of "
            f"item {chr(65 + (n + p) % 26)}, counted on day {p * 3 + n} by team {(n * 13 + p) % 17}."
        )
    return "\n\n".join(lines)


def state_bytes(model_path: Path, text: str) -> int:
    """Bytes of one document's prefilled state (what a replica keeps hot in RAM)."""
    from ingest.prompt import layout_for
    from runtime.llama import Context, ContextConfig, Model

    model = Model(model_path)
    try:
        prefix = layout_for(model).document_prefix(model, text)
        ctx = Context(model, ContextConfig(n_ctx=N_CTX, n_batch=512, n_ubatch=512, n_threads=2, n_threads_batch=2))
        try:
            for start in range(0, len(prefix), 512):
                ctx.decode(prefix[start : start + 512], start, seq_id=0, outputs="none")
            return ctx.state_size(0)
        finally:
            ctx.close()
    finally:
        model.close()


@dataclass
class Run:
    name: str
    readers: int
    routing: str
    answers: int
    seconds: float
    ttft_ms: list[float]
    states: list[str]
    replicas: int

    @property
    def per_minute(self) -> float:
        return 60 * self.answers / self.seconds

    @property
    def hot_hit(self) -> float:
        return sum(s in ("hot", "prefilled") for s in self.states) / len(self.states)

    def p(self, q: float) -> float:
        return statistics.quantiles(self.ttft_ms, n=100, method="inclusive")[int(q) - 1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(name: str, readers: int, routing: str, args, model_path: Path, ram_bytes: int) -> Run:
    from cluster import local

    data_dir = Path(tempfile.mkdtemp(prefix="docqa-bench-cluster-"))
    env = {
        "DOCQA_DATA_DIR": str(data_dir),
        "DOCQA_MODEL_PATH": str(model_path),
        "DOCQA_N_THREADS": "1",
        "DOCQA_N_THREADS_BATCH": "1",
        "DOCQA_N_CTX": str(N_CTX),
        "DOCQA_HOT_DOCS": str(args.hot),
        "DOCQA_SNAPSHOT_RAM_BYTES": str(ram_bytes),
        "DOCQA_DEBUG_CLUSTER_ROUTING": routing,
        "DOCQA_EXTRACT_WORKERS": "1",
        "DOCQA_TRAFFIC_LOG": "false",
        "DOCQA_HOST": "127.0.0.1",
    }
    url = local.start(readers, "127.0.0.1", _free_port(), env=env)
    try:
        with httpx.Client(base_url=url, timeout=300) as c:
            ids = []
            for n in range(args.docs):
                r = c.post("/v1/documents", files={"file": (f"report-{n}.txt", document(n).encode(), "text/plain")})
                r.raise_for_status()
                ids.append(r.json()["id"])
            for doc_id in ids:
                while c.get(f"/v1/documents/{doc_id}").json()["status"] == "ingesting":
                    time.sleep(0.5)
            rng = random.Random(args.seed)
            jobs = [(rng.choice(ids), rng.choice(QUESTIONS)) for _ in range(args.questions)]

            def ask(job: tuple[str, str]) -> dict:
                body = {"question": job[1], "max_tokens": args.max_tokens, "temperature": 0}
                for _ in range(10):
                    r = c.post(f"/v1/documents/{job[0]}/answers", json=body)
                    if r.status_code != 409:  # snapshot being rebuilt: ask again
                        break
                    time.sleep(1)
                r.raise_for_status()
                return r.json()["stats"]

            t0 = time.perf_counter()
            with ThreadPoolExecutor(args.clients) as pool:
                stats = list(pool.map(ask, jobs))
            seconds = time.perf_counter() - t0
    finally:
        local.stop()
    return Run(
        name, readers, routing, len(stats), seconds, [s["ttft_ms"] for s in stats],
        [s["document_state"] for s in stats], len({s["replica"] for s in stats}),
    )  # fmt: skip


def table(runs: list[Run]) -> str:
    rows = [
        "| configuration | replicas | routing | answers/min | TTFT p50 ms | TTFT p95 ms | hot-hit |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        rows.append(
            f"| {r.name} | {r.replicas} | {r.routing} | {r.per_minute:.1f} | {r.p(50):.0f} | {r.p(95):.0f} "
            f"| {100 * r.hot_hit:.0f}% |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=8)
    parser.add_argument("--hot", type=int, default=2, help="document states per replica")
    parser.add_argument("--questions", type=int, default=64)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--also-docs", type=int, default=None, help="a second run with this many documents")
    args = parser.parse_args()
    from runtime.embedded import embedded_model_path

    model_path = embedded_model_path(Path(tempfile.gettempdir()) / "docqa-bench-models")
    one = state_bytes(model_path, document(0))
    ram = int(one * (args.hot + 0.5))  # room for --hot states, not one more
    print(f"one document's state: {one} bytes; RAM budget per replica {ram} bytes ({args.hot} states)")
    configs = [
        ("1 replica", 1, "document"),
        ("2 replicas, by document", 2, "document"),
        ("2 replicas, any replica", 2, "any"),
    ]
    sections = []
    for docs in [args.docs] + ([args.also_docs] if args.also_docs else []):
        args.docs = docs
        runs = []
        for name, readers, routing in configs:
            t = time.perf_counter()
            runs.append(measure(name, readers, routing, args, model_path, ram))
            print(f"{docs} documents, {name}: {time.perf_counter() - t:.0f} s", flush=True)
        sections.append(f"### {docs} documents, {args.hot} hot per replica\n\n{table(runs)}")
        print(sections[-1], flush=True)
    RESULTS.write_text(
        "# Cluster routing (bench/cluster.py)\n\n"
        f"One run on this machine: embedded Gemma 3 270M, each reader 1 CPU thread, n_ctx {N_CTX}; "
        f"{args.questions} questions uniformly at random over the documents (seed {args.seed}), "
        f"{args.clients} clients, {args.max_tokens} answer tokens each; one document's state {one:,} bytes, "
        f"RAM budget {ram:,} bytes per replica.\n\n" + "\n\n".join(sections) + "\n"
    )


if __name__ == "__main__":
    main()
