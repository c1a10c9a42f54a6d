"""The ``docqa`` command line (click, with its progress bar, and httpx): serve, ingest with a progress bar, ask with a
streamed answer, list documents, run the benchmark, plan memory, tune settings on recorded traffic (server/tune.py).

``ingest``, ``ask`` and ``list`` talk to a running server. Its URL comes from ``--url`` (before or after the
command), else ``DOCQA_URL``, else ``http://DOCQA_HOST:DOCQA_PORT`` (the variables ``docqa serve`` binds with),
else http://127.0.0.1:8000.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click
import httpx

from runtime.kvtypes import KV_TYPES
from server.tune import tune

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000

URL_HELP = "docqa server URL [default: DOCQA_URL, else http://DOCQA_HOST:DOCQA_PORT, else http://127.0.0.1:8000]"
KEY_HELP = "API key, if the server needs one (its DOCQA_API_KEY) [env var: DOCQA_API_KEY]"


def default_url() -> str:
    """The server the environment names: DOCQA_URL, else DOCQA_HOST and DOCQA_PORT, as ``docqa serve`` binds."""
    if url := os.environ.get("DOCQA_URL"):
        return url
    host = os.environ.get("DOCQA_HOST") or DEFAULT_HOST
    port = os.environ.get("DOCQA_PORT") or str(DEFAULT_PORT)
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)  # a bind-everything address: connect locally
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return f"http://{host}:{port}"


def server_options(command: Callable) -> Callable:
    """``--url`` and ``--api-key`` on a subcommand, so they may follow it (``docqa list --url ...``)."""
    command = click.option("--api-key", default=None, help=KEY_HELP)(command)
    return click.option("--url", default=None, metavar="URL", help=URL_HELP)(command)


@contextmanager
def _client(ctx: click.Context, url: str | None, api_key: str | None) -> Iterator[httpx.Client]:
    """An HTTP client for the server; a connection failure becomes one line naming the URL."""
    url = (url or ctx.obj["url"] or default_url()).rstrip("/")
    api_key = api_key or ctx.obj["api_key"]
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=httpx.Timeout(30.0, read=None)) as http:
            yield http
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        raise click.ClickException(
            f"{url!r} is not a server URL ({_reason(exc)}); write it as http://HOST:PORT"
        ) from None
    except httpx.ConnectError as exc:
        raise click.ClickException(
            f"cannot reach a docqa server at {url} ({_reason(exc)}); start one with `docqa serve`, "
            "or give its address with --url or DOCQA_URL"
        ) from None
    except httpx.TransportError as exc:  # a timeout, a dropped connection
        raise click.ClickException(f"lost the connection to the docqa server at {url} ({_reason(exc)})") from None


def _reason(exc: Exception) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _fail(response: httpx.Response) -> None:
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = response.text
    raise click.ClickException(f"{response.status_code}: {message}")


def _check(response: httpx.Response) -> httpx.Response:
    if response.status_code >= 400:
        _fail(response)
    return response


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """docqa's version and what its llama.cpp build can do here (for bug reports)."""
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import version

    from runtime.system import build_id

    click.echo(f"docqa {version('docqa')}\n{build_id()}")
    ctx.exit()


@click.group(
    epilog="ingest, ask and list talk to a running server: --url (before or after the command), else DOCQA_URL, "
    "else http://DOCQA_HOST:DOCQA_PORT, else http://127.0.0.1:8000. Start one with `docqa serve`."
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and llama.cpp's system info, then exit.",
)
@click.option("--url", default=None, metavar="URL", help=URL_HELP)
@click.option("--api-key", envvar="DOCQA_API_KEY", default=None, help=KEY_HELP)
@click.pass_context
def main(ctx: click.Context, url: str | None, api_key: str | None) -> None:
    """Ask questions about long documents, answered from a prefilled model state."""
    ctx.obj = {"url": url, "api_key": api_key}


