"""``python -m server`` as an operator starts it (server/api/serve.py): what it says when it cannot start
(a port in use is one line naming the port and its settings, before the model loads); `make serve
PORT= HOST=` binds there; Ctrl-C and SIGTERM stop the server cleanly (exit 0, nothing from make after
the log)."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from server.api.serve import CannotListen, bind
from store.sqlite_store import SqliteStore
from testkit.live import ROOT, Live, free_port
from tests.conftest import make_settings


def test_a_damaged_database_stops_the_start_with_the_right_advice(tmp_path, gemma_path):
    """A corrupt database header got "make it writable by this user" advice, which cannot help."""
    data = tmp_path / "data"
    SqliteStore(data).close()
    with (data / "docqa.sqlite3").open("r+b") as f:
        f.write(bytes(100))  # the header
    env = Live(data, gemma_path).env
    run = subprocess.run(
        [sys.executable, "-m", "server"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("docqa: ") and "is damaged" in last and "backup" in last, run.stderr[-2000:]
    assert "writable" not in last


def test_the_measured_layout_is_served_only_where_the_setting_is_auto(tmp_path):
    from server.api.serve import with_layout
    from server.engine.layout import Choice
    from server.engine.selftest import SelfTest

    pair = SelfTest("cached", None, "", Choice(False, None, None, "", pair=True))
    plain = SelfTest("passed", False, "", Choice(True, None, None, ""))
    kept = SelfTest("passed", None, "", Choice(False, None, None, ""))
    auto = make_settings(tmp_path, tmp_path / "m.gguf")
    assert with_layout(auto, pair).cpu_repack == "pair" and with_layout(auto, pair).read_plain
    assert with_layout(auto, plain).cpu_repack == "off"
    assert with_layout(auto, kept).cpu_repack == "auto"
    assert with_layout(make_settings(tmp_path, tmp_path / "m.gguf", cpu_repack="on"), pair).cpu_repack == "on"


def test_the_measured_attention_is_served_only_where_the_setting_is_auto(tmp_path):
    from server.api.serve import with_layout
    from server.engine.layout import Choice
    from server.engine.selftest import SelfTest

    off = SelfTest("cached", None, "", Choice(False, None, None, "", pair=True, flash_attn="off"))
    auto = make_settings(tmp_path, tmp_path / "m.gguf")
    served = with_layout(auto, off)
    assert (served.flash_attn, served.cpu_repack) == ("off", "pair")
    on = SelfTest("cached", None, "", Choice(False, None, None, "", flash_attn="on"))
    assert with_layout(auto, on).flash_attn == "auto", "what auto gives a CPU: documents saved with it still load"
    assert with_layout(make_settings(tmp_path, tmp_path / "m.gguf", flash_attn="on"), off).flash_attn == "on"
    unmeasured = SelfTest("cached", None, "", Choice(False, None, None, ""))
    assert with_layout(auto, unmeasured).flash_attn == "auto"
    fixed = make_settings(tmp_path, tmp_path / "m.gguf", cpu_repack="on")  # the layout is the user's: attention still
    assert with_layout(fixed, off).flash_attn == "off"


def test_the_pair_is_not_chosen_where_its_reader_would_crowd_the_memory(tmp_path, gemma_path):
    from server.api.serve import with_layout
    from server.config.memory import reader_cost
    from server.engine.layout import Choice
    from server.engine.selftest import SelfTest

    pair = SelfTest("cached", None, "", Choice(False, None, None, "", pair=True))
    settings = make_settings(tmp_path, gemma_path)
    need = sum(reader_cost(settings, gemma_path))
    assert with_layout(settings, pair, lambda: (need, 4 * need)).cpu_repack == "pair"
    assert with_layout(settings, pair, lambda: (need, need)).cpu_repack == "auto", "one instance, as it was"
    assert with_layout(settings, pair, lambda: None).cpu_repack == "pair", "not known: the measurement decides"


STAMP = ".venv/.docqa-installed"  # `make -o`: never reinstall into the venv from a test


def _holder(port: int) -> subprocess.Popen:
    """Another program listening on 127.0.0.1:``port`` (a real process, as a user would meet it)."""
    code = (
        "import socket, sys, time; s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); "
        "print('listening', flush=True); time.sleep(120)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(port)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "listening"
    return proc


def test_bind_names_the_port_and_its_settings():
    port = free_port()
    holder = _holder(port)
    try:
        with pytest.raises(CannotListen) as info:
            bind("127.0.0.1", port)
        message = str(info.value)
        assert f"port {port} is already in use on 127.0.0.1" in message
        assert "DOCQA_PORT=" in message and "--port" in message and "make serve PORT=" in message
        assert "\n" not in message
    finally:
        holder.kill()
        holder.wait()
    sock = bind("127.0.0.1", port)  # free again: bound, not yet listening (uvicorn listens)
    sock.close()
    with pytest.raises(CannotListen, match=r"'192\.0\.2\.1' is not an address of this machine.*DOCQA_HOST="):
        bind("192.0.2.1", port)


def test_a_port_in_use_is_one_line_and_exit_1_before_the_model_loads(tmp_path, gemma_path):
    port = free_port()
    holder = _holder(port)
    env = {**os.environ, "DOCQA_DATA_DIR": str(tmp_path), "DOCQA_MODEL_PATH": str(gemma_path)}
    env.update(DOCQA_PORT=str(port), DOCQA_SELFTEST="true", DOCQA_N_THREADS="1")
    try:
        t0 = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "server"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        took = time.monotonic() - t0
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith(f"docqa: port {port} is already in use"), done.stderr
    assert "DOCQA_PORT=" in lines[-1] and "make serve PORT=" in lines[-1]
    # Nothing of the model: no self-test (a child process that loads it) and no traceback.
    assert "self-test" not in done.stderr and "Traceback" not in done.stderr and "llama" not in done.stderr.lower()
    print(f"refused in {took:.1f} s")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """One data directory for the servers below, one after the other: the second start reuses the
    first one's self-test and calibration caches (a minute each on a loaded 2-core machine)."""
    return tmp_path_factory.mktemp("listen") / "data"


