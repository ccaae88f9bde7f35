"""TLS between Alertmanager and remediation, as docs/deploy.md describes it: the shipped
receiver (deploy/alertmanager/remediation-tls.yml) passes amtool, and a real Alertmanager
delivers through it to a real remediation service serving TLS (--tls-cert-file)."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import urllib.request
from typing import Any

import pytest
import yaml

from tests.deploy.support import ROOT
from tests.realcomp import (
    free_port,
    require_binary,
    run_alertmanager,
    self_signed_cert,
    wait_until,
    world_readable_tmpdir,
)

pytestmark = pytest.mark.real
RECEIVER = ROOT / "deploy" / "alertmanager" / "remediation-tls.yml"
TOKEN = "tls-test-token-0123456789abcdef-0123456789"


def test_the_tls_receiver_example_passes_amtool() -> None:
    amtool = require_binary("amtool")
    out = subprocess.run(
        [amtool, "check-config", str(RECEIVER)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr
    hook = yaml.safe_load(RECEIVER.read_text())["receivers"][1]["webhook_configs"][0]
    assert hook["url"].startswith("https://") and hook["http_config"]["tls_config"]["ca_file"]
    am = yaml.safe_load((ROOT / "deploy/alertmanager/alertmanager.yml").read_text())
    (plain,) = [r for r in am["receivers"] if r["name"] == "gpuwarden-remediation"]
    auth = plain["webhook_configs"][0]["http_config"]["authorization"]
    assert hook["http_config"]["authorization"] == auth  # the same token file


def _get(url: str, ctx: ssl.SSLContext) -> Any:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
        return json.loads(r.read())


def test_alertmanager_delivers_to_remediation_over_tls_with_the_shipped_receiver() -> None:
    d = world_readable_tmpdir("gpuwarden-tls-")
    cert, key = self_signed_cert(d)
    (d / "token").write_text(TOKEN + "\n")
    (d / "token").chmod(0o600)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "remediation", f"--listen=127.0.0.1:{port}",
         f"--state-db={d / 'state.db'}", "--backend=dry-run",
         f"--webhook-token-file={d / 'token'}",
         f"--tls-cert-file={cert}", f"--tls-key-file={key}"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    ctx = ssl.create_default_context(cafile=str(cert))
    url = f"https://127.0.0.1:{port}"
    try:
        wait_until(lambda: _get(f"{url}/api/v1/decisions", ctx) is not None, 30, 0.2, "TLS up")
        config = yaml.safe_load(RECEIVER.read_text())
        hook = config["receivers"][1]["webhook_configs"][0]
        hook["url"] = f"{url}/alertmanager"
        hook["http_config"]["authorization"]["credentials_file"] = str(d / "token")
        hook["http_config"]["tls_config"]["ca_file"] = str(cert)
        config["route"]["routes"][0]["group_wait"] = "1s"
        with run_alertmanager(yaml.safe_dump(config)) as am:
            am.post_alerts(
                [
                    {
                        "labels": {
                            "alertname": "GpuThermal",
                            "node": "gpu-node-007",
                            "action": "notify",
                            "fault_class": "thermal",
                        }
                    }
                ]
            )
            got = wait_until(
                lambda: _get(f"{url}/api/v1/decisions?node=gpu-node-007", ctx)["decisions"],
                30, 0.5, "decision delivered over TLS",
            )  # fmt: skip
        assert got[0]["action"] == "notify" and got[0]["fault_class"] == "thermal"
    finally:
        proc.terminate()
        proc.wait(10)
        subprocess.run(["rm", "-rf", str(d)], check=False)
