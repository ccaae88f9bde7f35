"""MI300X nodes in the fleet model: an 8-GPU XGMI hive per node, RAS errors per block, RAS
events by AFID, and the AMD fault kinds (simulator.faults.amd)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from exporter import catalog as c
from simulator.amd import AFID_SEVERITY, BLOCK, ERROR, RasEvent
from simulator.faults import FaultError
from simulator.fleet import Fleet
from tests.simulator.helpers import at, busy_fleet, run

ROOT = Path(__file__).resolve().parents[2]
TX, RAS = c.GPU_XGMI_TRANSMIT.name, c.GPU_RAS_ERRORS.name


def mixed(**kw: object) -> Fleet:
    """Two H100 nodes (gpu-node-001, -002) beside two MI300X nodes (-003, -004), all busy."""
    return busy_fleet(4, 3, nodes_per_leaf=2, skus=["h100", "h100", "mi300x", "mi300x"], **kw)


def test_an_mi300x_node_is_an_xgmi_hive_whose_own_index_carries_nothing_and_has_no_nvlink():
    fleet = mixed()
    frames = run(fleet, 300)
    a, b = at(frames, 150)[TX], frames[-1][TX]
    assert a.shape == (4, 8, 8) and np.isnan(a[:2]).all()  # H100 nodes: no XGMI
    own = np.eye(8, dtype=bool)
    assert (b[2:][:, own] == 0).all()  # the GPU's own index
    assert (b[2:][:, ~own] > a[2:][:, ~own]).all()  # every peer link rises in a job
    assert np.isnan(frames[-1][c.NVLINK_TRANSMIT.name][2:]).all()
    assert np.isnan(frames[-1][c.GPU_REMAPPED_ROWS.name][2:]).all()  # AMD retires pages
    assert fleet.models == ("h100-sxm", "h100-sxm", "mi300x", "mi300x")


def test_a_fleet_without_amd_nodes_has_no_amd_arrays_and_replays_as_before():
    one, two = Fleet(3, 5), Fleet(3, 5)
    fa, fb = run(one, 120)[-1], run(two, 120)[-1]
    assert TX not in fa.metrics and RAS not in fa.metrics and fa.ras_events == ()
    for k in fa.metrics:
        np.testing.assert_array_equal(fa[k], fb[k])


def test_amd_faults_refuse_an_nvidia_node_and_an_xgmi_link_to_the_gpu_itself():
    fleet = mixed()
    with pytest.raises(FaultError, match="needs an AMD node: gpu-node-001 is h100"):
        fleet.inject("amd_gpu_lost", "gpu-node-001", "gpu1")
    with pytest.raises(FaultError, match="not the GPU itself"):
        fleet.inject("xgmi_link_down", "gpu-node-003", "gpu2/2")
    with pytest.raises(FaultError, match="AMD has no power brake"):
        fleet.inject("amd_ppt_throttle", "gpu-node-003", "gpu2", {"brake": True})
    with pytest.raises(FaultError, match="then must be 0 or an AFID"):
        fleet.inject("amd_afid_event", "gpu-node-003", "gpu2", {"then": 19})
    assert fleet.truth() == []  # nothing half-added


def test_a_lost_xgmi_link_is_flat_both_ways_while_its_siblings_rise_with_xgmi_wafl_errors():
    fleet = mixed()
    fleet.inject("xgmi_link_down", "gpu-node-003", "gpu2/5", {"rate": 0.05}, onset=60)
    frames = run(fleet, 600)
    a, b = at(frames, 120)[TX][2], frames[-1][TX][2]
    assert b[2, 5] == a[2, 5] and b[5, 2] == a[5, 2]  # flat, both ends
    assert (b[2, [0, 1, 3, 4, 6, 7]] > a[2, [0, 1, 3, 4, 6, 7]]).all()  # the siblings rise
    ras = frames[-1][RAS][2, 2, BLOCK["xgmi_wafl"]]
    assert ras[ERROR["uncorrectable"]] == 1 and ras[ERROR["correctable"]] > 0
    assert [(e.gpu, e.afid) for e in fleet.ras_events] == [(2, 18)]


def test_an_hbm_uncorrectable_error_counts_in_umc_and_the_totals_and_is_one_afid_20_event():
    fleet = mixed()
    fleet.inject("amd_hbm_uncorrectable", "gpu-node-004", "gpu1", onset=30)
    fleet.inject("amd_deferred_errors", "gpu-node-004", "gpu3", {"count": 3}, onset=30)
    before = int(fleet.jobs.job_of[3])
    last = run(fleet, 90)[-1]
    assert last[RAS][3, 1, BLOCK["umc"], ERROR["uncorrectable"]] == 1
    assert last[c.GPU_ECC_ERRORS.name][3, 1, 1, 0] == 1  # uncorrected, volatile
    assert last[RAS][3, 3, BLOCK["umc"], ERROR["deferred"]] == 3
    assert last[c.GPU_ECC_ERRORS.name][3, 3, 1, 0] == 0  # deferred: not (yet) uncorrected
    assert fleet.ras_events == [RasEvent(30.0, 3, 1, 20, "fatal")]
    assert before >= 0 and before not in fleet.jobs.running  # the fatal error ended the job


def test_two_ras_events_within_one_scrape_are_both_in_the_model():
    fleet = mixed()
    fleet.inject("amd_afid_event", "gpu-node-003", "gpu6", {"afid": 27, "then": 22}, onset=30)
    run(fleet, 60)
    assert [(e.t, e.afid, e.severity) for e in fleet.ras_events] == [
        (30.0, 27, "fatal"), (35.0, 22, "non_fatal_uncorrected")]  # fmt: skip


def test_the_simulators_afid_severities_are_amds():
    vendored = yaml.safe_load((ROOT / "analyzer" / "afid_catalog.yaml").read_text())["afids"]
    for afid, severity in AFID_SEVERITY.items():
        theirs = vendored[afid]["cper_severity"]
        ok = {theirs} if theirs != "uncorrected" else {"fatal", "non_fatal_uncorrected"}
        assert severity in ok, (afid, severity, theirs)
