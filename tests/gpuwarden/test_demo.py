"""`gpuwarden demo` starts the stack, tells its story, and stops everything it started."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from gpuwarden.demo import build_parser, main
from gpuwarden.processes import free_port_block
from tests.realcomp import require_binary


def test_the_built_in_story_needs_a_fleet_that_has_its_nodes(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["--nodes", "8"]) == 2
    assert "--nodes must be >= 21" in capsys.readouterr().err


def test_help_documents_nodes_duration_scenario_and_ports() -> None:
    text = build_parser().format_help()
    for flag in ("--nodes", "--duration", "--scenario", "--story", "--base-port"):
        assert flag in text


def test_a_short_demo_through_prometheus_injects_its_story_finds_and_decides_and_cleans_up(
    tmp_path: Path,
) -> None:
    for b in ("prometheus", "prometheus-alertmanager"):
        require_binary(b)
    story = tmp_path / "story.yaml"
    story.write_text(
        "- {at: 5, node: gpu-node-002, kind: xid, target: gpu0, "
        "parameters: {xid: 79}, note: a GPU falls off the bus}\n"
    )
    base = free_port_block(5)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuwarden",
            "demo",
            "--nodes",
            "4",
            "--duration",
            "35",
            "--story",
            str(story),
            "--no-slurm",
            "--base-port",
            str(base),
            "--workdir",
            str(tmp_path / "demo"),
            "--scrape-interval",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "STORY    gpu-node-002   a GPU falls off the bus" in out
    assert "INJECT   gpu-node-002   xid on gpu0 xid=79 (fault)" in out
    assert "(real Prometheus + Alertmanager)" in out  # the analyzer reads Prometheus
    # ... and finds the lost GPU there (xid_fatal too, unless the XID counter's first sample
    # sits on the stack's first grid point: a first sample is a baseline, never an event)
    assert any(f"FINDING  gpu-node-002   {k} gpu=0" in out for k in ("gpu_lost", "xid_fatal"))
    assert "DECISION gpu-node-002" in out
    assert "stopping everything the demo started" in out
    row = next(ln for ln in out.splitlines() if ln.startswith("gpu-node-002 xid gpu0"))
    assert "not detected" not in row and "no decision" not in row  # the closing table
    for port in range(base, base + 5):  # simulator, analyzer, remediation, Prometheus, AM
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is fine
            s.bind(("127.0.0.1", port))  # a process still listening is not


def test_a_decision_on_an_already_quarantined_node_is_shown_as_a_no_op_and_the_table_has_each_fault() -> (
    None
):
    from gpuwarden.demo import Step, Tally
    from gpuwarden.timeline import Event

    tally = Tally()
    xid = Step(10, "n1", "xid", "gpu2", {"xid": 79}, "")
    app = Step(20, "n2", "app_xid", "gpu1", {"xid": 13}, "")
    tally.injected(xid, "n1", 10.0)
    tally.injected(app, "n2", 20.0)
    tally.see(Event(14.0, "FINDING", "n1", "xid_fatal gpu=2 severity=critical action=drain"))
    first = tally.see(Event(15.0, "DECISION", "n1", "drain -> ALLOW (guard ok: fine)"))
    tally.see(Event(16.0, "NODE", "n1", "now quarantined"))
    again = tally.see(Event(30.0, "DECISION", "n1", "checkpoint_restart -> ALLOW (guard ok: x)"))
    assert "no-op" not in first.text
    assert again.text.endswith("[no-op: node already quarantined]")
    table = "\n".join(tally.table())
    assert "n1 xid gpu2" in table and "4s  finding xid_fatal gpu=2 / drain -> ALLOW" in table
    assert "n2 app_xid gpu1" in table and "not detected" in table
