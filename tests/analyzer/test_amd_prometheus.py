"""A fleet of MI300X nodes on AMD's Device Metrics Exporter beside H100 nodes on gpuwarden's
exporter, through a real Prometheus (backfilled with promtool; tests/analyzer/dmefleet.py):
discovery finds DME behind its prefix and without it, every node is read in its own dialect and
model, and the AMD faults are found beside the NVIDIA one under one policy."""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace

import numpy as np
import pytest

from analyzer.cli import main as cli_main
from analyzer.detectors import default_detectors
from analyzer.engine import Engine
from analyzer.replicas.slicing import subwindow
from analyzer.sources.dialects import coverage
from analyzer.sources.prometheus import PrometheusSource
from analyzer.window import THROTTLE_REASONS, Window
from exporter import catalog as c

from . import dmefleet
from .replicaread import reads, same_window, series_hosts

AMD = ("mi300x-a", "mi300x-b", "mi300x-c")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    with dmefleet.served(tmp_path_factory.mktemp("dme")) as got:
        yield got


def _read(url: str, end: float) -> tuple[Window, PrometheusSource]:
    src = PrometheusSource(url, window=600.0, step=dmefleet.STEP, discover=True)

    async def go() -> Window:
        try:
            return await src.read(end + src.settle)
        finally:
            await src.close()

    return asyncio.run(go()), src


@pytest.fixture(scope="module")
def read(fleet):
    url, end = fleet
    w, src = _read(url, end)
    found = {(f.node, f.subject, f.kind): f for f in Engine(default_detectors()).cycle(w)}
    return w, src, found


@pytest.mark.real
def test_dme_nodes_with_and_without_a_prefix_are_read_in_amds_dialect_and_model(read):
    w, src, _ = read
    assert src.found is not None and src.found.dialects == ("amd-dme",)
    assert {n for n in src.found.names if n.startswith("amd_")} and "gpu_health" in src.found.names
    dialect = {w.nodes[i]: d for i, d in w.dialect_of.items()}
    assert {n: dialect[n] for n in AMD} == dict.fromkeys(AMD, "amd-dme")
    assert dialect["h100-a"] == dialect["h100-b"] == "gpuwarden"
    assert dict(zip(w.nodes, w.sku, strict=True)) == {
        "h100-a": "h100-sxm", "h100-b": "h100-sxm",
        "mi300x-a": "mi300x", "mi300x-b": "mi300x", "mi300x-c": "mi300x",
    }  # fmt: skip


@pytest.mark.real
def test_dme_values_read_in_the_catalogues_units(read):
    w, _, _ = read
    n = w.nodes.index("mi300x-c")  # the unprefixed DME, clock types named as 1.4.0 did
    clock, util = w.get(c.GPU_SM_CLOCK), w.get(c.GPU_UTILIZATION)
    assert clock is not None and clock[-1, n, 0] == pytest.approx(2.1e9)  # MHz -> Hz
    assert util is not None and util[-1, n, 0] == pytest.approx(0.95)  # % -> ratio
    gen = w.get(c.GPU_PCIE_GENERATION)
    assert gen is not None and gen[-1, n, 0] == 5.0  # 32 GT/s -> Gen5
    power, temp = w.get(c.GPU_POWER), w.get(c.GPU_TEMPERATURE)
    assert power is not None and power[-1, n, 0] == 720.0
    assert temp is not None and temp[-1, n, 0] == 62.0  # the junction (hotspot) sensor
    xgmi = w.get(c.GPU_XGMI_TRANSMIT)
    assert xgmi is not None and xgmi[-1, n, 0, 0] == 0.0  # the GPU's own index carries nothing
    assert xgmi[-1, n, 0, 1] > 1e12  # KB -> bytes


@pytest.mark.real
def test_violation_residency_reads_as_the_power_cap_or_thermal_and_the_cap_finds_nothing(read):
    w, _, found = read
    a = w.get(c.GPU_THROTTLE)
    b = w.nodes.index("mi300x-b")
    assert a is not None
    held = {r for r, v in zip(THROTTLE_REASONS, a[-1, b, 4], strict=True) if v == 1.0}
    assert held == {"sw_power_cap"}  # PPT: the power cap
    held = {r for r, v in zip(THROTTLE_REASONS, a[-1, b, 2], strict=True) if v == 1.0}
    assert held == {"sw_thermal_slowdown"}  # socket thermal
    thermal = found[("mi300x-b", "gpu=2", "throttling")]
    assert thermal.action == "notify" and "ppt is the power cap" in thermal.summary
    assert ("mi300x-b", "gpu=4", "throttling") not in found


@pytest.mark.real
def test_a_fatal_hbm_error_is_an_afid_event_whose_evidence_says_dme_keeps_the_last_only(read):
    _, _, found = read
    f = found[("mi300x-a", "gpu=1", "afid_fatal")]
    assert (f.severity, f.action, f.evidence["afid"]) == ("critical", "drain", 20.0)
    assert f.evidence["last_event_only"] == 1.0 and "AMDGPUHBMError" in f.summary
    ecc = found[("mi300x-a", "gpu=1", "ecc_uncorrectable")]
    assert "[in umc (HBM)]" in ecc.summary


