"""A fleet half on gpuwarden's exporter, half on dcgm-exporter + node_exporter, through a real
Prometheus (backfilled with promtool): discovery finds the dialects, every node is read in its
own, and the detectors judge both halves (tests/analyzer/dcgmfleet.py builds the history)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from analyzer.cli import main as cli_main
from analyzer.detectors import capsight, default_detectors
from analyzer.engine import Engine
from analyzer.sources.dialects import coverage
from analyzer.sources.dialects.dcgm import NATIVE_ONLY
from analyzer.sources.dialects.identity import NodeMap
from analyzer.sources.queries import QUERIES
from analyzer.window import THROTTLE_REASONS
from exporter import catalog as c
from exporter import catalog_dcgm as cd
from simulator.telemetry import DCGM_DEFAULTS, dcgm_fields

from . import dcgmfleet


def _faults(f):
    f.inject("xid", f.nodes[0], "gpu3", {"xid": 48}, onset=500)  # native nodes
    f.inject("nvlink_down", f.nodes[1], "gpu0/2", onset=500)
    f.inject("xid", f.nodes[2], "gpu1", {"xid": 95}, onset=500)  # dcgm nodes from here
    f.inject("gpu_fallen_off_bus", f.nodes[2], "gpu5", onset=600)
    f.inject("nvlink_errors", f.nodes[3], "gpu2/4", onset=500)
    f.inject("ib_port_down", f.nodes[3], "mlx5_1/1", onset=500)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    with dcgmfleet.served(tmp_path_factory.mktemp("mixed"), 4, _faults, native_nodes=2) as got:
        yield got


@pytest.mark.real
def test_each_node_of_a_mixed_fleet_is_read_in_its_own_exporters_dialect(mixed):
    url, fleet, end = mixed
    w, src = dcgmfleet.read(url, end)
    assert w.nodes == tuple(fleet.nodes)
    assert [w.dialect_of[i] for i in range(4)] == ["gpuwarden"] * 2 + [
        "dcgm-exporter+node_exporter"
    ] * 2
    assert src.found is not None and src.found.generations == ("4.8",)
    clock = w.get(c.GPU_SM_CLOCK)
    assert clock is not None and 1e8 < float(clock[-1, 3, 0]) < 3e9  # dcgm MHz read as Hz
    util = w.get(c.GPU_UTILIZATION)
    assert util is not None and 0.0 <= float(util[-1, 3, 0]) <= 1.0  # dcgm % read as a ratio
    assert w.sku[2] == w.sku[0] == "h100-sxm"  # modelName gives the peer group
    assert (2, 1, 95) in {(e.node, e.gpu, e.xid) for e in w.xids}  # the last-XID gauge
    assert (0, 3, 48) in {(e.node, e.gpu, e.xid) for e in w.xids}  # the native counter
    assert len(w.ib_counters["symbol_error"][0]) == 4  # node_exporter's ports, as native ones
    links = w.get(c.NVLINK_UP)  # sparse on gpuwarden's nodes: absent means up; dcgm has none
    assert links is not None and links[-1, 1, 0, 2] == 0.0 and links[-1, 1, 0, 3] == 1.0
    assert np.isnan(links[:, 2:]).all()  # not "every link up": unknown


@pytest.mark.real
def test_the_detectors_find_the_faults_on_both_halves_and_say_where_the_signal_is_reduced(mixed):
    url, _fleet, end = mixed
    w, _ = dcgmfleet.read(url, end)
    found = {(f.node, f.subject, f.kind): f for f in Engine(default_detectors()).cycle(w)}
    assert ("gpu-node-001", "gpu=3", "xid_fatal") in found
    assert ("gpu-node-003", "gpu=1", "xid_fatal") in found
    # the fault ended the GPU's job, so its ECC counter moved where hpc_job starts a new series
    assert ("gpu-node-003", "gpu=1", "ecc_uncorrectable") in found
    lost = found[("gpu-node-003", "gpu=5", "gpu_lost")]  # its series vanished, siblings stay
    assert lost.action == "drain"
    nvl = found[("gpu-node-004", "gpu=2", "nvlink_errors")]  # a per-GPU sum: no link index
    assert nvl.evidence["reduced_signal"] == 1.0 and "not to a link" in nvl.summary
    assert ("gpu-node-004", "port=mlx5_1/1", "ib_port_down") in found
    xid = found[("gpu-node-003", "gpu=1", "xid_fatal")]
    assert "repeats of one code are invisible" in xid.summary


@pytest.mark.real
def test_a_node_mapping_renames_dcgm_hosts_and_leaves_native_nodes_alone(mixed):
    url, _fleet, end = mixed
    w, _ = dcgmfleet.read(url, end, NodeMap(r"gpu-node-(\d+)", {}))
    assert w.nodes == ("003", "004", "gpu-node-001", "gpu-node-002")


@pytest.mark.real
def test_coverage_on_the_command_line_prints_each_node_group(mixed, capsys):
    url, _fleet, end = mixed
    assert cli_main(["--prometheus", url, "--coverage", "--at", str(end + 5)]) == 0
    out = capsys.readouterr().out
    assert (
        "== dcgm-exporter+node_exporter [dcgm-exporter naming 4.8]: 2 node(s)"
        " (gpu-node-003, gpu-node-004)"
    ) in out
    assert "== gpuwarden: 2 node(s) (gpu-node-001, gpu-node-002)" in out
    f = c.GPU_SM_ACTIVE.dcgm[0]
    assert f"{f.name}, gauge, {f.help}" in out
    w, _ = dcgmfleet.read(url, end)
    rep = coverage.report(w)
    native = next(g for g in rep["groups"] if g["dialect"] == "gpuwarden")
    assert {d["detector"]: d["state"] for d in native["detectors"]}["pcie"] == "full"


@pytest.mark.real
def test_with_dcgms_clock_events_enabled_a_throttled_gpu_is_judged_and_says_how(tmp_path):
    def throttle(f):
        f.inject("power_throttle", f.nodes[1], "gpu4", onset=300)

    with dcgmfleet.served(tmp_path, 2, throttle, clock_events=True) as (url, _fleet, end):
        w, _ = dcgmfleet.read(url, end)
    found = {(f.node, f.subject, f.kind): f for f in Engine(default_detectors()).cycle(w)}
    got = found[("gpu-node-002", "gpu=4", "throttling")]
    assert got.evidence["reduced_signal"] == 1.0 and "5 min" in got.summary
    reasons = w.get(c.GPU_THROTTLE)
    assert reasons is not None and np.nanmax(reasons[:, 1, 4]) == 1.0
    rep = coverage.report(w)
    states = {d["detector"]: d["state"] for d in rep["groups"][0]["detectors"]}
    assert states["throttling"] == "full"


@pytest.mark.real
def test_a_gpuwarden_fleet_that_also_serves_dcgm_and_node_exporter_names_is_read_once(tmp_path):
    def xid(f):
        f.inject("xid", f.nodes[1], "gpu2", {"xid": 95}, onset=500)

    with dcgmfleet.served(tmp_path, 2, xid, native_nodes=2, overlap=True) as (url, _f, end):
        w, src = dcgmfleet.read(url, end)
    assert src.queries == QUERIES  # both dialects found, both shadowed: nothing read twice
    assert set(w.dialect_of.values()) == {"gpuwarden"}
    assert [(e.node, e.gpu, e.xid) for e in w.xids if e.xid == 95] == [(1, 2, 95)]


GENERATION_NODES = ("4.8", "4.9", "4.10")


def _same_fault_on_each(f):
    for node in f.nodes:
        f.inject("xid", node, "gpu1", {"xid": 95}, onset=500)


@pytest.mark.real
def test_nodes_in_each_dcgm_naming_generation_read_as_the_same_native_values_and_faults(
    tmp_path,
):
    # one node per generation, named and scaled as the exporter's --compat dcgm:<gen> renders
    # (exporter.catalog_dcgm): 4.8 MHz/%/W, 4.9 and 4.10 Hz/ratio/W (their names are derived)
    last: list = []
    with dcgmfleet.served(tmp_path, 3, _same_fault_on_each, generations=GENERATION_NODES,
                          last=last) as (url, fleet, end):  # fmt: skip
        w, src = dcgmfleet.read(url, end)
    assert src.found is not None and src.found.generations == ("4.8", "4.9")
    assert cd.name_in("4.9", c.GPU_SM_CLOCK.dcgm[0].name) in src.found.names
    assert cd.name_in("4.9", c.DCGM_LAST_XID.name) in src.found.names
    assert w.nodes == tuple(fleet.nodes)
    assert set(w.dialect_of.values()) == {"dcgm-exporter+node_exporter"}
    # per node, the generation its names belong to (4.10 names its defaults as 4.9 does)
    assert w.dcgm_generation_of == {0: "4.8", 1: "4.9", 2: "4.9"}
    frame = last[0]
    # the truth in gpuwarden's native units; 4.8 prints whole MHz and whole percent
    for metric, rtol, atol in ((c.GPU_SM_CLOCK, 1e-3, 0.0), (c.GPU_UTILIZATION, 0.0, 0.006),
                               (c.GPU_TEMPERATURE, 0.0, 0.51), (c.GPU_POWER, 1e-3, 0.51)):  # fmt: skip
        got, want = w.get(metric), np.asarray(frame.metrics[metric.name], float)
        assert got is not None, metric.name
        for i in range(3):
            ok = ~np.isnan(want[i])
            assert ok.any()
            np.testing.assert_allclose(got[-1, i][ok], want[i][ok], rtol=rtol, atol=atol,
                                       err_msg=f"{metric.name} {GENERATION_NODES[i]}")  # fmt: skip
    clock = w.get(c.GPU_SM_CLOCK)
    assert clock is not None and np.nanmin(clock[-1]) > 1e8  # Hz on every node, none 1e6 off
    assert {(e.node, e.gpu, e.xid) for e in w.xids} >= {(i, 1, 95) for i in range(3)}
    found = {(f.node, f.subject, f.kind) for f in Engine(default_detectors()).cycle(w)}
    for node in fleet.nodes:
        assert (node, "gpu=1", "xid_fatal") in found, node


@pytest.mark.real
def test_on_dcgm_exporters_default_counters_coverage_asks_for_exactly_the_fields_it_lacks(tmp_path):
    last: list = []
    with dcgmfleet.served(tmp_path, 2, lambda f: None, last=last,
                          fields=dcgm_fields(DCGM_DEFAULTS)) as (url, _f, end):  # fmt: skip
        w, _ = dcgmfleet.read(url, end)
    rep = coverage.report(w)
    (group,) = rep["groups"]
    advice = "\n".join(x["enable"] for d in group["detectors"] for x in d["cannot"])
    asked = set(re.findall(r"^(DCGM_\w+), ", advice, re.M))
    read = {f.name: q.metric.name for q in QUERIES for f in q.metric.dcgm
            if f.sum_over in ((), ("link",)) and q.metric not in NATIVE_ONLY}  # fmt: skip
    lack = set(read) - set(cd.DEFAULT_COUNTERS) | {
        c.DCGM_CLOCK_EVENTS_COUNT.name,
        c.DCGM_CLOCK_EVENTS.name,
    }
    # a default field the simulator does not model (profiling activity) is asked for too
    unmodelled = {f for f, m in read.items() if m not in last[0].metrics}
    assert asked == lack | unmodelled and c.GPU_SM_CLOCK.dcgm[0].name not in asked
    by = {d["detector"]: d for d in group["detectors"]}
    assert by["memory"]["state"] == "partial" and by["pcie"]["state"] == "cannot"
    assert coverage.NOTIFY_ONLY in by[coverage.FAIL_SLOW]["notes"]


def _thermal(f):
    f.inject("thermal_throttle", f.nodes[1], "gpu4", onset=300)


@pytest.mark.real
@pytest.mark.parametrize("bitmask", [f.name for f in c.DCGM_CLOCK_REASON_BITMASKS])
def test_a_thermally_throttled_gpu_is_explained_as_thermal_from_dcgms_reasons_bitmask(
    tmp_path, bitmask
):
    # the defaults fleet (no power limit) that also serves the reasons bitmask (either of its
    # names) and the violation counters: the GPU's slow clock has its reason
    with dcgmfleet.served(tmp_path, 4, _thermal, fields=dcgm_fields(DCGM_DEFAULTS),
                          clock_reasons=bitmask, violations=True) as (url, _f, end):  # fmt: skip
        w, src = dcgmfleet.read(url, end)
    assert src.found is not None and bitmask in src.found.names
    reasons = w.get(c.GPU_THROTTLE)
    assert reasons is not None
    hot = reasons[-1, 1, 4]
    for r in ("hw_thermal_slowdown", "sw_thermal_slowdown"):
        assert hot[THROTTLE_REASONS.index(r)] == 1.0, r
    thermal = [THROTTLE_REASONS.index(r) for r in ("hw_thermal_slowdown", "sw_thermal_slowdown")]
    assert np.nansum(reasons[-1][..., thermal]) == 2  # no other GPU is held down by heat
    assert not np.isnan(reasons[-1]).any()  # a GPU serving the bitmask: absent reasons read 0
    found = {(f.node, f.subject, f.kind): f for f in Engine(default_detectors()).cycle(w)}
    got = found[("gpu-node-002", "gpu=4", "throttling")]
    assert "hw_thermal_slowdown" in got.summary and got.action == "cordon"
    assert not [f for f in found.values() if capsight.EVIDENCE in f.evidence]
    rep = coverage.report(w)
    by = {d["detector"]: d for d in rep["groups"][0]["detectors"]}
    assert "clock event reasons" in by["throttling"]["judges"]
    assert coverage.NOTIFY_ONLY not in by[coverage.FAIL_SLOW]["notes"]


@pytest.mark.real
def test_with_only_dcgms_violation_counters_a_thermal_slowdown_is_thermal_and_never_a_cordon(
    tmp_path,
):
    with dcgmfleet.served(tmp_path, 4, _thermal, fields=dcgm_fields(DCGM_DEFAULTS),
                          violations=True) as (url, _f, end):  # fmt: skip
        w, _ = dcgmfleet.read(url, end)
    reasons = w.get(c.GPU_THROTTLE)
    assert reasons is not None
    held = reasons[-1, 1, 4] == 1.0
    assert [THROTTLE_REASONS[i] for i in np.flatnonzero(held)] == ["sw_thermal_slowdown"]
    found = {(f.node, f.subject, f.kind): f for f in Engine(default_detectors()).cycle(w)}
    got = found[("gpu-node-002", "gpu=4", "throttling")]
    assert got.action == "notify"  # thermal, but hardware or software is not told apart
    assert not [f for f in found.values() if capsight.EVIDENCE in f.evidence]


@pytest.mark.real
def test_a_gpu_whose_pcie_link_trained_a_generation_low_is_found_on_a_dcgm_fleet(tmp_path):
    def gen4(f):  # a PCIe-bound straggler: the full width, one generation down
        f.inject("pcie_downgrade", f.nodes[1], "gpu3", {"generation": 4, "width": 16}, onset=300)

    with dcgmfleet.served(tmp_path, 4, gen4) as (url, _f, end):
        w, _ = dcgmfleet.read(url, end)
    assert w.get(c.GPU_PCIE_GENERATION_MAX) is None  # dcgm-exporter serves no maximum
    found = {(f.node, f.subject, f.kind): f for f in Engine(default_detectors()).cycle(w)}
    got = found[("gpu-node-002", "gpu=3", "pcie_downgrade")]
    assert got.evidence["generation"] == 4.0 and got.evidence["peer_generation"] == 5.0
    assert [k for k in found if k[2] == "pcie_downgrade"] == [("gpu-node-002", "gpu=3",
                                                               "pcie_downgrade")]  # fmt: skip
    (group,) = coverage.report(w)["groups"]
    pcie = next(d for d in group["detectors"] if d["detector"] == "pcie")
    assert pcie["state"] == "partial" and "peers" in pcie["cannot"][0]["enable"]


def _three_misses(f):
    """Issue 31's three dcgm misses at once on a mixed A100/H100 fleet."""
    f.inject("thermal_throttle", f.nodes[1], "gpu4", onset=300)  # an H100
    f.inject("pcie_downgrade", f.nodes[5], "gpu2", {"generation": 3, "width": 16},
             onset=300)  # an A100 (a Gen4 part) trained at Gen3  # fmt: skip
    f.inject("nvlink_errors", f.nodes[2], "gpu5/10", onset=300)


