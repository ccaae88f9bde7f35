"""Defect 2 of issue 24, behaviourally: with each shipped policy turned on (``dry_run:
false``), a storage alert firing for the checkpoint mount and an NVLink fault that recurs
(its ladder's second rung is ``checkpoint_restart``) take the node out of service through
the storage fallback (``requeue``, no checkpoint asked for); never denied by policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.remediation import test_storage_alerts as storage_tests
from tests.remediation.helpers import alert
from tests.remediation.test_policy_fallbacks import SHIPPED
from tests.remediation.test_storage_alerts import World, storage_alert

NODE = "gpu-node-001"  # job 101 runs on it (and on gpu-node-002)


def turned_on(path: Path) -> str:
    text = path.read_text()
    assert "\ndry_run: true" in text  # what an operator flips, nothing else
    return text.replace("\ndry_run: true", "\ndry_run: false", 1)


def nvlink(status: str, starts_at: str) -> object:
    return alert(NODE, "nvlink", "drain", status=status, starts_at=starts_at,
                 alertname="GpuNvlinkDown")  # fmt: skip


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_a_recurring_nvlink_fault_with_unhealthy_checkpoint_storage_takes_the_node_out_by_the_fallback(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a fleet the shipped budgets allow one node of (5 % of 40)
    monkeypatch.setattr(storage_tests, "NODES", [f"gpu-node-{i:03d}" for i in range(1, 41)])
    w = World(tmp_path, turned_on(path))
    try:
        w.feed(storage_alert(mount="/mnt/ckpt"))
        first = w.feed(nvlink("firing", "2026-11-29T10:00:00Z"))  # type: ignore[arg-type]
        assert (first["verdict"], first["action"]) == ("allow", "drain"), first
        w.clock.advance(60)
        w.feed(nvlink("resolved", "2026-11-29T10:00:00Z"))  # type: ignore[arg-type]
        w.clock.advance(600)  # past the incident window: a recurrence, one rung up
        again = w.feed(nvlink("firing", "2026-11-29T10:11:00Z"))  # type: ignore[arg-type]
        decisions = w.journal.rows("SELECT * FROM decisions WHERE node=? ORDER BY id", (NODE,))
        assert not [d for d in decisions if d["verdict"] == "deny" and d["guard"] == "policy"]
        assert (again["verdict"], again["action"]) == ("allow", "requeue"), again
        assert again["reason"].startswith("checkpoint held back: storage /mnt/ckpt unhealthy")
        assert w.signalled() == 0 and w.slurm.jobs["101"].restarts == 1  # no checkpoint asked
        view = w.backend.node(NODE)
        assert view is not None and view.out_of_service and view.ours
    finally:
        w.journal.close()
