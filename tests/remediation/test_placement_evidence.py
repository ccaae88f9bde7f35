"""Unusable numbers in an avoid alert's evidence (what the shipped rule's
humanizePercentage renders for a NaN, an infinite group size) are ignored, score 0, never an
internal error; and a displacement is journaled or not made."""

from __future__ import annotations

import math
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from remediation.placement.manager import evidence_of, score_of
from tests.remediation.test_placement_engine import avoid, decisions, send, svc_for


def with_evidence(a: Any, **ann: str) -> Any:
    return type(a)(a.fingerprint, a.starts_at, a.status, a.labels, {**a.annotations, **ann})


@pytest.mark.parametrize(
    "ann",
    [
        {"peer_percentile": "NaN%"},
        {"group_size": "+Inf"},
        {"group_size": "NaN", "value": "-Inf", "peer_percentile": "+Inf%"},
        {"score": "NaN"},
        {"score": "+Inf"},
    ],
)
def test_unusable_numbers_in_avoid_evidence_are_ignored_and_the_node_is_de_preferred(
    tmp_path: Path, ann: dict[str, str]
) -> None:
    svc = svc_for(tmp_path)
    send(svc, with_evidence(avoid("gpu-node-004"), **ann))
    [d] = decisions(svc, "avoid")
    assert (d["verdict"], d["guard"]) == ("allow", "placement"), d["reason"]
    [row] = svc.engine.placement.listing()  # type: ignore[union-attr]
    for k in ann:
        assert k not in row["evidence"], row["evidence"]  # ignored, not a made-up number


def test_a_nan_or_infinite_score_is_zero() -> None:
    for raw in ("NaN%", "nan", "+Inf", "-Inf", "Inf%", "x", "99X"):
        a = with_evidence(avoid("gpu-node-004"), peer_percentile=raw)
        assert score_of(a) == 0.0
        assert "peer_percentile" not in evidence_of(a)
        assert score_of(with_evidence(avoid("gpu-node-004"), score=raw)) == 0.0
    a = with_evidence(avoid("gpu-node-004"), peer_percentile="99.5%", group_size="20.0")
    assert evidence_of(a)["peer_percentile"] == 99.5 and evidence_of(a)["group_size"] == 20
    assert all(math.isfinite(v) for v in (score_of(a), evidence_of(a)["value"]))


@pytest.mark.parametrize("score", ["NaN", "+Inf", "9"])
def test_an_avoid_with_unusable_evidence_never_displaces_a_tier_without_a_record(
    tmp_path: Path, score: str
) -> None:
    svc = svc_for(tmp_path)  # 20 nodes: 2 tiers allowed
    send(svc, avoid("gpu-node-001", score="1"), avoid("gpu-node-002", score="2"))
    bad = with_evidence(avoid("gpu-node-003"), peer_percentile="NaN%", group_size="+Inf",
                        score=score)  # fmt: skip
    svc.journal.accept([bad], svc.clock.now())
    for _, a in svc.journal.todo():  # as the worker does: a bug is recorded, never lost
        try:
            svc.engine.decide(a)
        except Exception as e:
            svc.engine.record_error(a, e)
    mine = svc.journal.rows("SELECT * FROM decisions WHERE node='gpu-node-003'")
    assert mine and all(d["guard"] != "error" for d in mine), mine
    held = {r["node"] for r in svc.engine.placement.listing()}  # type: ignore[union-attr]
    ended = held ^ {"gpu-node-001", "gpu-node-002", "gpu-node-003"}
    recorded = {d["node"] for d in decisions(svc, "placement_displace")}
    assert ended <= recorded | {"gpu-node-003"}, (held, recorded)


def test_a_displacement_whose_new_tier_cannot_be_stored_ends_no_tier(tmp_path: Path) -> None:
    svc = svc_for(tmp_path)
    send(svc, avoid("gpu-node-001", score="1"))
    store = svc.engine.placement.store  # type: ignore[union-attr]
    [old] = store.entries()
    broken = replace(old, node="gpu-node-003", score=math.nan)  # NOT NULL: the put fails
    with pytest.raises(sqlite3.IntegrityError):
        store.displace("gpu-node-001", broken, "displaced by gpu-node-003")
    assert [e.node for e in store.entries()] == ["gpu-node-001"]
    open_episodes = svc.journal.rows("SELECT * FROM placement_history WHERE ended_at IS NULL")
    assert [r["node"] for r in open_episodes] == ["gpu-node-001"]