@main.command()
@click.option("--host", default=None, help="bind address [default: DOCQA_HOST, else 127.0.0.1]")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="bind port [default: DOCQA_PORT, else 8000]")
@click.option("--cluster", "readers", type=click.IntRange(1, 64), default=None, metavar="N",
              help="serve with N reader replicas on a local Ray (Ray Serve; the `cluster` extra)")  # fmt: skip
def serve(host: str | None, port: int | None, readers: int | None) -> None:
    """Run the server: the web page and the API. Other settings come from DOCQA_* environment variables."""
    from server.__main__ import main as serve_main

    # The server reads its settings from the environment; the options win over DOCQA_HOST / DOCQA_PORT.
    if host is not None:
        os.environ["DOCQA_HOST"] = host
    if port is not None:
        os.environ["DOCQA_PORT"] = str(port)
    if readers is not None:  # the cluster package sits above server/: run it, do not import it
        os.execv(sys.executable, [sys.executable, "-m", "cluster", "--readers", str(readers)])
    serve_main()


@main.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--password", default=None, help="password of an encrypted PDF")
@server_options
@click.pass_context
def ingest(ctx: click.Context, file: Path, password: str | None, url: str | None, api_key: str | None) -> None:
    """Upload FILE and wait until it is prefilled, with a progress bar. Prints the document id."""
    with _client(ctx, url, api_key) as http:
        data = {"password": password} if password else {}
        doc = _check(http.post("/v1/documents", files={"file": (file.name, file.read_bytes())}, data=data)).json()
        with click.progressbar(length=1000, label=f"prefill {file.name}", file=sys.stderr) as bar:
            shown = 0
            while True:
                info = _check(http.get(f"/v1/documents/{doc['id']}")).json()
                done = int(info["progress"] * 1000) if info["status"] != "ready" else 1000
                bar.update(done - shown)
                shown = done
                if info["status"] != "ingesting":
                    break
                time.sleep(0.2)
        if info["status"] == "failed":
            raise click.ClickException(f"ingestion failed: {info['error']}")
        click.echo(f"{doc['id']}\t{info['pages']} pages\t{info['tokens']} tokens", err=True)
        for warning in info.get("warnings", []):
            click.echo(f"warning: {warning['message']}", err=True)
        click.echo(doc["id"])


@main.command()
@click.argument("doc")
@click.argument("question")
@click.option("--max-tokens", type=int, default=None)
@click.option("--temperature", type=float, default=0.0, show_default=True)
@click.option("--verify16", is_flag=True, help="16-token verification mode")
@click.option("--draft-tokens", type=int, default=None, help="fixed draft window (0 = no speculation)")
@server_options
@click.pass_context
def ask(ctx, doc: str, question: str, max_tokens, temperature, verify16, draft_tokens, url, api_key) -> None:
    """Ask QUESTION about document DOC; the answer streams to stdout, stats go to stderr."""
    body = {"question": question, "temperature": temperature, "verify16": verify16, "stream": True}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if draft_tokens is not None:
        body["draft_tokens"] = draft_tokens
    with _client(ctx, url, api_key) as http, http.stream("POST", f"/v1/documents/{doc}/answers", json=body) as r:
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
                        f"{data['decode_tokens_per_s']:.1f} tok/s, drafted/accepted "
                        f"{data['drafted_tokens']}/{data['accepted_tokens']}]",
                        err=True,
                    )
                    if data.get("finish_reason") == "repetition":  # spec/repetition.py
                        click.echo("[stopped: the answer began to repeat itself]", err=True)
                    if data.get("segments") is not None:  # a long document: where the answer came from
                        spans = [f"pages {s['pages'][0]}-{s['pages'][1]}" for s in data["segments"]]
                        click.echo(f"[answered from {' and '.join(spans) or 'no part of the document'}]", err=True)
                elif event == "error":
                    raise click.ClickException(data["error"]["message"])


@main.command(name="list")
@server_options
@click.pass_context
def list_documents(ctx: click.Context, url: str | None, api_key: str | None) -> None:
    """List documents: id, status, pages, tokens, name."""
    with _client(ctx, url, api_key) as http:
        for d in _check(http.get("/v1/documents")).json()["documents"]:
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


main.add_command(tune)

if __name__ == "__main__":
    main()
