"""The ledger's out-of-service arithmetic on random timelines: whole-node and one-GPU
outages of one node, overlapping or not, some never returned. For every GPU, exposure +
GPU-hours out of service = its wall-clock hours, on both journal paths (Prometheus presence
and the service's known nodes), and the capacity charged is each GPU-hour out once.

Times are whole hours, so an hour-by-hour count is exact and independent of outages.py."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accounting import outages
from accounting.costs import incident_costs
from accounting.model import Exposure, Incident
from accounting.units import node_units
from accounting.window import Window

H = 3600.0
NODE, GPUS, HOURS = "n1", 4, 48
OTHER = "n2"  # a node with no outage: its exposure is untouched

outage = st.tuples(
    st.one_of(st.none(), st.integers(0, GPUS - 1)),  # None: the whole node, else that GPU
    st.integers(0, HOURS - 1),  # mitigated (hour)
    st.one_of(st.none(), st.integers(0, HOURS)),  # hours out (None: never returned)
)


def _incidents(drawn: list[tuple[int | None, int, int | None]]) -> list[Incident]:
    out = []
    for i, (gpu, start, length) in enumerate(drawn):
        returned = None if length is None else float(min(HOURS, start + length)) * H
        one = gpu is not None
        out.append(
            Incident(
                id=f"i{i}",
                node=NODE,
                gpu=str(gpu) if one else None,
                gpu_model="H100",
                component="gpu",
                fault_class="xid_fatal",
                onset=start * H,
                detected=start * H,
                mitigated=start * H,
                returned=returned,
                gpus_out=1 if one else GPUS,
            )
        )
    return out


def _out_by_hour(incidents: list[Incident]) -> dict[str, int]:
    """GPU -> hours out of service, counted hour by hour."""
    out = dict.fromkeys(map(str, range(GPUS)), 0)
    for hour in range(HOURS):
        for gpu in _down(incidents, hour * H):
            out[gpu] += 1
    return out


def _down(incidents: list[Incident], t: float) -> set[str]:
    """The GPUs out of service at ``t`` (a one-GPU outage names its GPU)."""
    down: set[str] = set()
    for inc in incidents:
        end = float("inf") if inc.returned is None else inc.returned
        if inc.mitigated is not None and inc.mitigated <= t < end:
            one = inc.gpus_out == 1 and inc.gpu is not None
            down |= {str(inc.gpu)} if one else set(map(str, range(GPUS)))
    return down


def _hours_all_out(incidents: list[Incident]) -> int:
    return sum(
        1 for hour in range(HOURS) if _down(incidents, hour * H) == set(map(str, range(GPUS)))
    )


def _hours(rows: list[Exposure], gpu: str, until: float) -> float:
    return (
        sum(
            (until if r.end is None else r.end) - r.start
            for r in rows
            if r.node == NODE and r.gpu == gpu
        )
        / H
    )


EXAMPLES = int(os.environ.get("GPUWARDEN_SOAK_EXAMPLES", "200"))


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(outage, max_size=6))
def test_exposure_and_out_of_service_hours_add_up_to_wall_clock_for_every_gpu(
    drawn: list[tuple[int | None, int, int | None]],
) -> None:
    incidents = _incidents(drawn)
    end = HOURS * H
    out = _out_by_hour(incidents)
    known = outages.fleet_exposure([NODE, OTHER], incidents, 0.0, end, gpus_per_node=GPUS)
    presence = [
        Exposure(f"{node}/{g}", node, str(g), "H100", 0.0, None)
        for node in (NODE, OTHER)
        for g in range(GPUS)
    ]
    seen = outages.in_service(presence, incidents)
    for gpu, hours_out in out.items():
        assert _hours(known, gpu, end) + hours_out == HOURS
        assert _hours(seen, gpu, end) + hours_out == HOURS
    for rows in (known, seen):
        other = [r for r in rows if r.node == OTHER]
        assert sum((end if r.end is None else r.end) - r.start for r in other) == GPUS * end
    # the node (no node rows: the union of its GPUs' rows, docs/accounting.md) is in service
    # while one of its GPUs is: a one-GPU outage leaves it in service
    node_hours = sum(u.hours(Window(0.0, end)) for u in node_units(seen) if u.node == NODE)
    assert node_hours == HOURS - _hours_all_out(incidents)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(outage, max_size=6), st.integers(0, HOURS - 1), st.integers(1, HOURS))
def test_capacity_lost_is_each_gpu_hour_out_of_service_once(
    drawn: list[tuple[int | None, int, int | None]], since: int, span: int
) -> None:
    incidents = _incidents(drawn)
    whole = incident_costs(incidents, Window(0.0, HOURS * H))
    assert all(c.capacity_h >= 0 for c in whole)
    assert sum(c.capacity_h for c in whole) == pytest.approx(sum(_out_by_hour(incidents).values()))
    # a narrower window clips each incident's charge, never moves it to another incident
    window = Window(since * H, min(HOURS, since + span) * H)
    narrow = {c.incident.id: c.capacity_h for c in incident_costs(incidents, window)}
    for cost in whole:
        if cost.incident.id in narrow:
            assert narrow[cost.incident.id] <= cost.capacity_h + 1e-9
