"""The marginal detector: the worst 1 % of a peer group, above a floor, in two consecutive
windows (this cycle's and the one before it; the two halves of one window where no earlier
one is remembered), gets an ``avoid`` finding; a fleet-wide shift flags nobody and is one
notice; a group too small is not judged; below the floor nothing counts. Signals: NVLink and
IB error rates, a GPU a few percent slow under load, a PCIe link below its maximum now and
then, a handful of correctable row remaps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from analyzer.detectors import default_detectors
from analyzer.detectors.marginal import MarginalDetector
from analyzer.findings import CLUSTER
from analyzer.window import THROTTLE_REASONS
from exporter import catalog as c
from tests.analyzer.synth import healthy, window

NODES = 30
RATE = 0.05  # NVLink errors per second on one link: well above the 0.01/s floor


def with_rate(d: dict, node: int, rate: float, start: int = 0) -> dict:
    """Node ``node``'s first link counts ``rate`` errors per second from sample ``start``."""
    err = d["metrics"][c.NVLINK_ERRORS.name]
    steps = np.clip(np.arange(len(d["t"])) - start, 0, None)
    err[:, node, 0, 0, 0] = rate * d["step"] * steps
    return d


def test_the_worst_node_of_its_peers_above_the_floor_gets_an_avoid_finding() -> None:
    d = with_rate(healthy(NODES), 7, RATE)
    for i in range(NODES):  # a little background noise, below the floor, on everyone
        if i != 7:
            d = with_rate(d, i, 0.001 * (1 + i % 3))
    [f] = MarginalDetector().detect(window(d))
    assert (f.node, f.subject, f.kind, f.action) == ("node-07", "signal=nvlink_errors",
                                                     "marginal", "avoid")  # fmt: skip
    assert f.evidence["group_size"] == NODES and f.evidence["peer_percentile"] > 95
    assert abs(f.evidence["value"] - RATE) < 1e-6
    assert "rate(" + c.NVLINK_ERRORS.name in f.summary


def test_a_node_marginal_only_in_the_last_half_is_not_yet_flagged() -> None:
    d = with_rate(healthy(NODES), 7, RATE, start=30)  # 41 samples: starts in the second half
    assert MarginalDetector().detect(window(d)) == []


def test_a_fleet_wide_shift_flags_nobody_and_raises_one_notice() -> None:
    d = healthy(NODES)
    for i in range(NODES):
        d = with_rate(d, i, RATE * (1 + 0.1 * (i % 5)))
    found = MarginalDetector().detect(window(d))
    assert [(f.node, f.kind, f.action) for f in found] == [(CLUSTER, "fleet_shift", "notify")]


def test_below_the_absolute_floor_nothing_is_marginal_and_small_groups_are_not_judged() -> None:
    d = with_rate(healthy(NODES), 7, 0.005)
    assert MarginalDetector().detect(window(d)) == []
    d = with_rate(healthy(10), 3, RATE)
    assert MarginalDetector().detect(window(d)) == []


def test_the_default_detector_set_includes_the_marginal_detector() -> None:
    assert "marginal" in {d.name for d in default_detectors()}
    assert MarginalDetector().detect(window(healthy(NODES))) == []  # healthy: silent


def test_an_avoid_finding_pushed_to_alertmanager_carries_its_evidence() -> None:
    from analyzer.output import alertmanager_alerts

    d = with_rate(healthy(NODES), 7, RATE)
    [a] = alertmanager_alerts(MarginalDetector().detect(window(d)), 0.0, 300.0)
    assert a["labels"]["action"] == "avoid" and a["labels"]["fault_class"] == "marginal"
    ann = a["annotations"]
    assert ann["metric"] == "nvlink_errors" and ann["group_size"] == "30"
    assert ann["promql"].startswith("sum by (node) (rate(" + c.NVLINK_ERRORS.name)


# --------------------------------------------------------------------------- two windows
def later(d: dict, seconds: float = 600.0) -> dict:
    """The same arrays as the next window: it starts where ``d`` ended."""
    return {**d, "t": d["t"] + seconds}


