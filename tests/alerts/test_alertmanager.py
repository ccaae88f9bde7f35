"""deploy/alertmanager/alertmanager.yml: amtool accepts it, routes every shipped alert to the
right receivers, and a real Alertmanager inhibits and delivers as the comments promise."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from tests.alerts.ruleset import ROOT, alerting_rules
from tests.realcomp import (
    Alertmanager,
    free_port,
    http_get,
    require_binary,
    run_alertmanager,
    wait_until,
)

# On both Prometheus generations (tests/realcomp.py GENERATIONS).
pytestmark = [pytest.mark.real, pytest.mark.usefixtures("prom_generation")]
CONFIG = ROOT / "deploy" / "alertmanager" / "alertmanager.yml"
REMEDIATION = "gpuwarden-remediation"
HUMAN = {"critical": "oncall-page", "warning": "oncall-ticket", "info": "dashboards-only"}
TOKEN = "test-webhook-token"


def amtool(*args: str) -> tuple[int, str, str]:
    r = subprocess.run(
        [require_binary("amtool"), *args], capture_output=True, text=True, timeout=30
    )
    return r.returncode, r.stdout, r.stderr


def routes(labels: dict[str, str]) -> list[str]:
    pairs = [f"{k}={v}" for k, v in sorted(labels.items())]
    rc, out, err = amtool("config", "routes", "test", f"--config.file={CONFIG}", *pairs)
    assert rc == 0, out + err
    return out.strip().split(",")


def test_amtool_check_config_accepts_the_example() -> None:
    rc, out, err = amtool("check-config", str(CONFIG))
    assert rc == 0, out + err
    assert "SUCCESS" in out and "4 inhibit rules" in out


def test_amtool_check_config_rejects_a_broken_route(tmp_path: Path) -> None:
    d = tmp_path
    broken = CONFIG.read_text().replace("receiver: oncall-page", "receiver: nobody-home")
    (d / "am.yml").write_text(broken)
    rc, out, err = amtool("check-config", str(d / "am.yml"))
    assert rc != 0
    assert "nobody-home" in out + err


def _example_labels() -> list[dict[str, str]]:
    """One label set per distinct (severity, action) the shipped alerts produce."""
    seen: dict[tuple[str, str | None], dict[str, str]] = {}
    for rule in alerting_rules():
        labels = {k: v for k, v in rule.labels.items() if "{{" not in v}
        if "{{" in rule.labels.get("action", ""):
            labels["action"] = "drain"
        labels.update(alertname=rule.alert or "", node="gpu-node-001")
        seen.setdefault((labels["severity"], labels.get("action")), labels)
    return list(seen.values())


@pytest.mark.parametrize(
    "labels", _example_labels(), ids=lambda lab: f"{lab['severity']}-{lab.get('action')}"
)
def test_every_shipped_alert_reaches_people_by_severity_and_remediation_by_action(
    labels: dict[str, str],
) -> None:
    expected = ([REMEDIATION] if "action" in labels else []) + [HUMAN[labels["severity"]]]
    assert routes(labels) == expected


def test_an_action_outside_the_vocabulary_never_reaches_remediation() -> None:
    labels = {"alertname": "X", "severity": "warning", "action": "format_disk", "node": "n"}
    assert routes(labels) == ["oncall-ticket"]


def test_amtool_routes_test_fails_when_the_receiver_is_not_the_expected_one() -> None:
    rc, out, err = amtool(
        "config", "routes", "test", f"--config.file={CONFIG}",
        "--verify.receivers=oncall-page", "severity=warning", "alertname=X",
    )  # fmt: skip
    assert rc != 0
    assert "did not match" in out + err


class _Receiver(BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[str, str, dict[str, Any]]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.received.append((self.path, self.headers.get("Authorization", ""), body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def receiver() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def alertmanager(
    prom_generation: str, receiver: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Alertmanager]:
    """The example config, with receivers pointed at a local recorder and short waits."""
    d = tmp_path_factory.mktemp("amcfg")
    (d / "token").write_text(TOKEN + "\n")
    config = yaml.safe_load(CONFIG.read_text())
    for r in config["receivers"]:
        for w in r.get("webhook_configs", []):
            w["url"] = receiver + "/" + r["name"]
            if "http_config" in w:
                w["http_config"]["authorization"]["credentials_file"] = str(d / "token")
    # Not 0s: a group flushed the instant its alert arrives can beat Alertmanager's inhibitor,
    # which learns of source alerts asynchronously (the deployed config waits 10-30 s).
    config["route"]["group_wait"] = "1s"
    for route in config["route"]["routes"]:
        route["group_wait"] = "1s"
    with run_alertmanager(yaml.safe_dump(config)) as am:
        yield am


def _alert(name: str, **labels: str) -> dict[str, Any]:
    return {"labels": {"alertname": name, **labels}, "annotations": {"summary": name}}


def _states(am: Alertmanager) -> dict[tuple[str, str, str], str]:
    body = json.loads(http_get(f"{am.url}/api/v2/alerts"))
    return {
        (a["labels"]["alertname"], a["labels"].get("node", ""), a["labels"].get("gpu", "")): a[
            "status"
        ]["state"]
        for a in body
    }


def test_real_alertmanager_inhibits_as_configured(alertmanager: Alertmanager) -> None:
    sources = [
        _alert("GpuwardenExporterDown", node="n1", severity="critical", component="exporter"),
        _alert("GpuXidFatalHardware", node="n2", gpu="1", xid="79", severity="critical",
               action="drain", fault_class="xid_fatal"),
        _alert("NvlinkDomainFabricDegraded", nvlink_domain="c.7", scope="domain",
               severity="critical", action="notify", fault_class="switch"),
    ]  # fmt: skip
    # The sources first, as in life (a node goes down before its GPUs' alerts would fire).
    alertmanager.post_alerts(sources)
    names = {a["labels"]["alertname"] for a in sources}
    wait_until(lambda: names <= {k[0] for k in _states(alertmanager)}, 10, what="sources listed")
    alertmanager.post_alerts(
        [
            _alert("GpuLost", node="n1", gpu="3", severity="critical", action="drain",
                   fault_class="gpu_lost"),
            _alert("GpuThrottlingSustained", node="n2", gpu="1", severity="warning",
                   action="notify", fault_class="thermal"),
            _alert("GpuThrottlingSustained", node="n2", gpu="2", severity="warning",
                   action="notify", fault_class="thermal"),
            _alert("InfinibandErrorRateHigh", node="n2", device="mlx5_0", port="1",
                   severity="warning", action="cordon", fault_class="infiniband"),
            _alert("NvlinkDown", node="t1", gpu="0", link="0", nvlink_domain="c.7",
                   severity="critical", action="drain", fault_class="nvlink"),
            _alert("NvlinkDown", node="t2", gpu="0", link="0", nvlink_domain="c.8",
                   severity="critical", action="drain", fault_class="nvlink"),
        ]
    )  # fmt: skip
    expected = {
        ("GpuwardenExporterDown", "n1", ""): "active",
        ("GpuLost", "n1", "3"): "suppressed",  # node down inhibits its GPUs
        ("GpuXidFatalHardware", "n2", "1"): "active",
        ("GpuThrottlingSustained", "n2", "1"): "suppressed",  # fatal on the same GPU
        ("GpuThrottlingSustained", "n2", "2"): "active",  # another GPU
        ("InfinibandErrorRateHigh", "n2", ""): "active",  # not a GPU alert
        ("NvlinkDomainFabricDegraded", "", ""): "active",
        ("NvlinkDown", "t1", "0"): "suppressed",  # its NVLink domain is down: one incident
        ("NvlinkDown", "t2", "0"): "active",  # another domain
    }
    # Alertmanager's inhibitor learns of source alerts asynchronously: poll until it settles.
    with contextlib.suppress(TimeoutError):
        wait_until(lambda: _states(alertmanager) == expected, 10, what="inhibition settled")
    assert _states(alertmanager) == expected


def test_real_alertmanager_delivers_actions_to_remediation_with_the_bearer_token(
    alertmanager: Alertmanager, receiver: str
) -> None:
    alertmanager.post_alerts(
        [_alert("GpuRowRemapFailed", node="n3", gpu="0", severity="critical", action="drain",
                fault_class="memory")]
    )  # fmt: skip

    def delivered() -> list[tuple[str, str, dict[str, Any]]]:
        return [
            r
            for r in _Receiver.received
            if r[0] == f"/{REMEDIATION}"
            and any(a["labels"]["alertname"] == "GpuRowRemapFailed" for a in r[2]["alerts"])
        ]

    (_, auth, body) = wait_until(delivered, 15, what="webhook delivery")[0]
    assert auth == f"Bearer {TOKEN}"
    assert body["version"] == "4" and body["status"] == "firing"
    wait_until(
        lambda: any(r[0] == "/oncall-page" and "GpuRowRemapFailed" in json.dumps(r[2])
                    for r in _Receiver.received), 15, what="page delivery"
    )  # fmt: skip
    time.sleep(1)  # inhibited alerts must not have slipped through meanwhile
    sent = json.dumps([r[2] for r in _Receiver.received if r[0] == f"/{REMEDIATION}"])
    assert '"GpuLost"' not in sent


def test_the_example_config_names_the_remediation_webhook_contract() -> None:
    config = yaml.safe_load(CONFIG.read_text())
    (hook,) = next(r for r in config["receivers"] if r["name"] == REMEDIATION)["webhook_configs"]
    assert hook["url"] == "http://127.0.0.1:9836/alertmanager"
    assert hook["http_config"]["authorization"]["type"] == "Bearer"
    assert Path(hook["http_config"]["authorization"]["credentials_file"]).is_absolute()
