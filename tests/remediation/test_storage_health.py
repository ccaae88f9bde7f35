"""Remediation learns checkpoint storage health from the storage alerts and never asks for a
checkpoint into an unhealthy mount."""

from __future__ import annotations

from remediation.storage import StorageHealth

DEGRADED = {"alertname": "CheckpointStorageDegraded", "fault_class": "storage",
            "mount": "/mnt/ckpt", "scope": "cluster", "action": "notify"}  # fmt: skip


def test_a_firing_storage_alert_blocks_checkpoints_into_that_mount_and_below() -> None:
    h = StorageHealth()
    assert h.observe("firing", DEGRADED, "fails on 5 nodes")
    why = h.checkpoint_blocked("/mnt/ckpt/job-17")
    assert why is not None and "/mnt/ckpt unhealthy" in why and "fails on 5 nodes" in why
    assert h.checkpoint_blocked("/mnt/ckpt") is not None
    assert h.checkpoint_blocked("/mnt/ckpt2") is None  # a prefix of the name is not below it
    assert h.checkpoint_blocked("/lustre") is None


def test_the_resolve_clears_it() -> None:
    h = StorageHealth()
    h.observe("firing", DEGRADED)
    h.observe("resolved", DEGRADED)
    assert h.checkpoint_blocked("/mnt/ckpt") is None


def test_without_a_named_mount_any_unhealthy_storage_blocks() -> None:
    h = StorageHealth()
    assert h.checkpoint_blocked(None) is None
    h.observe("firing", DEGRADED)
    assert h.checkpoint_blocked(None) is not None


def test_other_alerts_are_not_storage_alerts() -> None:
    h = StorageHealth()
    assert not h.observe("firing", {"alertname": "GpuLost", "fault_class": "gpu_lost",
                                    "node": "n1", "mount": "/x"})  # fmt: skip
    assert h.unhealthy == {}


def test_mount_labels_are_one_mount_whatever_their_spelling() -> None:
    from remediation.storage import normalize

    assert {normalize(m) for m in ("/mnt/ckpt/", "/mnt//ckpt", "/mnt/./ckpt", "/mnt/ckpt")} == {
        "/mnt/ckpt"
    }
    assert normalize("/") == "/" and normalize("") == ""
    h = StorageHealth()
    h.observe("firing", {**DEGRADED, "mount": "/mnt/ckpt/"})
    assert h.checkpoint_blocked("/mnt/ckpt") is not None  # the policy's spelling
    assert h.checkpoint_blocked("/mnt//ckpt/job-1") is not None
    assert h.unhealthy_mount("/mnt/ckpt")
    h.observe("resolved", {**DEGRADED, "mount": "/mnt/./ckpt"})  # its resolve, spelled otherwise
    assert h.checkpoint_blocked("/mnt/ckpt") is None


def test_a_journal_written_with_unnormalized_mounts_is_read_normalized() -> None:
    stored = '{"cluster": {"/mnt/ckpt/": {"A": "x"}, "/mnt/ckpt": {"B": "y"}}, "nodes": {}}'
    h = StorageHealth.from_json(stored)
    assert h.unhealthy == {"/mnt/ckpt": {"A": "x", "B": "y"}}
