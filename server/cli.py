"""The ``docqa`` command line (click, with its progress bar, and httpx): serve, ingest with a progress bar, ask with a
streamed answer, list documents, run the benchmark, plan memory.

Every command except ``serve``, ``bench`` and ``plan`` talks to a running server (``--url``, env ``DOCQA_URL``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import click
import httpx

from runtime.kvtypes import KV_TYPES

DEFAULT_URL = "http://127.0.0.1:8000"


def _client(ctx: click.Context) -> httpx.Client:
    headers = {"Authorization": f"Bearer {ctx.obj['api_key']}"} if ctx.obj["api_key"] else {}
    return httpx.Client(base_url=ctx.obj["url"], headers=headers, timeout=httpx.Timeout(30.0, read=None))


def _fail(response: httpx.Response) -> None:
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = response.text
    raise click.ClickException(f"{response.status_code}: {message}")


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """docqa's version and what its llama.cpp build can do here (for bug reports)."""
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import version

    from runtime.system import build_id

    click.echo(f"docqa {version('docqa')}\n{build_id()}")
    ctx.exit()


@click.group()
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and llama.cpp's system info, then exit.",
)
@click.option("--url", envvar="DOCQA_URL", default=DEFAULT_URL, show_default=True, help="docqa server")
@click.option("--api-key", envvar="DOCQA_API_KEY", default=None, help="bearer token, if the server needs one")
@click.pass_context
def main(ctx: click.Context, url: str, api_key: str | None) -> None:
    """Ask questions about long documents, answered from a prefilled model state."""
    ctx.obj = {"url": url.rstrip("/"), "api_key": api_key}


@main.command()
def serve() -> None:
    """Run the server (settings from DOCQA_* environment variables)."""
    from server.__main__ import main as serve_main

    serve_main()


@main.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--password", default=None, help="password of an encrypted PDF")
@click.pass_context
def ingest(ctx: click.Context, file: Path, password: str | None) -> None:
    """Upload FILE and wait until it is prefilled, with a progress bar. Prints the document id."""
    with _client(ctx) as http:
        data = {"password": password} if password else {}
        r = http.post("/v1/documents", files={"file": (file.name, file.read_bytes())}, data=data)
        if r.status_code >= 400:
            _fail(r)
        doc = r.json()
        with click.progressbar(length=1000, label=f"prefill {file.name}", file=sys.stderr) as bar:
            shown = 0
            while True:
                info = http.get(f"/v1/documents/{doc['id']}").json()
                done = int(info["progress"] * 1000) if info["status"] != "ready" else 1000
                bar.update(done - shown)
                shown = done
                if info["status"] != "ingesting":
                    break
                time.sleep(0.2)
        if info["status"] == "failed":
            raise click.ClickException(f"ingestion failed: {info['error']}")
        click.echo(f"{doc['id']}\t{info['pages']} pages\t{info['tokens']} tokens", err=True)
        click.echo(doc["id"])


@main.command()
@click.argument("doc")
@click.argument("question")
@click.option("--max-tokens", type=int, default=None)
@click.option("--temperature", type=float, default=0.0, show_default=True)
@click.option("--verify16", is_flag=True, help="16-token verification mode")
@click.option("--draft-tokens", type=int, default=None, help="fixed draft window (0 = no speculation)")
@click.pass_context
def ask(ctx, doc: str, question: str, max_tokens, temperature, verify16, draft_tokens) -> None:
    """Ask QUESTION about document DOC; the answer streams to stdout, stats go to stderr."""
    body = {"question": question, "temperature": temperature, "verify16": verify16, "stream": True}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if draft_tokens is not None:
        body["draft_tokens"] = draft_tokens
    with _client(ctx) as http, http.stream("POST", f"/v1/documents/{doc}/answers", json=body) as r:
        if r.status_code >= 400:
            r.read()
            _fail(r)
        event = None
        for line in r.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                if event == "token":
                    click.echo(data["text"], nl=False)
                elif event == "citations":
                    for c in data["citations"]:
                        pages = f"p. {c['page']}" if c["page"] == c["page_end"] else f"pp. {c['page']}-{c['page_end']}"
                        quote = c["text"] if len(c["text"]) <= 100 else c["text"][:97] + "..."
                        click.echo(f"\n[{pages}, chars {c['start']}-{c['end']}] {quote!r}", nl=False, err=True)
                elif event == "stats":
                    click.echo("")
                    click.echo(
                        f"[{data['completion_tokens']} tokens, TTFT {data['ttft_ms']:.0f} ms, "
                        f"{data['decode_tokens_per_s']:.1f} tok/s, accepted {data['accepted_tokens']}"
                        f"/{data['drafted_tokens']} drafts]",
                        err=True,
                    )
                elif event == "error":
                    raise click.ClickException(data["error"]["message"])