def slow(d: dict, node: int, gpu: int, by: float, start: int = 0) -> dict:
    """GPU ``gpu`` of ``node`` runs its SM clock ``by`` (0.03: 3 %) below its peers' from
    sample ``start``, busy as they are."""
    d["metrics"][c.GPU_SM_CLOCK.name][start:, node, gpu] *= 1.0 - by
    return d


def avoids(found: list) -> list[tuple[str, str]]:
    return [(f.node, f.subject) for f in found if f.action == "avoid"]


def test_worst_in_the_previous_window_and_this_one_is_flagged_though_this_ones_first_half_was_clean() -> (
    None
):
    det = MarginalDetector()
    det.detect(window(slow(healthy(NODES), 7, 3, 0.03)))  # remembered
    # the next window: healthy for its first half, 6 % slow after: 3 % on average. The
    # halves of this window alone would not flag it; the remembered window does.
    found = det.detect(window(later(slow(healthy(NODES), 7, 3, 0.06, start=21))))
    assert avoids(found) == [("node-07", "signal=sm_clock_deficit")]
    assert (
        MarginalDetector().detect(window(later(slow(healthy(NODES), 7, 3, 0.06, start=21)))) == []
    )


def test_a_node_worst_in_only_one_of_two_consecutive_windows_is_not_flagged() -> None:
    det = MarginalDetector()
    det.detect(window(healthy(NODES)))
    assert det.detect(window(later(slow(healthy(NODES), 7, 3, 0.05)))) == []
    det = MarginalDetector()
    det.detect(window(slow(healthy(NODES), 7, 3, 0.05)))
    assert det.detect(window(later(healthy(NODES)))) == []


def test_a_window_far_from_the_last_remembered_one_is_judged_by_its_halves() -> None:
    det = MarginalDetector()
    det.detect(window(slow(healthy(NODES), 7, 3, 0.05)))
    hour_later = later(slow(healthy(NODES), 7, 3, 0.05, start=30), 3600.0)
    assert det.detect(window(hour_later)) == []  # an hour is no consecutive window
    assert avoids(det.detect(window(later(slow(healthy(NODES), 7, 3, 0.05), 3600.0)))) == [
        ("node-07", "signal=sm_clock_deficit")]  # fmt: skip


@pytest.mark.parametrize("offset", [-7.0, 5.0, 20.0])
def test_the_window_before_is_found_whatever_the_scrapes_phase(offset: float) -> None:
    """A cycle that ran a few seconds off the window boundary (a scrape's phase, a slow
    cycle) still counts as the window before: a gap or an overlap under a step."""
    det = MarginalDetector()
    det.detect(window(slow(healthy(NODES), 7, 3, 0.03)))
    d = later(slow(healthy(NODES), 7, 3, 0.06, start=21), 600.0 + offset)
    assert avoids(det.detect(window(d))) == [("node-07", "signal=sm_clock_deficit")]


# --------------------------------------------------------------------------- a slow GPU
def test_a_busy_gpu_a_few_percent_slower_than_its_peers_makes_its_node_avoided() -> None:
    [f] = MarginalDetector().detect(window(slow(healthy(NODES), 7, 3, 0.03)))
    assert (f.node, f.subject, f.action) == ("node-07", "signal=sm_clock_deficit", "avoid")
    assert f.evidence["gpu"] == 3 and abs(f.evidence["score"] - 0.03) < 1e-9
    assert abs(f.evidence["value"] - 0.97 * 1980e6) < 1.0  # what the PromQL shows: Hz
    assert "min by (node) (avg_over_time(" + c.GPU_SM_CLOCK.name in f.summary


def test_a_gpu_slower_than_its_peers_by_less_than_the_floor_is_not_marginal() -> None:
    assert MarginalDetector().detect(window(slow(healthy(NODES), 7, 3, 0.015))) == []


