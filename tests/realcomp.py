"""Start real Prometheus, promtool and Alertmanager (Debian packages) on loopback for tests.

A missing binary skips the test on a developer machine and fails it when ``CI`` is set: CI
installs the packages (``make system-deps``), so a skip there would hide a broken install.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NoReturn

import pytest

from gpuwarden.processes import free_port, wait_until, world_readable_tmpdir

__all__ = ["free_port", "wait_until", "world_readable_tmpdir"]


# The Prometheus-stack servers exist in two generations (issue 32): `current` (Debian unstable's
# Prometheus 3.5 LTS, Alertmanager 0.33, node_exporter 1.11, unpacked by tests/lab/servers.sh
# into the lab cache) and `stable` (Debian stable's packages in /usr/bin: 2.42, 0.25, 1.5).
# GPUWARDEN_PROM_GENERATION picks the one every real-server test runs on (default current);
# the promtool, alert-stack and dcgm e2e tests take the `prom_generation` fixture
# (tests/conftest.py) and run on both. A generation is put first on PATH as a directory of
# links to its five binaries, so gpuwarden's own PATH lookups (stack.py, demo.py) follow it.
GENERATIONS = ("current", "stable")
GENERATION_BINARIES = (
    "prometheus",
    "promtool",
    "prometheus-alertmanager",
    "amtool",
    "prometheus-node-exporter",
)


def default_generation() -> str:
    g = os.environ.get("GPUWARDEN_PROM_GENERATION") or "current"
    if g not in GENERATIONS:
        raise ValueError(f"GPUWARDEN_PROM_GENERATION={g!r}: one of {', '.join(GENERATIONS)}")
    return g


def lab_cache() -> Path:
    """Where tests/lab/servers.sh builds and unpacks the lab's servers, outside the clone."""
    return Path(os.environ.get("GPUWARDEN_LAB_CACHE") or Path.home() / ".cache" / "gpuwarden-lab")


def versions() -> dict[str, str]:
    """tests/lab/versions.env as a dict (the versions the lab builds and runs)."""
    out: dict[str, str] = {}
    for line in (Path(__file__).resolve().parent / "lab" / "versions.env").read_text().splitlines():
        m = re.match(r"^([A-Z_]+)=\"?([^\"]*)\"?$", line.strip())
        if m:
            out[m.group(1)] = m.group(2)
    return out


def unavailable(msg: str) -> NoReturn:
    """A real server a test needs is not installed: skipped on a developer machine, a failure
    under ``CI`` (CI never skips)."""
    if os.environ.get("CI"):
        pytest.fail(msg)
    pytest.skip(msg)


def generation_source(generation: str) -> Path:
    """The directory a generation's binaries come from."""
    if generation == "stable":
        return Path("/usr/bin")
    return lab_cache() / "debian-sid" / "usr" / "bin"


def generation_missing(generation: str) -> list[str]:
    src = generation_source(generation)
    return [b for b in GENERATION_BINARIES if not os.access(src / b, os.X_OK)]


def generation_dir(generation: str, parent: Path) -> Path:
    """``parent/<generation>``: links to the generation's five binaries and nothing else (the
    lab's debian-sid/usr/bin also holds etcd and kubectl, which must not shadow others)."""
    missing = generation_missing(generation)
    if missing:
        unavailable(f"Prometheus generation {generation}: {', '.join(missing)} not in "
                    f"{generation_source(generation)} (tests/lab/servers.sh / make system-deps)")  # fmt: skip
    d = parent / generation
    d.mkdir(parents=True, exist_ok=True)
    for b in GENERATION_BINARIES:
        link = d / b
        if not link.exists():
            link.symlink_to(generation_source(generation) / b)
    return d


# VictoriaMetrics (single node) and vmalert in two generations too: `current`, built by
# tests/lab/servers.sh from the VictoriaMetrics Go module at VICTORIAMETRICS_VERSION (what sites
# run), and `stable`, Debian stable's 1.79.5 in /usr/bin (no -rule.evalDelay, a 0/1 error gauge
# per recording rule where later versions count errors).
VM_GENERATIONS = ("current", "stable")


def vm_binary(name: str, generation: str) -> str:
    """``victoria-metrics`` or ``vmalert`` of a VictoriaMetrics generation."""
    if generation == "stable":
        return require_binary(name)
    v = versions()["VICTORIAMETRICS_VERSION"]
    path = lab_cache() / "victoriametrics" / v / "bin" / name
    if not os.access(path, os.X_OK):
        unavailable(f"{name} {v} not built in {path.parent} (tests/lab/servers.sh vm)")
    return str(path)


def thanos_binary() -> str:
    """Thanos (its ruler, sidecar and query), built by tests/lab/servers.sh from its Go module
    at THANOS_VERSION with its release build tags."""
    v = versions()["THANOS_VERSION"]
    path = lab_cache() / "thanos" / v / "thanos"
    if not os.access(path, os.X_OK):
        unavailable(f"thanos {v} not built in {path.parent} (tests/lab/servers.sh thanos)")
    tags = path.parent / "tags"
    if "slicelabels" not in (tags.read_text() if tags.exists() else ""):
        # built before servers.sh passed Thanos' release tags: its sidecar panics on the first
        # gRPC answer (servers.sh explains); servers.sh rebuilds it
        unavailable(f"thanos {v} in {path.parent} built without -tags slicelabels "
                    "(tests/lab/servers.sh thanos rebuilds it)")  # fmt: skip
    return str(path)


