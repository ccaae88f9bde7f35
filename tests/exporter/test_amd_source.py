"""The exporter picks the AMD source where amdsmi is installed, and says clearly when it is not."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from exporter import catalog as c
from exporter.cli import main, settings_from
from exporter.sources.amdsmi_api import amdsmi_installed

ROOT = Path(__file__).resolve().parents[2]
# a stand-in amdsmi module: the hand-written fake behind the module's own attribute names
FAKE_MODULE = """
from exporter.sources.amdsmi_fake import mi300x_node
_smi = mi300x_node(gpus=2)
_smi.gpus[1].ecc_blocks = {"UMC": {"deferred_count": 2}}
def __getattr__(name):
    return getattr(_smi, name)
"""


def _fake_amdsmi(tmp_path: Path) -> Path:
    pkg = tmp_path / "site" / "amdsmi"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(FAKE_MODULE)
    return tmp_path / "site"


def test_asking_for_amdsmi_where_it_is_not_installed_stops_the_start_with_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert not amdsmi_installed()  # this machine has no ROCm
    assert main(["--source", "amdsmi"]) == 2
    err = capsys.readouterr().err
    assert "--source amdsmi: AMD's amdsmi Python module is not installed" in err
    assert err.count("\n") == 1


def test_auto_is_nvml_without_amdsmi_and_amdsmi_where_the_module_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert settings_from(["--source", "auto"])[0].source == "nvml"
    monkeypatch.syspath_prepend(str(_fake_amdsmi(tmp_path)))
    assert settings_from([])[0].source == "amdsmi"
    assert settings_from(["--source", "nvml"])[0].source == "nvml"  # asked for: kept


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(url: str, deadline: float) -> str:
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                body = r.read().decode()
            if c.GPU_AMDGPU_EVENTS.name in body:
                return body
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"no AMD series at {url}")
        time.sleep(0.2)


def test_the_exporter_on_an_amd_node_serves_gpus_ras_and_kernel_log_events(tmp_path: Path) -> None:
    site = _fake_amdsmi(tmp_path)
    kmsg = tmp_path / "kern.log"
    kmsg.write_text("")
    port = _free_port()
    env = {"PYTHONPATH": f"{site}:{ROOT}", "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "--listen", f"127.0.0.1:{port}", "--node", "mi1",
         "--kmsg", str(kmsg), "--interval", "0.2", "--sysfs-root", str(tmp_path)],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        time.sleep(0.5)
        with kmsg.open("a") as f:
            f.write("[ 10.0] amdgpu 0000:26:00.0: amdgpu: {1}uncorrectable hardware error"
                    "(ERREVENT_ATHUB_INTERRUPT) detected!\n")  # fmt: skip
        body = _scrape(f"http://127.0.0.1:{port}/metrics", time.monotonic() + 30)
    finally:
        proc.terminate()
        out = proc.communicate(timeout=10)[0]
    assert f"{c.BUILD_INFO.name}{{" in body and 'source="amdsmi"' in body, out
    assert body.count(f"{c.GPU_UP.name}{{") == 2
    assert f'{c.GPU_AMDGPU_EVENTS.name}{{node="mi1",gpu="1"' in body  # named by amdsmi's index
    assert 'error_type="deferred"' in body and 'block="umc"' in body
