"""What this machine can do now (runtime/system.py): whether it is busy."""

from __future__ import annotations

from runtime import system


def test_busy_names_the_load_once_it_reaches_the_cores(monkeypatch):
    monkeypatch.setattr(system.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(system.os, "getloadavg", lambda: (8.24, 6.0, 5.0))
    assert system.busy() == "load average 8.2 on 2 cores"
    monkeypatch.setattr(system.os, "getloadavg", lambda: (1.9, 6.0, 5.0))  # the 1-minute average counts
    assert system.busy() is None

    def unknown():
        raise OSError("no load average here")

    monkeypatch.setattr(system.os, "getloadavg", unknown)
    assert system.busy() is None
