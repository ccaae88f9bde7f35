"""The edges of checkpoint storage health: what a storage alert's decision says (the
on-call engineer reads it in the journal and the API), the root mount, node-scoped alerts,
the text of a held-back checkpoint, and a journal value that cannot be read."""

from __future__ import annotations

from pathlib import Path

from remediation import storage
from remediation.journal import Journal
from remediation.storage import StorageHealth

CLUSTER = {"alertname": "CheckpointStorageDegraded", "fault_class": "storage",
           "mount": "/mnt/ckpt", "scope": "cluster"}  # fmt: skip
PROBE = {"alertname": "CheckpointStorageProbeFailing", "fault_class": "storage",
         "mount": "/mnt/ckpt", "node": "n1"}  # fmt: skip


def test_a_storage_alerts_decision_says_what_is_held_back_and_that_no_node_drains() -> None:
    assert storage.alert_reason("firing", CLUSTER, 7) == (
        "storage /mnt/ckpt unhealthy (cluster incident #7): checkpoint requests into it are "
        "held back; a shared storage fault drains no node"
    )
    assert storage.alert_reason("firing", PROBE, None) == (
        "storage /mnt/ckpt unhealthy on one node (no incident): checkpoint requests into it "
        "are held back; a shared storage fault drains no node"
    )
    assert storage.alert_reason("firing", {**PROBE, "scope": "cluster"}, 3).startswith(
        "storage /mnt/ckpt unhealthy (cluster incident #3)"
    )
    no_node = {k: v for k, v in PROBE.items() if k != "node"}
    assert storage.alert_reason("firing", no_node, 2).startswith("storage /mnt/ckpt unhealthy (")


def test_a_resolve_and_a_mountless_alert_say_so() -> None:
    assert storage.alert_reason("resolved", CLUSTER, 7) == (
        "storage /mnt/ckpt healthy again (cluster incident #7 closed): checkpoints into it allowed"
    )
    assert storage.alert_reason("resolved", PROBE, None) == (
        "storage /mnt/ckpt healthy again (no incident closed): checkpoints into it allowed"
    )
    mountless = {k: v for k, v in CLUSTER.items() if k != "mount"}
    for status in ("firing", "resolved"):
        assert storage.alert_reason(status, mountless, 1) == (
            "storage alert without a mount label: recorded; no checkpoint is held back"
        )


def test_a_root_mount_covers_every_path_and_a_sibling_is_never_below_another() -> None:
    h = StorageHealth()
    h.observe("firing", {**CLUSTER, "mount": "/"}, "root fs full")
    assert (
        h.checkpoint_blocked("/mnt/ckpt")
        == "storage / unhealthy (CheckpointStorageDegraded: root fs full)"
    )
    h = StorageHealth()
    h.observe("firing", {**CLUSTER, "mount": "/mnt/ck"})
    assert h.checkpoint_blocked("/mnt/ckpt") is None
    assert h.checkpoint_blocked("/mnt/ck/a/b") is not None
    assert h.checkpoint_blocked("/mnt") is None  # above the unhealthy mount, not below it


def test_the_reason_names_every_alert_about_the_mount_and_leaves_out_empty_summaries() -> None:
    h = StorageHealth()
    h.observe("firing", CLUSTER, "")
    assert (
        h.checkpoint_blocked("/mnt/ckpt")
        == "storage /mnt/ckpt unhealthy (CheckpointStorageDegraded)"
    )
    h.observe("firing", {**CLUSTER, "alertname": "CheckpointStorageSlow"}, "p99 9 s")
    assert h.checkpoint_blocked("/mnt/ckpt") == (
        "storage /mnt/ckpt unhealthy (CheckpointStorageDegraded; CheckpointStorageSlow: p99 9 s)"
    )
    h.observe("resolved", CLUSTER)
    assert h.checkpoint_blocked("/mnt/ckpt") == (
        "storage /mnt/ckpt unhealthy (CheckpointStorageSlow: p99 9 s)"
    )
    h.observe("firing", {**CLUSTER, "alertname": ""}, "x")  # an empty name is a name too
    assert "storage alert" not in (h.checkpoint_blocked("/mnt/ckpt") or "")
    h.observe("firing", {k: v for k, v in CLUSTER.items() if k != "alertname"}, "y")
    assert "storage alert: y" in (h.checkpoint_blocked("/mnt/ckpt") or "")


def test_a_node_alert_blocks_only_jobs_on_that_node_and_clears_without_a_trace() -> None:
    h = StorageHealth()
    assert h.observe("firing", PROBE, "stat hangs")
    assert h.unhealthy == {} and h.unhealthy_mount("/mnt/ckpt", "n1")
    assert not h.unhealthy_mount("/mnt/ckpt") and not h.unhealthy_mount("/mnt/ckpt", "n2")
    assert h.checkpoint_blocked("/mnt/ckpt") is None
    assert h.checkpoint_blocked("/mnt/ckpt", ["n2", "n3"]) is None
    assert h.checkpoint_blocked("/mnt/ckpt", ["n2", "n1", "n1"]) == (
        "storage /mnt/ckpt unhealthy on n1 (CheckpointStorageProbeFailing: stat hangs)"
    )
    h.observe("firing", {**PROBE, "node": "n2", "mount": "/scratch"})
    h.observe("resolved", PROBE)
    assert h.on_node == {"n2": {"/scratch": {"CheckpointStorageProbeFailing": ""}}}
    h.observe("resolved", {**PROBE, "node": "n2", "mount": "/scratch"})
    assert h.on_node == {} and h.to_json() == '{"cluster": {}, "nodes": {}}'


