"""``--telemetry amd-dme``: MI300X nodes served as AMD's Device Metrics Exporter serves them
(simulator.dme), read by the analyzer's own DME reader (analyzer.sources.dialects.amd)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from analyzer.sources.dialects import amd as dialect
from exporter import catalog as c
from exporter import catalog_amd as dme
from simulator.cli import SimulateSettings, make_simulator
from simulator.dme import DmeNode
from simulator.simulator import Simulator
from tests.simulator.helpers import busy_fleet, run

_SERIES = re.compile(r"^(\w+)\{(.*)\} (\S+)$")
TSV = Path(__file__).resolve().parents[2] / "fixtures" / "amd-dme" / "gpu-metric-fields.tsv"
FIELDS = {ln.split("\t")[1].strip().lower() for ln in TSV.read_text().splitlines() if "\t" in ln}


def series(body: bytes) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in body.decode().splitlines():
        if m := _SERIES.match(line):
            out.append((m[1], dict(re.findall(r'(\w+)="([^"]*)"', m[2])), float(m[3])))
    return out


def fleet(**faults: tuple[str, str, dict[str, object]]):  # type: ignore[no-untyped-def]
    f = busy_fleet(4, 3, nodes_per_leaf=2, skus=["h100", "h100", "mi300x", "mi300x"])
    for kind, (node, target, params) in faults.items():
        f.inject(kind, node, target, params, onset=30)
    return f


def scrape(f, node: int = 3, prefix: str = "", until: float = 120.0):  # type: ignore[no-untyped-def]
    d = DmeNode(f.nodes[node], node, prefix)
    body = b""
    for frame in f.run(until, 15.0):
        body = d.render(frame)
    return body, series(body)


def test_every_served_name_is_a_dme_field_behind_the_prefix_typed_gauge_with_dmes_identity():
    body, got = scrape(fleet(), prefix="amd_")
    names = {n for n, _, _ in got}
    assert all(n.startswith("amd_") and n.removeprefix("amd_") in FIELDS for n in names)
    assert set(re.findall(r"# TYPE (\S+) (\S+)", body.decode())) == {(n, "gauge") for n in names}
    for _, labels, _ in got:
        assert {"hostname", "serial_number", "gpu_id", "deployment_mode"} <= set(labels)
        assert labels["hostname"] == "gpu-node-004" and "node" not in labels
    # what the analyzer's reader reads is served, under the prefix it discovers
    # (MI300X has no edge sensor; the AFID gauge is born at the first RAS event)
    want = set(dme.MARKERS) - {"gpu_edge_temperature", dme.AFID_ERRORS}
    assert {s for n in names if (s := dialect.split(n))} >= {("amd_", f) for f in want}
    assert dialect.is_dme(names)


def test_units_are_dmes_watts_percent_mhz_gts_and_kilobytes():
    _, got = scrape(fleet())
    one = {(n, labels.get("clock_type", ""), labels.get("link_index", "")): v
           for n, labels, v in got if labels["gpu_id"] == "0"}  # fmt: skip
    assert one[("gpu_clock", "system", "")] == 2100  # MHz, busy
    assert 50 < one[("gpu_gfx_activity", "", "")] <= 100  # percent
    assert one[("pcie_speed", "", "")] == 32.0  # GT/s (Gen5)
    assert 300 < one[("gpu_package_power", "", "")] <= 750  # W
    assert one[("gpu_xgmi_link_tx", "", "0")] == 0 and one[("gpu_xgmi_link_tx", "", "1")] > 1e9


def test_two_ras_events_between_scrapes_show_only_the_last_events_afid():
    f = fleet(amd_afid_event=("gpu-node-004", "gpu6", {"afid": 27, "then": 22}))
    _, got = scrape(f)
    afids = [(labels["gpu_id"], labels["severity"], v) for n, labels, v in got
             if n == dme.AFID_ERRORS]  # fmt: skip
    assert afids == [("6", "non_fatal_uncorrected", 22.0)]  # 27 never reached a scrape


def test_an_uncorrectable_hbm_error_drops_health_and_counts_in_umc():
    _, got = scrape(fleet(amd_hbm_uncorrectable=("gpu-node-004", "gpu1", {})))
    v = {(n, labels["gpu_id"]): val for n, labels, val in got}
    assert v[("gpu_health", "1")] == 0 and v[("gpu_health", "0")] == 1
    assert v[("gpu_ecc_uncorrect_umc", "1")] == 1 and v[("gpu_ecc_uncorrect_total", "1")] == 1
    assert v[("gpu_afid_errors", "1")] == 20


def test_a_lost_gpus_series_vanish_while_its_siblings_report():
    _, got = scrape(fleet(amd_gpu_lost=("gpu-node-004", "gpu7", {})))
    assert {labels["gpu_id"] for _, labels, _ in got} == {str(g) for g in range(7)}


@pytest.mark.parametrize(("kind", "held"), [
    ("amd_thermal_throttle", {"socket_thermal", "processor_hot"}),
    ("amd_ppt_throttle", {"ppt"}),
])  # fmt: skip
def test_throttling_is_violation_residency_and_ppt_is_the_power_cap(kind, held):
    _, got = scrape(fleet(**{kind: ("gpu-node-004", "gpu2", {})}))
    pct = {
        n.split("_violation_")[1].removesuffix("_residency_percentage"): v
        for n, labels, v in got
        if labels["gpu_id"] == "2" and n.endswith("_percentage")
    }
    assert {k for k, v in pct.items() if v == 100.0} == held
    acc = {n: v for n, labels, v in got if labels["gpu_id"] == "2" and n.endswith("accumulated")}
    assert all((v > 0) == any(h in n for h in held) for n, v in acc.items())


def test_a_mixed_fleet_serves_h100_nodes_natively_and_mi300x_gpus_as_dme_with_the_nics_native():
    sim = make_simulator(SimulateSettings(skus="h100:1,mi300x:1", nodes_per_leaf=2,
                                          telemetry="amd-dme", dme_prefix="amd_"))  # fmt: skip
    h100, mi300x = series(sim.metrics("gpu-node-001")), series(sim.metrics("gpu-node-003"))
    assert any(n == c.GPU_UP.name for n, _, _ in h100)
    assert not any(n.startswith("amd_") for n, _, _ in h100)
    assert {n for n, _, _ in mi300x if n.startswith(c.PREFIX + "gpu_")} == set()
    assert any(n == "amd_gpu_health" for n, _, _ in mi300x)
    ports = {labels["device"] for n, labels, _ in mi300x
             if n == c.IB_PORT_STATE.name}  # fmt: skip
    assert ports == {f"mlx5_{p}" for p in range(8)}  # the node's 8 NICs


def test_a_job_on_an_amd_node_is_dmes_job_id_label():
    f = fleet()
    sim = Simulator(f, telemetry="amd-dme", clock=lambda: 0.0, wall=lambda: 0.0)
    got = series(sim.metrics("gpu-node-004"))
    jobs = {labels.get("job_id") for n, labels, _ in got if n == "gpu_health"}
    assert jobs == {str(f.jobs.job_of[3])} and f.jobs.job_of[3] >= 0


def test_a_bad_dme_prefix_stops_the_start_with_a_reason():
    with pytest.raises(ValueError, match="--dme-prefix: 'amd' is not a metric-name prefix"):
        SimulateSettings(dme_prefix="amd")


def test_a_reboot_restarts_xgmi_and_ras_counters_on_an_amd_node():
    f = fleet(amd_deferred_errors=("gpu-node-004", "gpu3", {"count": 2}))
    f.inject("reboot", "gpu-node-004", "node", {}, onset=90)
    frames = run(f, 900)
    ras = frames[-1][c.GPU_RAS_ERRORS.name][3, 3]
    assert np.nansum(ras) == 0


def test_a_served_node_scraped_seldom_still_shows_a_ras_event_of_a_step_between_its_scrapes():
    f = fleet()
    now = [0.0]
    sim = Simulator(f, telemetry="amd-dme", clock=lambda: now[0], wall=lambda: now[0])
    sim.metrics("gpu-node-004")
    sim.inject({"node": "gpu-node-004", "kind": "amd_hbm_uncorrectable", "target": "gpu1"})
    now[0] = 10.0  # ten model steps later: the event's step was not the last one
    got = series(sim.metrics("gpu-node-004"))
    assert [(labels["gpu_id"], v) for n, labels, v in got if n == dme.AFID_ERRORS] == [("1", 20.0)]
