"""Builders shared by the remediation tests: alerts, payloads, policies, services."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from remediation import policy as policy_mod
from remediation.backends.runner import Runner
from remediation.clock import Clock, FakeClock
from remediation.model import Alert
from remediation.policy import Policy
from remediation.service import CollectorsFor, Service, build
from remediation.settings import Settings
from tests.realcomp import http_get, wait_until

TOKEN = "s3cret-token-of-at-least-32-bytes"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

LIVE_POLICY = """
dry_run: false
auto_release: true
rules:
  - match: {fault_class: "~xid_fatal|gpu_lost|memory"}
    allow: [notify, cordon, drain, requeue, checkpoint_restart, reboot, inspect]
  - match: {}
    allow: [notify]
ladders:
  xid_fatal: [drain, checkpoint_restart, reboot, inspect]
inspect_after: 4
budgets:
  fleet: {max_fraction: 0.5, max_nodes: 100}
  per_job_max_nodes: 1
rate_limit: {max_actions: 100, window_s: 60}
storm: {max_nodes: 50, window_s: 60, quiet_s: 120}
probation_s: 60
checkpoint: {ack_dir: /tmp, deadline_s: 5, on_timeout: requeue, restart_deadline_s: 30}
"""


def alert(
    node: str = "gpu-node-001",
    fault_class: str = "xid_fatal",
    action: str = "drain",
    fp: str | None = None,
    status: str = "firing",
    starts_at: str = "2026-11-29T10:00:00Z",
    **labels: str,
) -> Alert:
    lab = {
        "alertname": "GpuXidFatal",
        "severity": "critical",
        "node": node,
        "fault_class": fault_class,
        "action": action,
        **labels,
    }
    return Alert(fp or f"fp-{node}-{fault_class}", starts_at, status, lab, {"summary": "x"})


def payload(*alerts: Alert) -> bytes:
    return json.dumps(
        {
            "receiver": "gpuwarden",
            "status": alerts[0].status if alerts else "firing",
            "alerts": [
                {
                    "status": a.status,
                    "labels": dict(a.labels),
                    "annotations": dict(a.annotations),
                    "startsAt": a.starts_at,
                    "endsAt": a.ends_at or "0001-01-01T00:00:00Z",
                    "generatorURL": "",
                    "fingerprint": a.fingerprint,
                }
                for a in alerts
            ],
            "groupLabels": {},
            "commonLabels": {},
            "commonAnnotations": {},
            "externalURL": "",
            "version": "4",
            "groupKey": "{}",
            "truncatedAlerts": 0,
        }
    ).encode()


def live_policy(**changes: Any) -> Policy:
    return dataclasses.replace(policy_mod.loads(LIVE_POLICY), **changes)


def topology_file(tmp: Path, nodes: int, per_leaf: int = 8) -> Path:
    lines = ["nodes:"]
    for i in range(1, nodes + 1):
        lines.append(f"  gpu-node-{i:03d}: {{leaf: leaf-{(i - 1) // per_leaf:02d}}}")
    path = tmp / "topology.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def service(
    tmp: Path,
    policy_text: str = LIVE_POLICY,
    clock: Clock | None = None,
    runner: Runner | None = None,
    collectors: CollectorsFor | None = None,
    **settings: Any,
) -> Service:
    pol = tmp / "policy.yaml"
    pol.write_text(policy_text)
    s = Settings(policy=pol, state_db=tmp / "state.db", webhook_token=TOKEN, tick_s=0.2, **settings)
    return build(s, clock=clock or FakeClock(), runner=runner, collectors=collectors)


REPO = Path(__file__).resolve().parents[2]


def start_service(
    tmp: Path, port: int, env: dict[str, str] | None = None, *extra: str
) -> subprocess.Popen[bytes]:
    """Run ``python -m remediation`` on ``port`` with ``tmp``'s policy, state and topology."""
    env = {**(env or os.environ), "GPUWARDEN_WEBHOOK_TOKEN": TOKEN}
    topo = ["--topology", str(tmp / "topology.yaml")] if (tmp / "topology.yaml").exists() else []
    argv = [
        sys.executable,
        "-m",
        "remediation",
        "--listen",
        f"127.0.0.1:{port}",
        "--policy",
        str(tmp / "policy.yaml"),
        "--state-db",
        str(tmp / "state.db"),
        *topo,
        "--tick-s",
        "0.2",
        *extra,
    ]
    log = open(tmp / "log", "ab")  # noqa: SIM115 - the child keeps its own copy
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=log)
    log.close()
    wait_until(lambda: http_get(f"http://127.0.0.1:{port}/healthz", 0.5), 20, 0.05, "service up")
    return proc


def post_webhook(port: int, body: bytes, timeout: float = 10) -> int:
    """POST an Alertmanager payload to the service on ``port``: the HTTP status, an error
    status included; 0 when nothing answered (refused, reset, killed mid-request)."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/alertmanager", body,
                                 {"Authorization": f"Bearer {TOKEN}",
                                  "Content-Type": "application/json"})  # fmt: skip
    return get_status(req, timeout)


def get_status(req: str | urllib.request.Request, timeout: float = 5) -> int:
    """The HTTP status of a request (a URL: a GET), an error status included; 0 when
    nothing answered."""
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0