def require_binary(name: str) -> str:
    path = shutil.which(name)
    if path:
        return path
    unavailable(f"{name} not installed (Debian package; `make system-deps` installs it as root)")


def http_get(url: str, timeout: float = 5.0, headers: dict[str, str] | None = None) -> bytes:
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return bytes(r.read())


@dataclass
class Prometheus:
    url: str
    dir: Path
    proc: subprocess.Popen[bytes]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr}
        if at is not None:
            params["time"] = str(at)
        body = json.loads(http_get(f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}"))
        if body.get("status") != "success":
            raise RuntimeError(f"query {expr!r} failed: {body}")
        return list(body["data"]["result"])

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        params = {"query": expr, "start": str(start), "end": str(end), "step": str(step)}
        body = json.loads(
            http_get(f"{self.url}/api/v1/query_range?{urllib.parse.urlencode(params)}")
        )
        if body.get("status") != "success":
            raise RuntimeError(f"query_range {expr!r} failed: {body}")
        return list(body["data"]["result"])

    def wait_for(self, expr: str, timeout: float = 30.0) -> list[dict[str, Any]]:
        return list(wait_until(lambda: self.query(expr), timeout, 0.25, f"prometheus: {expr}"))


@contextlib.contextmanager
def daemon(
    argv: list[str], ready: str, log: Path, timeout: float = 60.0
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``argv`` (its output to ``log``) until the block ends, once ``GET ready`` answers;
    a process that exits while starting fails at once, with its log's tail."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        try:

            def up() -> bytes:
                if proc.poll() is not None:
                    tail = log.read_bytes()[-2000:].decode(errors="replace")
                    raise RuntimeError(f"{argv[0]} exited {proc.returncode} while starting: {tail}")
                return http_get(ready, 1.0)

            deadline = time.monotonic() + timeout
            while True:
                try:
                    up()
                    break
                except RuntimeError:
                    raise
                except Exception as e:  # still starting
                    if time.monotonic() > deadline:
                        raise TimeoutError(
                            f"{argv[0]} not ready at {ready} after {timeout:.0f} s: {e}"
                        ) from None
                    time.sleep(0.05)
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


@contextlib.contextmanager
def _daemon(
    binary: str,
    prefix: str,
    files: dict[str, str],
    argv: list[str],
) -> Iterator[tuple[str, Path, subprocess.Popen[bytes]]]:
    """Run ``binary`` on a free loopback port with ``files`` in a fresh dir until the block ends.

    ``argv`` may use ``{dir}`` and ``{port}``; readiness is ``GET /-/ready``.
    """
    path = require_binary(binary)
    d = world_readable_tmpdir(prefix)
    for name, text in files.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(text)
    port = free_port()
    args = [a.format(dir=d, port=port) for a in argv]
    url = f"http://127.0.0.1:{port}"
    try:
        with daemon([path, *args], f"{url}/-/ready", d / "daemon.log", timeout=20) as proc:
            yield url, d, proc
    finally:
        shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def run_prometheus(
    config_yaml: str,
    extra_files: dict[str, str] | None = None,
    data_dir: Path | None = None,
    flags: tuple[str, ...] = (),
) -> Iterator[Prometheus]:
    """Run Prometheus with ``config_yaml`` (and files beside it, e.g. rules) until the block
    ends; ``flags``: more command-line flags (``--web.enable-remote-write-receiver``)."""
    data = str(data_dir) if data_dir else "{dir}/data"
    argv = [
        "--config.file={dir}/prometheus.yml",
        f"--storage.tsdb.path={data}",
        "--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
        "--web.external-url=http://127.0.0.1:{port}",
        "--web.enable-lifecycle",
        *flags,
    ]
    files = {"prometheus.yml": config_yaml, **(extra_files or {})}
    with _daemon("prometheus", "gpuwarden-prom-", files, argv) as (url, d, proc):
        yield Prometheus(url, d, proc)


@dataclass
class Alertmanager:
    url: str
    dir: Path
    proc: subprocess.Popen[bytes]

    def post_alerts(self, alerts: list[dict[str, Any]]) -> None:
        req = urllib.request.Request(
            f"{self.url}/api/v2/alerts",
            data=json.dumps(alerts).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=5) as r:
            assert r.status == 200


@contextlib.contextmanager
def run_alertmanager(config_yaml: str) -> Iterator[Alertmanager]:
    argv = [
        "--config.file={dir}/am.yml",
        "--storage.path={dir}/data",
        "--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
        "--log.level=warn",
        "--web.external-url=http://127.0.0.1:{port}",
    ]
    with _daemon("prometheus-alertmanager", "gpuwarden-am-", {"am.yml": config_yaml}, argv) as (
        url,
        d,
        proc,
    ):
        yield Alertmanager(url, d, proc)


def self_signed_cert(d: Path) -> tuple[Path, Path]:
    """A throw-away certificate and key for 127.0.0.1 (real TLS in tests), via openssl."""
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        [require_binary("openssl"), "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
         "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


# 300 s: the whole rule suite is ~45 s of CPU alone on 2 cores, far more beside other workers
def promtool(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [require_binary("promtool"), *args], input=stdin, capture_output=True, timeout=300
    )


@contextlib.contextmanager
def serve_expositions(bodies: dict[str, bytes]) -> Iterator[int]:
    """Serve ``bodies`` (path -> text exposition) on a free loopback port until the block
    ends (a stand-in exporter for a real Prometheus to scrape); other paths answer 404."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = bodies.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
