"""What the real exporter collectors make of a simulated node, fault by fault."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter import catalog as c
from exporter.assemble import collectors_for
from exporter.collection import CollectionLoop
from exporter.sources.xid_lines import XidLineStream, split_envelope
from simulator import single_node
from simulator.effects import Event
from simulator.kernel_log import kmsg_lines
from simulator.node_view import NodeView
from tests.simulator.helpers import busy_fleet

Body = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Body:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def value(body: Body, name: str, **labels: str) -> float:
    hits = [v for (n, lab), v in body.items() if n == name and set(labels.items()) <= set(lab)]
    assert len(hits) == 1, (name, labels, len(hits))
    return hits[0]


def render_after(kind: str, target: str, params: dict[str, object], until: float = 900) -> tuple[
    Body, Body
]:  # fmt: skip
    """(exporter output before the fault, after it) for node 2 of a busy fleet."""
    fleet = busy_fleet(4)
    view = NodeView("gpu-node-002", 1)
    loop = CollectionLoop(collectors_for(view.name, view.nvml, view.sysfs, view.kmsg),
                          view.name, source="simulated", interval=15)  # fmt: skip
    out = []
    fleet.inject(kind, "gpu-node-002", target, params, onset=600)
    for t in (585.0, until):
        for frame in fleet.run(t, 15):
            view.refresh(frame, fleet.node_events.get(1, []))
        out.append(parse(loop.run_once().body.decode()))
    return out[0], out[1]


def _xid_79(b: Body, a: Body) -> None:
    assert value(a, c.GPU_XID_ERRORS.name, gpu="2", xid="79") == 1
    assert value(a, c.GPU_UP.name, gpu="2", reason="gpu_lost") == 0


def _xid_48(b: Body, a: Body) -> None:
    assert value(a, c.GPU_XID_ERRORS.name, gpu="2", xid="48") == 1
    assert value(a, c.GPU_XID_ERRORS.name, gpu="2", xid="63") == 1
    ecc = {"gpu": "2", "error_type": "uncorrected", "counter_type": "volatile"}
    assert (
        value(b, c.GPU_ECC_ERRORS.name, **ecc) == 0 and value(a, c.GPU_ECC_ERRORS.name, **ecc) == 1
    )
    assert value(a, c.GPU_ROW_REMAP_PENDING.name, gpu="2") == 1


def _xid_119(b: Body, a: Body) -> None:
    assert value(a, c.GPU_XID_ERRORS.name, gpu="2", xid="119") == 1
    assert value(a, c.GPU_RECOVERY_ACTION.name, gpu="2") == 2


def _app_xid(b: Body, a: Body) -> None:
    assert value(a, c.GPU_XID_ERRORS.name, gpu="4", xid="31") == 1
    assert value(a, c.GPU_UP.name, gpu="4") == 1


def _nvlink_down(b: Body, a: Body) -> None:
    assert value(a, c.GPU_XID_ERRORS.name, gpu="3", xid="74") == 1
    assert value(b, c.NVLINK_UP.name, gpu="3", link="7") == 1
    assert value(a, c.NVLINK_UP.name, gpu="3", link="7") == 0


def _ib_port_down(b: Body, a: Body) -> None:
    assert value(a, c.IB_PORT_STATE.name, device="mlx5_2") == 1
    assert value(a, c.IB_PORT_PHYS_STATE.name, device="mlx5_2") == 2
    assert value(a, c.IB_COUNTER.name, device="mlx5_2", counter="link_downed") == 1


def _ib_rate(b: Body, a: Body) -> None:
    assert value(b, c.IB_PORT_RATE.name, device="mlx5_6") == 50e9
    assert value(a, c.IB_PORT_RATE.name, device="mlx5_6") == 25e9


def _pcie(b: Body, a: Body) -> None:
    assert value(a, c.GPU_PCIE_GENERATION.name, gpu="1") == 3
    assert value(a, c.GPU_PCIE_GENERATION_MAX.name, gpu="1") == 5


def _thermal(b: Body, a: Body) -> None:
    reason = {"gpu": "0", "reason": "hw_thermal_slowdown"}
    assert value(b, c.GPU_THROTTLE.name, **reason) == 0
    assert value(a, c.GPU_THROTTLE.name, **reason) == 1


def _remap_failure(b: Body, a: Body) -> None:
    assert value(a, c.GPU_XID_ERRORS.name, gpu="6", xid="64") == 1
    assert value(a, c.GPU_ROW_REMAP_FAILED.name, gpu="6") == 1


CASES: dict[str, tuple[str, str, dict[str, object], Callable[[Body, Body], None]]] = {
    "xid_79": ("xid", "gpu2", {"xid": 79}, _xid_79),
    "xid_48": ("xid", "gpu2", {"xid": 48}, _xid_48),
    "xid_119": ("xid", "gpu2", {"xid": 119}, _xid_119),
    "app_xid": ("app_xid", "gpu4", {"xid": 31}, _app_xid),
    "nvlink_down": ("nvlink_down", "gpu3/7", {}, _nvlink_down),
    "ib_port_down": ("ib_port_down", "mlx5_2/1", {}, _ib_port_down),
    "ib_rate_downgrade": ("ib_rate_downgrade", "mlx5_6/1", {}, _ib_rate),
    "pcie_downgrade": ("pcie_downgrade", "gpu1", {"generation": 3}, _pcie),
    "thermal_throttle": ("thermal_throttle", "gpu0", {}, _thermal),
    "row_remap_failure": ("row_remap_failure", "gpu6", {}, _remap_failure),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_fault_reaches_the_exporter_output_through_the_real_collectors(case: str) -> None:
    kind, target, params, check = CASES[case]
    before, after = render_after(kind, target, params)
    check(before, after)


def test_gpu_fallen_off_the_bus_is_counted_as_79_from_the_bus_message() -> None:
    _, after = render_after("gpu_fallen_off_bus", "gpu7", {})
    assert value(after, c.GPU_XID_ERRORS.name, gpu="7", xid="79") == 1
    assert value(after, c.GPU_UP.name, gpu="7") == 0


def test_straggler_shows_lower_clock_and_power_than_the_node_peers() -> None:
    _, after = render_after("straggler", "gpu5", {"slowdown": 0.25})
    slow = value(after, c.GPU_SM_CLOCK.name, gpu="5")
    assert slow == round(1980 * 0.75) * 1e6 < value(after, c.GPU_SM_CLOCK.name, gpu="4")
    assert value(after, c.GPU_POWER.name, gpu="5") < value(after, c.GPU_POWER.name, gpu="4")


@pytest.mark.parametrize(
    ("xid", "text"), [(79, "xid"), (48, "xid"), (63, "xid"), (64, "xid"), (95, "xid"),
                      (119, "xid"), (13, "app"), (31, "app"), (43, "app"), (74, "nvlink:3"),
                      (79, "fallen_off_bus")]
)  # fmt: skip
def test_every_kernel_log_line_parses_back_to_its_xid_and_gpu(xid: int, text: str) -> None:
    stream = XidLineStream()
    events = [
        ev
        for line in kmsg_lines(Event(12.5, 0, 6, xid, text), seq=7)
        for ev in stream.feed(line).events
    ]
    assert [(e.pci_key, e.xid) for e in events] == [("0000:ba:00", xid)]
    assert split_envelope(kmsg_lines(Event(12.5, 0, 6, xid, text), 7)[0])[0] == 12.5


def test_single_node_advances_with_the_wall_clock_and_feeds_the_collectors() -> None:
    sources = single_node("host-a", seed=5)
    wall = [1_800_000_000.0]
    loop = CollectionLoop(
        collectors_for("host-a", sources.nvml, sources.sysfs, sources.kmsg),
        "host-a",
        source="simulated",
        interval=5,
        before_cycle=sources.advance,
        wall=lambda: wall[0],
    )
    loop.run_once()  # the first cycle fixes the origin
    wall[0] += 600
    loop.run_once()
    assert sources.fleet.t == 600.0
    sources.fleet.inject("xid", sources.fleet.nodes[0], "gpu3", {"xid": 79})
    wall[0] += 15
    body = parse(loop.run_once().body.decode())
    assert value(body, c.GPU_XID_ERRORS.name, gpu="3", xid="79") == 1
    assert value(body, c.GPU_UP.name, gpu="3") == 0
    assert len([k for k in body if k[0] == c.IB_PORT_STATE.name]) == 8
    assert value(body, c.GPU_UP.name, gpu="0", node="host-a") == 1
