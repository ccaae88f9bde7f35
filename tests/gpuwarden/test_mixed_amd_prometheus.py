"""A simulated H100 + MI300X fleet through a real Prometheus: the H100 nodes on gpuwarden's
exporter, the MI300X GPUs as the simulator's DME serves them (``--telemetry amd-dme``), backfilled
with promtool and read the way the analyzer runs (discovery, then incremental reads every 30 s):
every AMD fault is found in AMD's dialect beside the NVIDIA one, under one policy."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from analyzer.detectors import default_detectors
from analyzer.engine import Engine
from analyzer.sources.prometheus import PrometheusSource
from gpuwarden.lab.evaluate import mixed_amd_fleet
from gpuwarden.lab.via_prometheus import Recorder, backfill, epoch_for, prometheus
from tests.realcomp import require_binary

END = 1500.0
FAULTS = [  # (kind, node, target, parameters, onset)
    ("xid", "gpu-node-002", "gpu3", {"xid": 79}, 907.0),
    ("xgmi_link_down", "gpu-node-005", "gpu2/5", {}, 700.0),
    ("amd_deferred_errors", "gpu-node-006", "gpu3", {"count": 2}, 907.0),
    ("amd_gpu_lost", "gpu-node-006", "gpu7", {}, 1000.0),
    ("amd_afid_event", "gpu-node-007", "gpu6", {"afid": 27, "then": 22}, 907.0),
    ("amd_hbm_uncorrectable", "gpu-node-008", "gpu1", {}, 907.0),
]


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, str], str]:
    require_binary("promtool")
    require_binary("prometheus")
    work: Path = tmp_path_factory.mktemp("mixed-amd")
    epoch = epoch_for(END)
    rec = Recorder(epoch, work, dme=True, dme_prefix="amd_")
    fleet = mixed_amd_fleet(8, 1, idle_fraction=0.0, small_job_share=0.0, mean_job_s=1e12)
    for kind, node, target, params, onset in FAULTS:
        fleet.inject(kind, node, target, params, onset=onset)
    for t in np.arange(15.0, END + 1, 15.0):
        rec(fleet, fleet.step(float(t)), fleet.jobs_at(float(t)), np.zeros(8, dtype=bool))
    backfill(rec.write_dme(work / "dme.om"), work / "tsdb")
    out: dict[tuple[str, str, str], str] = {}
    with prometheus(work / "tsdb", 15.0, work) as url:
        src = PrometheusSource(url, window=600.0, step=15.0, discover=True)
        engine = Engine(default_detectors())

        async def cycles() -> None:
            try:
                for t in np.arange(630.0, END + 1, 30.0):  # started on a healthy fleet
                    w = await src.read(epoch + t + src.settle)
                    for f in engine.cycle(w):
                        out.setdefault((f.node, f.subject, f.kind), f.action)
                    out.setdefault(
                        ("dialects", "", ""), ",".join(sorted(set(w.dialect_of.values())))
                    )
            finally:
                await src.close()

        asyncio.run(cycles())
    return out


@pytest.mark.real
def test_both_vendors_are_read_each_in_its_own_dialect(found):
    assert found[("dialects", "", "")] == "amd-dme,gpuwarden"


@pytest.mark.real
def test_every_amd_fault_is_found_through_dme_beside_the_nvidia_fault_under_one_policy(found):
    assert found[("gpu-node-002", "gpu=3", "xid_fatal")] == "drain"
    assert found[("gpu-node-005", "link=gpu2/5", "xgmi_link_lost")] == "drain"
    assert found[("gpu-node-006", "gpu=3", "ras_deferred")] == "cordon"
    assert found[("gpu-node-006", "gpu=7", "gpu_lost")] == "drain"
    assert found[("gpu-node-007", "gpu=6", "afid_event")] == "cordon"  # 22: the last event
    assert found[("gpu-node-008", "gpu=1", "afid_fatal")] == "drain"
    assert found[("gpu-node-008", "gpu=1", "ecc_uncorrectable")] == "drain"


@pytest.mark.real
def test_nothing_is_found_on_the_nodes_without_a_fault(found):
    faulty = {node for _, node, *_ in FAULTS} | {"dialects"}
    assert {k for k in found if k[0] not in faulty} == set()
