"""How many of our modules one question crosses from the route to its first token, counted from the
code as it runs (ARCHITECTURE.md "A question, hop by hop"; issue 25).

A real app (TestClient, the embedded model) ingests crazyones.pdf and answers one question to warm
up; then a profiler on every thread (``sys.setprofile`` / ``threading.setprofile``, installed before
any thread starts, recording only once the streamed question is sent) records each call whose callee
is in one of our packages, until the engine emits the question's first token. A *hop* is a distinct
(caller module, callee module) pair with different modules, both ours; a *module* is any of ours that
was called. Run it on two checkouts to compare: `.venv/bin/python -m bench.hops --root . --root OTHER`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, tempfile, threading
from pathlib import Path
sys.path.insert(0, ".")
OURS = ("server", "ingest", "spec", "runtime")

def main():
    from fastapi.testclient import TestClient
    from runtime.embedded import embedded_model_path
    try:
        from server.api.app import create_app
        from server.config.settings import Settings
    except ImportError:  # before the split into rooms
        from server.app import create_app
        from server.settings import Settings
    root = Path.cwd().resolve()
    data = Path(tempfile.mkdtemp()) / "data"
    model = embedded_model_path(Path(tempfile.gettempdir()) / "docqa-bench")
    settings = Settings(data_dir=data, model_path=model, n_ctx=4096, n_threads=2, selftest=False)
    pdf = Path(sys.argv[1]).read_bytes()
    calls, state = [], {"on": False, "done": False}

    def module(frame):
        try:
            path = Path(frame.f_code.co_filename).resolve().relative_to(root)
        except ValueError:
            return None
        if path.parts[0] not in OURS:
            return None
        return ".".join(path.with_suffix("").parts)

    def profile(frame, event, arg):
        if event != "call" or not state["on"] or state["done"]:
            return
        callee = module(frame)
        if callee is None:
            return
        caller = module(frame.f_back) if frame.f_back is not None else None
        calls.append((caller, callee))
        if frame.f_code.co_name == "emit" and callee.endswith("jobs"):
            kind = frame.f_locals.get("kind")
            if str(getattr(kind, "value", kind)) == "token":
                state["done"] = True

    threading.setprofile(profile)  # before any thread starts (3.11 cannot reach running threads)
    sys.setprofile(profile)
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        doc = client.post("/v1/documents", files={"file": ("c.pdf", pdf)}).json()["id"]
        while client.get(f"/v1/documents/{doc}").json()["status"] == "ingesting":
            pass
        body = {"question": "Who are the crazy ones?", "max_tokens": 8}
        client.post(f"/v1/documents/{doc}/answers", json=body)  # warm: the citation index, the RAM state
        state["on"] = True
        with client.stream("POST", f"/v1/documents/{doc}/answers", json={**body, "stream": True}) as r:
            for line in r.iter_lines():
                if line.startswith("event: token"):
                    break
        sys.setprofile(None)
        threading.setprofile(None)
    hops = sorted({(a, b) for a, b in calls if a is not None and a != b})
    modules = sorted({b for _, b in calls})
    print(json.dumps({"hops": hops, "modules": modules}))

if __name__ == "__main__":
    main()
"""


def count(root: Path) -> dict:
    pdf = ROOT.parent / "shared/cases/pdf/pypdf-resources/crazyones.pdf"
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(pdf)], cwd=root, capture_output=True, text=True, timeout=900,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, action="append", help="checkouts to count (default: this one)")
    args = parser.parse_args()
    for root in args.root or [ROOT]:
        result = count(root.resolve())
        print(f"{root}: {len(result['hops'])} hops through {len(result['modules'])} modules")
        for a, b in result["hops"]:
            print(f"  {a} -> {b}")


if __name__ == "__main__":
    main()
