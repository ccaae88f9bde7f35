"""`--workers N`: N processes step the same fleet in lockstep and each serves every Nth node."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter import catalog as c
from tests.realcomp import free_port, http_get, wait_until


def _two_free_ports() -> int:
    for _ in range(50):
        port = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue
    raise RuntimeError("no two adjacent free ports")


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    port, sd = _two_free_ports(), tmp_path / "targets.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwarden", "simulate", "--nodes", "6", "--workers", "2",
         "--tick", "0.2", "--listen", f"127.0.0.1:{port}", "--file-sd", str(sd), "--seed", "4",
         "--log-level", "warning"],
    )  # fmt: skip
    try:
        wait_until(sd.exists, 60, 0.1, "file_sd written after both workers are up")
        yield port, sd
    finally:
        proc.terminate()
        proc.wait(20)


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code


def test_workers_split_the_nodes_and_share_injections_and_truth(
    two_workers: tuple[int, Path],
) -> None:
    port, sd = two_workers
    groups = json.loads(sd.read_text())
    owners = {g["labels"]["node"]: g["targets"][0] for g in groups}
    assert owners["gpu-node-001"] == f"127.0.0.1:{port}"
    assert owners["gpu-node-002"] == f"127.0.0.1:{port + 1}"
    assert _status(f"http://127.0.0.1:{port}/nodes/gpu-node-002/metrics") == 404
    assert _status(f"http://127.0.0.1:{port + 1}/nodes/gpu-node-002/metrics") == 200

    req = {"node": "gpu-node-002", "kind": "xid", "target": "gpu1", "parameters": {"xid": 79}}
    post = urllib.request.Request(f"http://127.0.0.1:{port}/inject", json.dumps(req).encode(),
                                  {"Content-Type": "application/json"}, method="POST")  # fmt: skip
    with urllib.request.urlopen(post, timeout=10) as r:
        assert r.status == 201
    url = f"http://127.0.0.1:{port + 1}/nodes/gpu-node-002/metrics"
    body = wait_until(lambda: (b := http_get(url).decode()) and 'reason="gpu_lost"} 0' in b and b,
                      10, 0.1, "gpu lost on the other worker")  # fmt: skip
    lost = [ln for ln in body.splitlines() if 'reason="gpu_lost"' in ln]
    assert len(lost) == 1 and lost[0].startswith(f'{c.GPU_UP.name}{{node="gpu-node-002",gpu="1"')
    assert f'{c.GPU_XID_ERRORS.name}{{node="gpu-node-002",gpu="1"' in body

    def truth(p: int) -> list[dict[str, object]]:
        return list(json.loads(http_get(f"http://127.0.0.1:{p}/truth"))["faults"])

    assert truth(port) == truth(port + 1) and len(truth(port)) == 1
