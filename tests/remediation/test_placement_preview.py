"""Dry-run placement (the shipped default) journals a preview once per change, as the live
path journals a change once, never a row per tick."""

from __future__ import annotations

from pathlib import Path

from remediation.placement.slurm import SlurmPlacement
from remediation.service import Service
from tests.remediation.test_placement_engine import (
    WeightSlurm,
    avoid,
    clock,
    decisions,
    send,
    svc_for,
)

TICKS = 500  # 500 ticks of 5 s: ~42 minutes


def placement_rows(svc: Service) -> list[tuple[str, str, str]]:
    return [
        (d["node"], d["action"], d["reason"])
        for d in svc.journal.rows(
            "SELECT * FROM decisions WHERE action LIKE 'placement_%' ORDER BY id"
        )
    ]


def ticks(svc: Service, n: int = TICKS) -> None:
    for _ in range(n):
        clock(svc).advance(5)
        svc.engine.tick()


def test_a_dry_run_de_preferred_node_journals_its_preview_once_not_every_tick(
    tmp_path: Path,
) -> None:
    svc = svc_for(tmp_path)  # no scheduler: dry-run, recorded only
    assert svc.engine.placement is not None and svc.engine.placement.dry_run
    send(svc, avoid("gpu-node-004"))
    ticks(svc)
    assert placement_rows(svc) == [
        ("gpu-node-004", "placement_apply", "dry-run: would mark marginal")
    ]


def test_a_dry_run_slurm_preview_is_journaled_once_per_change(tmp_path: Path) -> None:
    svc = svc_for(tmp_path)
    fake = WeightSlurm([f"gpu-node-{i:03d}" for i in range(1, 21)])
    p = svc.engine.placement
    assert p is not None
    p.projection, p.dry_run = SlurmPlacement(fake), True
    send(svc, avoid("gpu-node-004"))
    ticks(svc)
    [apply] = decisions(svc, "placement_apply")
    assert apply["reason"].startswith("dry-run: would ") and "would would" not in apply["reason"]
    assert fake.weights["gpu-node-004"] == 1  # nothing applied
    send(svc, avoid("gpu-node-004", status="resolved"))
    clock(svc).advance(86400)
    ticks(svc)  # expired: the preview of the restore is not needed (nothing was applied)
    assert [a for _, a, _ in placement_rows(svc)] == ["placement_apply", "placement_expire"]
    send(svc, avoid("gpu-node-004", fp="fp-again", starts_at="2026-11-30T10:00:00Z"))
    ticks(svc, 20)  # a new tier: previewed once more
    assert len(decisions(svc, "placement_apply")) == 2


def test_a_restart_does_not_journal_the_same_preview_again(tmp_path: Path) -> None:
    svc = svc_for(tmp_path)
    send(svc, avoid("gpu-node-004"))
    ticks(svc, 10)
    svc.journal.close()
    again = svc_for(tmp_path)
    ticks(again, 10)
    assert len(decisions(again, "placement_apply")) == 1