def test_a_cluster_alert_is_reported_before_a_node_alert_about_the_same_mount() -> None:
    h = StorageHealth()
    h.observe("firing", PROBE, "probe")
    h.observe("firing", CLUSTER, "fleet")
    assert h.checkpoint_blocked("/mnt/ckpt", ["n1"]) == (
        "storage /mnt/ckpt unhealthy (CheckpointStorageDegraded: fleet)"
    )


def test_a_storage_alert_without_a_mount_is_taken_and_changes_nothing() -> None:
    h = StorageHealth()
    assert h.observe("firing", {**CLUSTER, "mount": ""})
    assert h.observe("firing", {k: v for k, v in CLUSTER.items() if k != "mount"})
    assert h.unhealthy == {} and h.on_node == {}
    assert not h.observe("firing", {**CLUSTER, "fault_class": "nvlink"})
    assert not h.observe("firing", {k: v for k, v in CLUSTER.items() if k != "fault_class"})
    assert h.unhealthy == {}


def test_the_state_round_trips_through_the_journal_and_a_bad_value_reads_as_healthy(
    tmp_path: Path,
) -> None:
    kv = Journal(tmp_path / "state.db")
    assert storage.held_back(kv, "/mnt/ckpt", ["n1"]) is None
    h = storage.load(kv)
    h.observe("firing", CLUSTER, "fleet")
    h.observe("firing", PROBE, "probe")
    storage.save(kv, h)
    again = storage.load(kv)
    assert again.unhealthy == h.unhealthy and again.on_node == h.on_node
    assert storage.held_back(kv, "/mnt/ckpt/job", []) == (
        "checkpoint held back: storage /mnt/ckpt unhealthy (CheckpointStorageDegraded: fleet)"
    )
    assert storage.held_back(kv, "", []) is not None  # no mount named: any unhealthy blocks
    assert storage.held_back(kv, "/other", ["n1"]) is None
    again.observe("resolved", CLUSTER)
    again.observe("resolved", PROBE)
    storage.save(kv, again)
    assert kv.get(storage.KV_KEY) is None  # nothing unhealthy: nothing stored
    for bad in ("not json", "[1, 2]", "null", '{"cluster": null, "nodes": null}', ""):
        kv.put(storage.KV_KEY, bad)
        assert storage.load(kv).unhealthy == {} and storage.load(kv).on_node == {}
        assert storage.held_back(kv, None, ["n1"]) is None


def test_a_mount_label_with_a_leading_double_slash_or_a_trailing_x_is_still_its_mount() -> None:
    assert storage.normalize("//mnt/ckpt") == "/mnt/ckpt"  # normpath alone keeps a leading //
    h = StorageHealth()
    h.observe("firing", {**CLUSTER, "mount": "/mnt/ckpt-X"}, "MAX")
    assert h.checkpoint_blocked("/mnt/ckpt-X/job") == (
        "storage /mnt/ckpt-X unhealthy (CheckpointStorageDegraded: MAX)"
    )


def test_the_scope_label_makes_an_alert_with_a_node_cluster_wide_and_no_node_is_cluster_too() -> (
    None
):
    h = StorageHealth()
    h.observe("firing", {**CLUSTER, "node": "n1"})
    assert h.unhealthy_mount("/mnt/ckpt") and h.on_node == {}
    h = StorageHealth()
    h.observe("firing", {k: v for k, v in PROBE.items() if k != "node"})
    assert h.unhealthy_mount("/mnt/ckpt") and h.on_node == {}
    h = StorageHealth()
    h.observe("firing", {**PROBE, "scope": "node"})
    assert not h.unhealthy_mount("/mnt/ckpt") and h.unhealthy_mount("/mnt/ckpt", "n1")


def test_a_resolve_of_an_alert_never_seen_is_taken_and_changes_nothing() -> None:
    h = StorageHealth()
    assert h.observe("resolved", CLUSTER) and h.observe("resolved", PROBE)
    assert h.unhealthy == {} and h.on_node == {}
    h.observe("firing", CLUSTER)
    assert h.observe("resolved", {**CLUSTER, "alertname": "CheckpointStorageSlow"})
    assert h.unhealthy_mount("/mnt/ckpt")


def test_the_stored_state_is_the_same_text_whatever_order_the_alerts_came_in() -> None:
    one, two = StorageHealth(), StorageHealth()
    for h, order in ((one, ("/b", "/a")), (two, ("/a", "/b"))):
        for m in order:
            h.observe("firing", {**CLUSTER, "mount": m})
            h.observe("firing", {**PROBE, "mount": m, "node": f"n{m[-1]}"})
    assert one.to_json() == two.to_json()
    assert (
        one.to_json().index('"cluster"') < one.to_json().index('"/a"') < one.to_json().index('"/b"')
    )