@pytest.mark.real
def test_two_ras_events_between_scrapes_show_the_last_and_say_one_was_lost(read):
    w, _, found = read
    b = w.nodes.index("mi300x-b")
    assert [(e.afid, e.severity) for e in w.afids if (e.node, e.gpu) == (b, 6)] == [
        (22, "non_fatal_uncorrected")
    ]  # AFID 27 (the watchdog timeout before it) never reached the gauge at a scrape
    f = found[("mi300x-b", "gpu=6", "afid_event")]
    assert f.action == "cordon" and f.evidence["uncorrected_errors_without_event"] == 1.0


@pytest.mark.real
def test_deferred_errors_a_lost_xgmi_link_and_a_vanished_gpu_are_found(read):
    _, _, found = read
    deferred = found[("mi300x-a", "gpu=3", "ras_deferred")]
    assert deferred.evidence["deferred"] == 2.0 and "umc (HBM)" in deferred.summary
    link = found[("mi300x-a", "link=gpu5/2", "xgmi_link_lost")]
    assert link.action == "drain" and link.evidence["sibling_links_rising"] == 6.0
    assert found[("mi300x-c", "gpu=7", "gpu_lost")].action == "drain"


@pytest.mark.real
def test_the_amd_and_nvidia_faults_are_decided_under_one_policy_and_nothing_else_is_found(read):
    _, _, found = read
    assert found[("h100-b", "gpu=3", "xid_fatal")].action == "drain"
    assert set(found) == {
        ("h100-b", "gpu=3", "xid_fatal"),
        ("mi300x-a", "gpu=1", "afid_fatal"),
        ("mi300x-a", "gpu=1", "ecc_uncorrectable"),
        ("mi300x-a", "gpu=3", "ras_deferred"),
        ("mi300x-a", "link=gpu5/2", "xgmi_link_lost"),
        ("mi300x-b", "gpu=2", "throttling"),
        ("mi300x-b", "gpu=6", "afid_event"),
        ("mi300x-b", "gpu=6", "ecc_uncorrectable"),
        ("mi300x-c", "gpu=7", "gpu_lost"),
    }  # MI300X at 720 W / 2.1 GHz beside H100 at 520 W / 1.98 GHz: no peer or straggler


@pytest.mark.real
def test_coverage_names_the_amd_group_what_it_judges_and_how_to_enable_the_rest(
    fleet, read, capsys
):
    url, end = fleet
    w, _, _ = read
    rep = coverage.report(w)
    amd = next(g for g in rep["groups"] if g["dialect"] == "amd-dme")
    assert amd["nodes"] == list(AMD)
    state = {d["detector"]: d for d in amd["detectors"]}
    assert state["afid"]["state"] == "full" and state["xgmi"]["state"] == "full"
    assert state["ras"]["state"] == "full"
    assert state["xid"]["cannot"][0]["enable"].startswith("AMD GPUs report no XIDs")
    assert any("last RAS event" in n for n in state["afid"]["notes"])
    assert "no PCIe link-width field" in state["pcie"]["cannot"][0]["enable"]
    # residency is read, yet none of it is a rack's power brake
    assert state["power_brake"]["state"] == "cannot" and state["throttling"]["judges"]
    assert "no power-brake signal" in state["power_brake"]["cannot"][0]["enable"]
    assert cli_main(["--prometheus", url, "--coverage", "--at", str(end + 5)]) == 0
    out = capsys.readouterr().out
    assert "== amd-dme: 3 node(s) (mi300x-a .. mi300x-c)" in out
    assert "== gpuwarden: 2 node(s) (h100-a, h100-b)" in out


@pytest.mark.real
def test_a_lost_gpus_sibling_series_stay_and_its_up_reads_zero_not_a_gap(read):
    w, _, _ = read
    up = w.get(c.GPU_UP)
    n = w.nodes.index("mi300x-c")
    assert up is not None and up[-1, n, 7] == 0.0 and np.all(up[-1, n, :7] == 1.0)


@pytest.mark.real
def test_a_replica_reads_only_the_dme_series_of_the_hosts_it_owns(fleet):
    url, end = fleet
    at, me = end + 5, "mi300x-b"
    ((full, _, _, _),) = reads(url, [(at, None)], dmefleet.STEP, discover=True)
    ((mine, calls, _, topo),) = reads(url, [(at, {me})], dmefleet.STEP, discover=True)
    assert topo.nodes == full.nodes  # the topology still sees every host, DME's and native
    assert mine.nodes == (me,)
    dme = [(form["query"], body) for _, form, body in calls
           if "hostname" in form["query"] and not form["query"].startswith(("group by (node",
                                                                            "count by (node"))]  # fmt: skip
    assert any("label_replace" in q for q, _ in dme)  # the residency expression, narrowed too
    for query, body in dme:  # in every series selector: only the owned host answers
        blocks = re.findall(r"\{[^{}]*\}", query)
        # the hosts' alternation, or a moved row's own labels
        assert all(re.search(rf'\b(node|Hostname|hostname)=~?"{me}"', b) for b in blocks), query
        assert series_hosts(body) <= {me}, query
    same_window(mine, subwindow(full, [full.nodes.index(me)]))
    assert mine.afids and list(mine.afids) == [
        replace(e, node=0) for e in full.afids if full.nodes[e.node] == me
    ]