def test_an_idle_gpu_at_its_idle_clock_is_not_a_slow_gpu() -> None:
    d = slow(healthy(NODES), 7, 3, 0.8)  # 396 MHz: an idle clock
    d["metrics"][c.GPU_UTILIZATION.name][:, 7, 3] = 0.0
    assert MarginalDetector().detect(window(d)) == []
    d["metrics"][c.GPU_UTILIZATION.name][:, 7, 3] = 0.8  # the same clock busy: marginal
    assert avoids(MarginalDetector().detect(window(d))) == [("node-07", "signal=sm_clock_deficit")]


def test_a_gpu_an_administrator_capped_is_not_a_slow_gpu() -> None:
    d = slow(healthy(NODES), 7, 3, 0.05)
    d["metrics"][c.GPU_POWER_LIMIT.name][:, 7, 3] = 500.0  # below the node's 700 W
    assert MarginalDetector().detect(window(d)) == []
    d = slow(healthy(NODES), 7, 3, 0.05)  # or the driver says a power cap holds it down
    d["metrics"][c.GPU_THROTTLE.name][:, 7, 3, THROTTLE_REASONS.index("sw_power_cap")] = 1.0
    assert MarginalDetector().detect(window(d)) == []


def test_a_node_the_straggler_detector_drains_is_not_also_avoided() -> None:
    from analyzer.detectors.straggler import StragglerDetector
    from analyzer.engine import Engine

    d = slow(healthy(NODES, job=False), 7, 3, 0.05)  # no job: the fail-slow path judges it
    assert avoids(MarginalDetector().detect(window(d))) == [("node-07", "signal=sm_clock_deficit")]
    eng = Engine([StragglerDetector(), MarginalDetector()])
    eng.cycle(window(d))
    found = eng.cycle(window(later(d)))  # the second cycle: the straggler drain
    assert ("node-07", "straggler", "drain") in {(f.node, f.kind, f.action) for f in found}
    assert avoids(found) == []


# --------------------------------------------------------------------------- PCIe
def downtrained(d: dict, node: int, gpu: int, every: int = 4, last: bool = False) -> dict:
    """The link of ``gpu`` falls back to x8 every ``every``-th sample (not in the last three
    unless ``last``: the pcie detector's 2 of 3 never sees it)."""
    w = d["metrics"][c.GPU_PCIE_WIDTH.name]
    T = w.shape[0]
    w[np.arange(T) % every == 1, node, gpu] = 8.0
    w[T - 3 :, node, gpu] = 8.0 if last else 16.0
    return d


def test_a_pcie_link_that_falls_below_its_width_now_and_then_makes_its_node_avoided() -> None:
    [f] = MarginalDetector().detect(window(downtrained(healthy(NODES), 7, 2)))
    assert (f.node, f.subject, f.action) == ("node-07", "signal=pcie_below_max", "avoid")
    assert f.evidence["gpu"] == 2 and 0.15 < f.evidence["value"] < 0.3
    assert c.GPU_PCIE_WIDTH_MAX.name in f.summary


def test_a_pcie_link_below_its_width_once_is_below_the_floor() -> None:
    assert MarginalDetector().detect(window(downtrained(healthy(NODES), 7, 2, every=99))) == []


def test_a_pcie_link_the_pcie_detector_drains_is_not_also_avoided() -> None:
    from analyzer.detectors.pcie import PcieDetector
    from analyzer.engine import Engine

    d = downtrained(healthy(NODES), 7, 2, last=True)
    assert avoids(MarginalDetector().detect(window(d))) == [("node-07", "signal=pcie_below_max")]
    found = Engine([PcieDetector(), MarginalDetector()]).cycle(window(d))
    assert [(f.node, f.kind, f.action) for f in found] == [("node-07", "pcie_downgrade", "drain")]


def test_every_node_falling_back_on_its_pcie_width_is_one_fleet_shift_and_flags_nobody() -> None:
    d = healthy(NODES)
    for n in range(NODES):
        d = downtrained(d, n, 0)
    found = MarginalDetector().detect(window(d))
    assert [(f.node, f.kind, f.action) for f in found] == [(CLUSTER, "fleet_shift", "notify")]
    assert "pcie_below_max" in found[0].summary


