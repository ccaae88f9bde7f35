"""A soft (``avoid``) alert never holds a node out: a node drained for a hard fault goes
through probation and release once that fault resolves, whatever marginal evidence fires
beside it, and stays de-preferred by its placement tier."""

from __future__ import annotations

from pathlib import Path

from remediation.service import Service
from tests.remediation.helpers import alert
from tests.remediation.test_placement_engine import avoid, clock, decisions, send, svc_for


def drained_and_marginal(tmp: Path) -> Service:
    svc = svc_for(tmp)
    send(svc, alert("gpu-node-004"), avoid("gpu-node-004"))
    assert svc.journal.node("gpu-node-004")["state"] == "quarantined"  # type: ignore[index]
    return svc


def test_a_firing_avoid_alert_does_not_stop_probation_when_the_hard_fault_resolves(
    tmp_path: Path,
) -> None:
    svc = drained_and_marginal(tmp_path)
    send(svc, alert("gpu-node-004", status="resolved"))
    assert svc.journal.node("gpu-node-004")["state"] == "probation"  # type: ignore[index]
    [d] = decisions(svc, "probation")
    assert d["reason"] == "alert resolved; probation starts"


def test_an_avoid_firing_during_probation_does_not_block_the_release(tmp_path: Path) -> None:
    svc = svc_for(tmp_path)
    send(svc, alert("gpu-node-004"), alert("gpu-node-004", status="resolved"))
    send(svc, avoid("gpu-node-004"))  # the marginal evidence starts during probation
    clock(svc).advance(61)
    assert svc.engine.tick() == ["gpu-node-004"]
    assert svc.journal.node("gpu-node-004")["state"] == "released"  # type: ignore[index]
    [row] = svc.engine.placement.listing()  # type: ignore[union-attr]
    assert (row["node"], row["tier"]) == ("gpu-node-004", "marginal")  # still de-preferred


def test_a_node_released_after_its_hard_fault_stays_de_preferred_by_its_tier(
    tmp_path: Path,
) -> None:
    svc = drained_and_marginal(tmp_path)
    send(svc, alert("gpu-node-004", status="resolved"))
    clock(svc).advance(61)
    assert svc.engine.tick() == ["gpu-node-004"]
    [row] = svc.engine.placement.listing()  # type: ignore[union-attr]
    assert (row["node"], row["tier"], row["firing"]) == ("gpu-node-004", "marginal", True)


def test_a_hold_alert_still_holds_a_node_out_beside_an_avoid(tmp_path: Path) -> None:
    svc = drained_and_marginal(tmp_path)
    send(svc, alert("gpu-node-004", "unwatched", "hold", fp="fp-hold", alertname="NodeUnwatched"))
    send(svc, alert("gpu-node-004", status="resolved"))
    assert svc.journal.node("gpu-node-004")["state"] == "quarantined"  # type: ignore[index]
    clock(svc).advance(61)
    assert svc.engine.tick() == []


def test_once_the_hold_resolves_probation_starts_from_that_tick_and_then_releases(
    tmp_path: Path,
) -> None:
    svc = drained_and_marginal(tmp_path)
    hold = {"fp": "fp-hold", "alertname": "NodeUnwatched"}
    send(svc, alert("gpu-node-004", "unwatched", "hold", **hold))
    send(svc, alert("gpu-node-004", status="resolved"))
    clock(svc).advance(120)
    send(svc, alert("gpu-node-004", "unwatched", "hold", status="resolved", **hold))
    assert svc.engine.tick() == []
    node = svc.journal.node("gpu-node-004")
    assert node is not None and node["state"] == "probation"
    assert node["resolved_at"] == clock(svc).now()  # probation counts from this tick
    [d] = decisions(svc, "probation")[-1:]
    assert d["reason"] == "every alert resolved; probation starts"
    clock(svc).advance(30)
    assert svc.engine.tick() == []  # 30 s of a 60 s probation
    clock(svc).advance(31)
    assert svc.engine.tick() == ["gpu-node-004"]
