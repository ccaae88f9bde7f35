"""An MI300X node in compute partitions (CPX: 8 per GPU, 64 ``gpu_id``s) as DME serves it, read
through the AMD dialect: each partition's series name the physical GPU through partition 0
(which alone carries the physical sensors, ECC and RAS), so an uncorrectable HBM error under a
partition is the physical GPU's, and a partition's power of 0 never stands for its GPU's."""

from __future__ import annotations

from analyzer.sources.dialects import amd
from exporter import catalog as c
from exporter import catalog_amd as dme
from simulator.fleet import Fleet
from simulator.simulator import Simulator
from tests.analyzer.scrapeeval import _SOURCE, Answer, Sample, answers, names, samples

FAULTY = 5  # the physical GPU under whose partitions the HBM error happens


def _served(layout: str) -> list[Sample]:
    t = [0.0]
    f = Fleet(2, 7, skus=["mi300x", "mi300x"], partitions={0: layout})
    f.inject("amd_hbm_uncorrectable", f.nodes[0], f"gpu{FAULTY}", {"fatal": True}, onset=20)
    sim = Simulator(f, telemetry="amd-dme", clock=lambda: t[0], wall=lambda: t[0], tick_s=15)
    for _ in range(3):
        t[0] += 15
        body = sim.metrics(f.nodes[0]).decode()
    return samples(body)


def _read(data: list[Sample]) -> list[Answer]:
    """The dialect's queries the scrape evaluator understands (one field each; the presence
    query's ``or`` of several is Prometheus's, test_amd_prometheus.py)."""
    qs = [q for q in amd.queries(present=names(data)) if _SOURCE.match(q.source)]
    assert any(q.metric is c.GPU_ECC_ERRORS for q in qs)
    return answers(qs, data)


def test_dme_serves_a_cpx_gpu_as_eight_partitions_with_the_physical_sensors_on_partition_0():
    data = _served("cpx")
    health = [s for s in data if s.name == "gpu_health"]
    assert len(health) == 64 and {s.labels[dme.PARTITION_TYPE] for s in health} == {"cpx"}
    temp = [s for s in data if s.name == "gpu_junction_temperature"]
    assert sorted(int(s.labels[dme.GPU_ID]) for s in temp) == list(range(0, 64, 8))
    power = {int(s.labels[dme.GPU_ID]): s.value for s in data if s.name == "gpu_package_power"}
    assert len(power) == 64 and all(power[g] > 0 for g in range(0, 64, 8))
    assert all(v == 0 for g, v in power.items() if g % 8)  # no per-XCD power sensor
    serials = {s.labels[dme.GPU_ID]: s.labels[dme.SERIAL] for s in health}
    assert len(set(serials.values())) == 8  # the partitions carry their GPU's serial number
    ecc = [s for s in data if s.name == "gpu_ecc_uncorrect_umc" and s.value > 0]
    assert [(s.labels[dme.GPU_ID], s.labels[dme.PARTITION_ID]) for s in ecc] == [("40", "0")]


def test_an_hbm_error_under_a_partition_is_read_as_its_physical_gpus() -> None:
    data = _served("cpx")
    got = _read(data)
    ecc = {(a.labels["gpu"], a.labels.get("error_type")): a.value
           for a in got if a.metric == c.GPU_ECC_ERRORS.name and a.value > 0}  # fmt: skip
    assert {g for g, _ in ecc} == {str(FAULTY)}
    placed = {a.labels["gpu"] for a in got if a.labels.get("gpu")}
    assert placed == {str(g) for g in range(8)}  # eight physical GPUs, not 64 partitions
    temp = {a.labels["gpu"] for a in got if a.metric == c.GPU_TEMPERATURE.name}
    assert temp == {str(g) for g in range(8)}  # partition 0's sensor stands for its GPU
    # a partition's power of 0 (no per-XCD sensor) is placed nowhere: not its GPU's reading
    other = {dme.GPU_ID: "41", dme.PARTITION_ID: "1", dme.PARTITION_TYPE: "cpx", "hostname": "n"}
    assert amd.AmdRelabel()(other)["gpu"] == ""


def test_a_dpx_node_and_an_unpartitioned_node_read_the_same_eight_gpus() -> None:
    for layout in ("dpx", "spx"):
        data = _served(layout)
        got = _read(data)
        assert {a.labels["gpu"] for a in got if a.labels.get("gpu")} == {str(g) for g in range(8)}


def test_the_physical_gpu_of_a_partition_follows_its_mode() -> None:
    def gpu(gpu_id: str, part: str, mode: str) -> str:
        return amd.physical_gpu(
            {dme.GPU_ID: gpu_id, dme.PARTITION_ID: part, dme.PARTITION_TYPE: mode}
        )

    assert gpu("40", "0", "cpx") == "5" and gpu("41", "1", "cpx") == ""
    assert gpu("6", "0", "dpx") == "3" and gpu("7", "1", "dpx") == ""
    assert gpu("3", "0", "spx") == "3" and gpu("3", "NA", "") == "3"
    assert amd.physical_gpu({dme.GPU_ID: "4"}) == "4"  # a DME without the partition labels