# --------------------------------------------------------------------------- row remaps
def remaps(d: dict, rows: dict[tuple[int, int], float], start: int = 0) -> dict:
    """Correctable remapped rows per (node, gpu) from sample ``start`` (0 before)."""
    T, n, g = d["metrics"][c.GPU_UTILIZATION.name].shape
    a = d["metrics"].setdefault(c.GPU_REMAPPED_ROWS.name, np.zeros((T, n, g, 2)))
    for (node, gpu), v in rows.items():
        a[start:, node, gpu, 0] = v
    return d


def test_a_gpu_with_a_handful_of_correctable_remaps_makes_its_node_avoided() -> None:
    d = remaps(healthy(NODES), {(7, 5): 5.0, (1, 0): 1.0, (2, 3): 1.0})
    [f] = MarginalDetector().detect(window(d))
    assert (f.node, f.subject, f.action) == ("node-07", "signal=correctable_remaps", "avoid")
    assert f.evidence["gpu"] == 5 and f.evidence["value"] == 5.0
    assert c.GPU_REMAPPED_ROWS.name + '{kind="correctable"}' in f.summary


def test_one_or_two_correctable_remaps_are_below_the_floor() -> None:
    assert MarginalDetector().detect(window(remaps(healthy(NODES), {(7, 5): 2.0}))) == []


def test_remaps_that_appeared_in_the_second_half_only_are_not_yet_marginal() -> None:
    assert MarginalDetector().detect(window(remaps(healthy(NODES), {(7, 5): 5.0}, start=30))) == []


def test_a_pending_remap_the_memory_detector_acts_on_is_not_also_avoided() -> None:
    from analyzer.detectors.memory import MemoryDetector
    from analyzer.engine import Engine

    d = remaps(healthy(NODES), {(7, 5): 5.0})
    d["metrics"][c.GPU_ROW_REMAP_PENDING.name][:, 7, 5] = 1.0
    found = Engine([MemoryDetector(), MarginalDetector()]).cycle(window(d))
    assert [(f.node, f.kind, f.action) for f in found] == [
        ("node-07", "row_remap_pending", "reboot")
    ]


def test_correctable_remaps_across_the_whole_group_are_one_fleet_shift() -> None:
    d = remaps(healthy(NODES), {(n, 0): 3.0 + n % 3 for n in range(NODES)})
    found = MarginalDetector().detect(window(d))
    assert [(f.node, f.kind) for f in found] == [(CLUSTER, "fleet_shift")]


# --------------------------------------------------------------------------- the queries
def test_every_signals_promql_reads_only_catalogue_metrics() -> None:
    from analyzer.detectors.marginal_signals import SIGNALS
    from tests.alerts.ruleset import metric_names

    for s in SIGNALS:
        assert metric_names(s.promql) and metric_names(s.promql) <= c.names(), s.name


@pytest.mark.real
def test_every_signals_promql_parses_with_promtool(tmp_path: Path) -> None:
    from analyzer.detectors.marginal_signals import SIGNALS
    from tests.realcomp import promtool

    rules = [{"record": f"marginal:{s.name}:check", "expr": s.promql} for s in SIGNALS]
    path = tmp_path / "marginal.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "marginal", "rules": rules}]}))
    r = promtool("check", "rules", str(path))
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()


def test_a_healthy_simulated_fleet_is_neither_marginal_nor_a_fleet_shift() -> None:
    """The floors sit above healthy hardware's background (the simulator's stray symbol errors
    are ~0.013/s per 8-port node, so a 0.01/s floor made every healthy fleet a 'shift')."""
    from analyzer.sources.frames import FrameBuffer
    from simulator import Fleet
    from simulator.topology import port_name

    fleet = Fleet(64, 3)
    buf = FrameBuffer(fleet.nodes, ports=[port_name(p) for p in range(8)], sku=fleet.models)
    det, found = MarginalDetector(), []
    for t in np.arange(15.0, 1815.0, 15.0):
        buf.push(fleet.step(float(t)), fleet.jobs_at(float(t)))
        if t % 300 == 0:
            found += det.detect(buf.window())
    assert [(f.node, f.kind, f.subject) for f in found] == []
