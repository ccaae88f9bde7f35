"""Start, watch and stop the services of a local stack (demo, end-to-end test, benchmark).

A small supervisor: each child gets its own log file and process group, readiness is an HTTP
probe, and ``stop_all`` ends everything in reverse start order (SIGTERM, then SIGKILL), also
when the parent is interrupted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_port_block(n: int) -> int:
    """A port p with p .. p + n - 1 all free on loopback (a stack or workers on consecutive
    ports)."""
    for _ in range(100):
        base = free_port()
        if base + n > 65535:
            continue
        try:
            for i in range(1, n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
    raise RuntimeError(f"no block of {n} free ports")


def world_readable_tmpdir(prefix: str) -> Path:
    """A temp dir under /tmp with 0755 (daemons running as other users must reach it)."""
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    d.chmod(0o755)
    return d


def wait_until(
    pred: Callable[[], Any], timeout: float, interval: float = 0.1, what: str = "condition"
) -> Any:
    """Poll ``pred`` until it returns something true; TimeoutError says what and the last error."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            v = pred()
            if v:
                return v
        except Exception as e:  # the thing is still starting
            last_exc = e
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what} (last error: {last_exc})")


class StartError(RuntimeError):
    """A service did not become ready; the message carries the tail of its log."""


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def http_ok(url: str, timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return 200 <= r.status < 300
    except Exception:
        return False


@dataclass
class Supervisor:
    workdir: Path
    children: list[Child] = field(default_factory=list)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        ready_url: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 60.0,
    ) -> Child:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.workdir / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                list(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        child = Child(name, proc, log)
        self.children.append(child)
        if ready_url:
            self.wait_ready(child, ready_url, timeout)
        return child

    def wait_ready(self, child: Child, url: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if child.proc.poll() is not None:
                raise StartError(
                    f"{child.name} exited with {child.proc.returncode}:\n{child.tail()}"
                )
            if http_ok(url):
                return
            time.sleep(0.1)
        raise StartError(f"{child.name} not ready at {url} after {timeout:.0f}s:\n{child.tail()}")

    def failed(self) -> list[Child]:
        return [c for c in self.children if c.proc.poll() is not None]

    def stop_all(self, grace: float = 10.0) -> None:
        for child in reversed(self.children):
            if child.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for child in reversed(self.children):
            try:
                child.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.proc.pid, signal.SIGKILL)
                child.proc.wait(5)
        self.children.clear()