def _log_until(server: Live, line: bytes, timeout: float) -> bytes:
    """The server's log once it holds ``line`` (the log is read as it grows, every 50 ms)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = server.log.read_bytes() if server.log.exists() else b""
        if line in log or server.proc.poll() is not None:
            return log
        time.sleep(0.05)
    return server.log.read_bytes()


def test_the_address_is_logged_once_it_accepts_connections_and_sigterm_exits_0(data_dir, gemma_path):
    """Issue 39 item 3: the address was logged 45-60 s before the port answered (the model loaded and
    the verify costs were measured after it), and a user who opened it then was refused. Now a
    connection made the moment the line appears is answered, and no earlier line names the address."""
    server = Live(data_dir, gemma_path, DOCQA_N_THREADS="1")
    address = f"http://127.0.0.1:{server.port}".encode()
    server.proc = subprocess.Popen(server.argv, cwd=server.root, env=server.env, stdout=server.log.open("ab"),
                                   stderr=subprocess.STDOUT)  # fmt: skip
    try:
        log = _log_until(server, b"serving on " + address, 600)
        assert b"serving on " + address in log, log.decode(errors="replace")[-3000:]
        status, health = server.get("/health")  # at once: no retry, no wait
        assert status == 200 and health["status"] == "ok"
        before = log[: log.index(b"serving on " + address)]
        assert address not in before and b"loading the model (its address is logged once" in before
    except Exception:
        server.stop()  # leave nothing running
        raise
    proc = server.proc
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0  # a graceful shutdown, not a death by the signal
    log = server.log.read_text()
    assert "Application shutdown complete" in log and "Traceback" not in log and "KeyboardInterrupt" not in log


def test_signals_in_a_row_still_shut_down_gracefully(data_dir, gemma_path):
    """Two SIGTERMs at once (`timeout` forwarding one beside `pkill`, or Ctrl-C pressed twice) hung the
    server for good: the second signal's handler ran inside the first one's, in the same thread, and
    waited for the lock of the engine's job queue that the first one held. A handler now only sets
    uvicorn's flags; the engine is told on the event loop."""
    server = Live(data_dir, gemma_path, DOCQA_N_THREADS="1").start(timeout=600)
    try:
        for _ in range(50):
            server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(60) == 0
    finally:
        server.stop()
    assert "Application shutdown complete" in server.log.read_text()