@main.command(name="list")
@click.pass_context
def list_documents(ctx: click.Context) -> None:
    """List documents: id, status, pages, tokens, name."""
    with _client(ctx) as http:
        r = http.get("/v1/documents")
        if r.status_code >= 400:
            _fail(r)
        for d in r.json()["documents"]:
            click.echo(f"{d['id']}\t{d['status']}\t{d['pages']}\t{d['tokens']}\t{d['name']}")


@main.command()
@click.option("--quick", is_flag=True, help="one document, one run")
def bench(quick: bool) -> None:
    """Run the benchmark against llama-server and llama-cpp-python (needs `bash bench/setup.sh`)."""
    root = Path(__file__).resolve().parent.parent
    cmd = [sys.executable, "-m", "bench.run", *(["--quick"] if quick else [])]
    raise SystemExit(subprocess.call(cmd, cwd=root))


@main.command()
@click.argument("model", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--preset", "preset_name", default=None, help="plan a model we have no file for (qwen3.6-27b-q4_k_m)")
@click.option("--vram", default=None, help="GPU memory budget: 24GiB, 24000MiB, 24GB")
@click.option(
    "--n-ctx", type=int, default=None, help="context tokens [default: the largest that fits --vram, or 32768]"
)
@click.option(
    "--n-seq-max", type=int, default=1, show_default=True, help="llama.cpp sequences (server: DOCQA_N_SEQ_MAX + 1)"
)
@click.option("--n-rs-seq", type=int, default=None, help="recurrent snapshots [default: 16 on hybrid models]")
@click.option("--type-k", type=click.Choice(KV_TYPES), default="f16", show_default=True)
@click.option("--type-v", type=click.Choice(KV_TYPES), default="f16", show_default=True)
@click.option("--mtp/--no-mtp", default=None, help="add the MTP draft context [default: when the model has MTP layers]")
@click.option("--flash-attn/--no-flash-attn", default=True, show_default=True)
@click.option("--n-batch", type=int, default=512, show_default=True)
@click.option("--n-ubatch", type=int, default=512, show_default=True)
@click.option("--n-gpu-layers", type=int, default=-1, show_default=True)
@click.option("--kv-unified", is_flag=True, help="one KV stream shared by all sequences")
@click.option("--swa-full", is_flag=True, help="full-size sliding-window caches")
@click.option("--reserve", default="512MiB", show_default=True, help="GPU memory kept for the CUDA context and pool")
def plan(
    model: Path | None, preset_name: str | None, vram: str | None, n_ctx: int | None, n_seq_max: int, **opts
) -> None:
    """Print the memory breakdown of MODEL.gguf (or --preset) and the largest n_ctx / n_seq_max that fit --vram."""
    from dataclasses import replace

    from runtime.plan import plan as make_plan
    from runtime.plan_compute import CTX_PAD
    from runtime.plan_config import PlanConfig
    from runtime.plan_fit import fit, largest_n_ctx, parse_size, render
    from runtime.presets import preset
    from runtime.shape import ModelShape
    from spec.limits import MAX_WINDOW

    if (model is None) == (preset_name is None):
        raise click.UsageError("give either MODEL.gguf or --preset NAME")
    try:
        shape = preset(preset_name) if preset_name else ModelShape.from_gguf(model)
        budget = parse_size(vram) if vram else None
        n_rs_seq = opts.pop("n_rs_seq")
        mtp = opts.pop("mtp")
        cfg = PlanConfig(
            n_ctx=n_ctx or 32768,
            n_seq_max=n_seq_max,
            n_rs_seq=(MAX_WINDOW if n_rs_seq is None else n_rs_seq) if shape.is_recurrent else 0,
            mtp=shape.n_layer_nextn > 0 if mtp is None else mtp,
            reserve=parse_size(opts.pop("reserve")),
            **opts,
        )
        if n_ctx is None and budget is not None:
            cfg = replace(cfg, n_ctx=largest_n_ctx(shape, cfg, budget) or CTX_PAD)
        click.echo(render(make_plan(shape, cfg), fit(shape, cfg, budget) if budget is not None else None))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc


if __name__ == "__main__":
    main()
