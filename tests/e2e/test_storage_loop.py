"""A hung checkpoint mount, through the real chain: simulator (every node's probe hangs) ->
Prometheus -> analyzer (one cluster storage finding, pushed to Alertmanager) -> Alertmanager
(project routes) -> remediation webhook. One cluster-level incident, zero drains; then a
fatal XID under that storage gets checkpoint_restart held back (requeue without asking).

The PromQL storage alerts wait 2 minutes (`for: 2m`, promtool-tested in alerts/tests); the
analyzer's direct push (``--alertmanager``) is the path that fits a test of seconds. Dry-run
backend: what would be done is recorded, nothing else runs.
"""

from __future__ import annotations

import shutil
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpuwarden.stack import Stack, StackOptions, start_on_free_ports
from tests.realcomp import require_binary, wait_until, world_readable_tmpdir

pytestmark = pytest.mark.real
MOUNT = "/mnt/ckpt"
SCENARIO = f"""name: storage-e2e
description: every node probes the checkpoint mount; faults come from the test
fleet: {{storage_mounts: [{MOUNT}], idle_fraction: 0.0}}
"""


def journal(stack: Stack, sql: str) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(f"file:{stack.opts.workdir / 'remediation.db'}?mode=ro", uri=True)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    for b in ("prometheus", "prometheus-alertmanager"):
        require_binary(b)
    work = world_readable_tmpdir("gpuwarden-e2e-storage-")
    (work / "scenario.yml").write_text(SCENARIO)
    s = start_on_free_ports(
        StackOptions(
            workdir=work,
            nodes=6,
            seed=2,
            scrape_interval_s=1,
            analyzer_interval_s=2,  # a pushed finding lives 3 intervals unless re-sent
            tick_s=0.5,
            time_scale=10.0,  # a probe every 30 virtual seconds is one every 3 s here
            scenario=work / "scenario.yml",
            analyzer_config={"detectors": {"storage": {"window_s": 8, "min_nodes": 3}}},
            analyzer_push=True,
            policy={
                "rules": [
                    {
                        "match": {"fault_class": "xid_fatal"},
                        # the ladder's rungs too (--check and start-up require them)
                        "allow": [
                            *("notify", "checkpoint_restart", "requeue"),
                            *("drain", "reboot", "inspect"),
                        ],
                    },
                    {"match": {}, "allow": ["notify"]},
                ],
                "checkpoint": {
                    "ack_dir": str(work),
                    "on_storage_unhealthy": "requeue",
                    "mount": MOUNT,
                },
            },
        )
    )
    try:
        yield s
    finally:
        s.stop()
        shutil.rmtree(work, ignore_errors=True)


def storage_decisions(stack: Stack) -> list[tuple[Any, ...]]:
    return journal(
        stack, "SELECT node, action, verdict, reason FROM decisions WHERE guard='storage'"
    )


def test_a_hung_mount_is_one_cluster_incident_and_drains_nothing(stack: Stack) -> None:
    time.sleep(1)  # a healthy baseline first: the mount answers on every node
    stack.inject("cluster", "storage_hung", MOUNT)
    wait_until(lambda: storage_decisions(stack), 30, 0.2, "the storage alert in remediation")
    [(node, action, verdict, reason)] = storage_decisions(stack)[:1]
    assert (node, action, verdict) == ("", "notify", "allow")
    assert f"storage {MOUNT} unhealthy" in reason and "drains no node" in reason
    incidents = journal(stack, "SELECT node, fault_class, subject, closed FROM incidents")
    assert incidents == [("", "storage", MOUNT, 0)]
    assert journal(stack, "SELECT COUNT(*) FROM decisions WHERE guard='invalid_alert'") == [(0,)]
    time.sleep(2)  # more analyzer cycles and Alertmanager deliveries: still one incident
    assert journal(stack, "SELECT COUNT(*) FROM incidents") == [(1,)]
    assert journal(stack, "SELECT COUNT(*) FROM dry_run_effects WHERE op='take_out'") == [(0,)]


def test_while_it_hangs_a_fatal_xid_gets_no_checkpoint_request(stack: Stack) -> None:
    node = stack.get_json(f"{stack.urls.simulator}/nodes")[2]["node"]
    stack.inject(node, "xid", "gpu0", xid=79)
    xid = f"SELECT action, reason FROM decisions WHERE node='{node}' AND fault_class='xid_fatal'"
    wait_until(lambda: journal(stack, xid), 30, 0.2, "a decision on the XID")
    [(action, reason)] = journal(stack, xid)[:1]
    storage = journal(stack, "SELECT reason FROM decisions WHERE guard='storage'")
    assert action == "requeue", f"{reason}; storage decisions: {storage}"
    assert reason.startswith(f"checkpoint held back: storage {MOUNT} unhealthy")
    time.sleep(1)
    assert journal(stack, "SELECT COUNT(*) FROM dry_run_effects WHERE op='checkpoint'") == [(0,)]
    taken = journal(stack, "SELECT DISTINCT node FROM dry_run_effects WHERE op='take_out'")
    assert taken in ([], [(node,)])  # only the XID's node, never one for the storage fault