def test_the_signal_handler_takes_no_lock_and_the_engine_is_told_on_the_event_loop(monkeypatch):
    """The hang above, made certain: a signal lands while the main thread holds the lock of the engine's
    job queue (inside a put). The handler must return without it; the engine is told at shutdown."""
    import asyncio
    import queue
    import threading
    from types import SimpleNamespace

    import uvicorn

    from server.api.serve import GracefulServer

    jobs: queue.Queue = queue.Queue()
    told = []
    engine = SimpleNamespace(begin_shutdown=lambda timeout_s: (jobs.put("wake"), told.append(timeout_s)))
    app = SimpleNamespace(state=SimpleNamespace(services=SimpleNamespace(
        engine=engine, settings=SimpleNamespace(shutdown_timeout_s=3.0))))  # fmt: skip
    server = GracefulServer(uvicorn.Config(app=app), app)
    with jobs.mutex:  # as a put of the main thread holds it when the signal lands
        handler = threading.Thread(target=server.handle_exit, args=(signal.SIGTERM, None), daemon=True)
        handler.start()
        handler.join(5)
        assert not handler.is_alive(), "the signal handler waited for the engine's queue"
    assert server.should_exit and told == []

    async def closed(self, sockets=None):  # uvicorn's own: its connections, the lifespan
        told.append("uvicorn")

    monkeypatch.setattr(uvicorn.Server, "shutdown", closed)
    asyncio.run(server.shutdown())
    assert told == [3.0, "uvicorn"] and jobs.get_nowait() == "wake"


def _read_until(fd: int, done, timeout: float) -> bytes:
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not done(out):
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the other side closed
                break
            if not chunk:
                break
            out += chunk
    return out


@pytest.mark.slow  # one of the longest in make test (2 cores); its check stays in make test-slow
def test_make_serve_port_host_and_ctrl_c(tmp_path, data_dir, gemma_path):
    """`make serve PORT= HOST=` in a terminal (a pty), then Ctrl-C typed there: the server stops, and
    neither make nor Python prints anything after the server's own shutdown lines."""
    port = free_port()
    env = {**os.environ, "DOCQA_DATA_DIR": str(data_dir), "DOCQA_MODEL_PATH": str(gemma_path)}
    env.update(DOCQA_PORT=str(free_port()), DOCQA_HOST="192.0.2.1", DOCQA_N_THREADS="1")  # PORT= HOST= win
    pid, fd = pty.fork()
    if pid == 0:  # the child: make in the terminal
        os.chdir(ROOT)
        os.execvpe("make", ["make", "-o", STAMP, "serve", f"PORT={port}", "HOST=127.0.0.1"], env)
    try:
        out = _read_until(fd, lambda o: b"serving on" in o, 600)
        assert f"serving on http://127.0.0.1:{port}".encode() in out, out.decode(errors="replace")[-3000:]
        probe = Live(Path(tmp_path / "probe"), gemma_path)
        probe.port = port
        assert probe.get("/health")[1]["status"] == "ok"  # the address is logged once it accepts
        os.write(fd, b"\x03")  # Ctrl-C: the terminal sends SIGINT to make and the server
        rest = _read_until(fd, lambda o: False, 60)
        _, status = os.waitpid(pid, 0)
    finally:
        try:  # make and the server share the terminal's process group (pty.fork: make leads it)
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(fd)
    text = rest.decode(errors="replace")
    assert "Application shutdown complete" in text, text
    assert "make: ***" not in text and "Terminated" not in text and "Interrupt" not in text, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    # make itself got the SIGINT too and stops by it, silently, as Ctrl-C should leave a shell.
    assert os.waitstatus_to_exitcode(status) in (0, -signal.SIGINT), status