@pytest.mark.real
def test_a_mixed_dcgm_fleet_finds_the_thermal_gpu_the_slow_pcie_link_and_names_the_nvlink_gpu(
    tmp_path,
):
    with dcgmfleet.served(tmp_path, 8, _three_misses, skus=["h100"] * 4 + ["a100"] * 4,
                          clock_reasons=c.DCGM_CLOCK_THROTTLE_REASONS.name,
                          violations=True) as (url, _f, end):  # fmt: skip
        w, _ = dcgmfleet.read(url, end)
    assert set(w.sku) == {"h100-sxm", "a100-sxm"}
    engine = Engine(default_detectors())
    found = [f for _ in range(2) for f in engine.cycle(w)]
    got = {(f.node, f.subject, f.kind): f for f in found}
    thermal = got[("gpu-node-002", "gpu=4", "throttling")]
    assert "hw_thermal_slowdown" in thermal.summary
    assert ("gpu-node-006", "gpu=2", "pcie_downgrade") in got
    assert ("gpu-node-003", "gpu=5", "nvlink_errors") in got
    assert not [f for f in found if f.subject.startswith("link=")]  # no link index made up
    assert not [f for f in found if capsight.EVIDENCE in f.evidence]
    faulty = {"gpu-node-002", "gpu-node-003", "gpu-node-006"}
    assert not [f for f in found if f.node not in faulty and f.action in ("drain", "cordon")]
