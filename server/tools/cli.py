"""The ``docqa`` command line (click): serve, run the benchmark, plan memory, tune settings on recorded
traffic (server/tools/tune.py), and the commands that talk to a running server (server/tools/remote.py:
ingest with a progress bar, ask with a streamed answer, list, status, delete).

The server commands find it by ``--url`` (before or after the command), else ``DOCQA_URL``, else
``http://DOCQA_HOST:DOCQA_PORT`` (the variables ``docqa serve`` binds with), else http://127.0.0.1:8000
(server/tools/client.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click

from runtime.kvtypes import KV_TYPES
from server.tools import remote
from server.tools.client import KEY_HELP, URL_HELP, default_url, server_options
from server.tools.tune import tune

__all__ = ["default_url", "main"]


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """docqa's version and what its llama.cpp build can do here (for bug reports)."""
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import version

    from runtime.system import build_id

    click.echo(f"docqa {version('docqa')}\n{build_id()}")
    ctx.exit()


@click.group(
    epilog="ingest, ask, list, status and delete talk to a running server: --url (before or after the command), "
    "else DOCQA_URL, else http://DOCQA_HOST:DOCQA_PORT, else http://127.0.0.1:8000. Start one with `docqa serve`."
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
@click.option(
    "--cluster",
    "readers",
    type=click.IntRange(1, 64),
    default=None,
    metavar="N",
    help="serve with N reader replicas on a local Ray (Ray Serve; the `cluster` extra)",
)
def serve(host: str | None, port: int | None, readers: int | None) -> None:
    """Run the server: the web page and the API. Other settings come from DOCQA_* environment variables."""
    from server.api.serve import main as serve_main

    # The server reads its settings from the environment; the options win over DOCQA_HOST / DOCQA_PORT.
    if host is not None:
        os.environ["DOCQA_HOST"] = host
    if port is not None:
        os.environ["DOCQA_PORT"] = str(port)
    if readers is not None:  # the cluster package sits above server/: run it, do not import it
        os.execv(sys.executable, [sys.executable, "-m", "cluster", "--readers", str(readers)])
    serve_main()


@main.command()
@click.argument("folders", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--host", default=None, help="bind address [default: DOCQA_HOST, else 127.0.0.1]")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="bind port [default: DOCQA_PORT, else 8000]")
@click.pass_context
def watch(ctx: click.Context, folders: tuple[Path, ...], host: str | None, port: int | None) -> None:
    """Serve, keeping FOLDERS in sync: their documents are read, re-read when they change, removed when
    they go (DOCQA_WATCH, added to any it names already)."""
    named = [p for p in os.environ.get("DOCQA_WATCH", "").split(os.pathsep) if p]
    os.environ["DOCQA_WATCH"] = os.pathsep.join([*named, *(str(f.resolve()) for f in folders)])
    ctx.invoke(serve, host=host, port=port, readers=None)


@main.command()
@server_options
@click.pass_context
def mcp(ctx: click.Context, url: str | None, api_key: str | None) -> None:
    """MCP server over stdio for desktop assistants and editors: docqa's tools (list, ingest, ask with
    citations, passages) and documents, answered by the docqa server at --url (start it first)."""
    from server.tools.mcp_stdio import run

    run((url or ctx.obj["url"] or default_url()).rstrip("/"), api_key or ctx.obj["api_key"])


@main.command()
@click.option("--quick", is_flag=True, help="one document, one run")
def bench(quick: bool) -> None:
    """Run the benchmark against llama-server and llama-cpp-python (needs `bash bench/setup.sh`)."""
    root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "bench.run", *(["--quick"] if quick else [])]
    raise SystemExit(subprocess.call(cmd, cwd=root))


@main.command()
@click.argument("model", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--preset", "preset_name", default=None, help="plan a model we have no file for (qwen3.6-27b-q4_k_m)")
@click.option("--vram", default=None, help="GPU memory budget: 24GiB, 24000MiB, 24GB")
@click.option(
    "--n-ctx",
    type=click.IntRange(min=256),
    default=None,
    help="context tokens [default: the largest that fits --vram, or 32768]",
)
@click.option(
    "--n-seq-max",
    type=click.IntRange(1, 256),
    default=1,
    show_default=True,
    help="llama.cpp sequences (server: DOCQA_N_SEQ_MAX + 1)",
)
@click.option(
    "--n-rs-seq", type=click.IntRange(0, 64), default=None, help="recurrent snapshots [default: 16 on hybrid models]"
)
@click.option("--type-k", type=click.Choice(KV_TYPES), default="f16", show_default=True)
@click.option("--type-v", type=click.Choice(KV_TYPES), default="f16", show_default=True)
@click.option("--mtp/--no-mtp", default=None, help="add the MTP draft context [default: when the model has MTP layers]")
@click.option("--flash-attn/--no-flash-attn", default=True, show_default=True)
@click.option("--n-batch", type=click.IntRange(min=1), default=512, show_default=True)
@click.option("--n-ubatch", type=click.IntRange(min=1), default=512, show_default=True)
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
        try:
            shape = preset(preset_name) if preset_name else ModelShape.from_gguf(model)
        except ValueError:
            raise
        except Exception as exc:  # gguf's reader on something else: /dev/zero, a truncated or foreign file
            raise ValueError(f"{model} is not a GGUF model file ({type(exc).__name__}: {exc})") from None
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
for command in remote.COMMANDS:
    main.add_command(command)

if __name__ == "__main__":
    main()
