"""The dcgm-exporter dialect against /metrics text real nodes served (issue 23).

Each fixture is a trimmed excerpt of a recorded scrape; fixtures/dcgm/README.md names its
origin. The analyzer's own dcgm queries are answered from it as Prometheus would answer them
(tests/analyzer/scrapeeval.py), so units, identity, model, job and the last-XID gauge are
checked against what dcgm-exporter really prints. Expected values are read off the recorded
lines by hand (the comment beside each says which line), not taken from a run of the code.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analyzer.sources.dialects import dcgm
from exporter import catalog as c

from . import scrapeeval as se

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "dcgm"
LKE = FIXTURES / "recorded-lke-rtx4000ada.txt"  # DCGM 4.4.1, dcgm-exporter 4.6.0
T4 = FIXTURES / "recorded-datadog-t4.txt"  # driver 460.106.00, no pci_bus_id / err_code
A30 = FIXTURES / "recorded-issue317-a30-mig.txt"  # MIG: one series per GPU instance


def _read(path: Path) -> tuple[list[se.Sample], list[se.Answer]]:
    data = se.samples(path.read_text())
    # as discovery would: only the names present, and every series names its host
    qs = dcgm.queries(present=se.names(data), hostname=True)
    return data, se.answers(qs, data)


def _one(answers: list[se.Answer], metric: c.MetricDef, gpu: str = "0") -> se.Answer:
    got = [a for a in answers if a.metric == metric.name and a.labels["gpu"] == gpu]
    assert len(got) == 1, (metric.name, gpu, got)
    return got[0]


def test_a_recorded_gpu_operator_scrape_reads_in_the_catalogues_units():
    _, got = _read(LKE)
    assert _one(got, c.GPU_SM_CLOCK).value == pytest.approx(2.31e9)  # "SM_CLOCK ... 2310" MHz
    assert _one(got, c.GPU_TEMPERATURE).value == 48.0  # "GPU_TEMP ... 48" C
    assert _one(got, c.GPU_MEMORY_TEMPERATURE).value == 0.0  # "MEMORY_TEMP ... 0": no sensor
    assert _one(got, c.GPU_POWER).value == pytest.approx(40.979)  # "POWER_USAGE ... 40.979000" W
    assert _one(got, c.GPU_UTILIZATION).value == 0.0  # "GPU_UTIL ... 0" %
    assert _one(got, c.GPU_TENSOR_ACTIVE).value == 0.0  # "PIPE_TENSOR_ACTIVE ... 0.000000"
    assert _one(got, c.GPU_ROW_REMAP_FAILED).value == 0.0  # "ROW_REMAP_FAILURE ... 0"


def test_an_older_scrape_without_pci_bus_id_or_err_code_reads_the_same_way():
    _, got = _read(T4)
    clock = _one(got, c.GPU_SM_CLOCK)
    assert clock.value == pytest.approx(3.0e8)  # "SM_CLOCK ... 300" MHz: an idle T4
    assert clock.labels == {"node": "424773df46e0", "gpu": "0"}  # the container's Hostname
    assert _one(got, c.GPU_TEMPERATURE).value == 25.0
    assert _one(got, c.GPU_POWER).value == pytest.approx(8.969)
    assert _one(got, c.GPU_INFO).labels["name"] == "Tesla T4"


def test_the_node_is_the_hostname_label_and_instance_is_not_read():
    data, got = _read(LKE)
    assert {a.labels["node"] for a in got} == {"lke529760-766837-0a634ab30000"}
    assert all(a.labels["gpu"] == "0" for a in got)
    # the same lines scraped by a Prometheus that adds instance: still the Hostname
    scraped = se.samples(LKE.read_text(), instance="10.2.2.187:9400")
    again = se.answers(dcgm.queries(present=se.names(data)), scraped)
    assert {a.labels["node"] for a in again} == {"lke529760-766837-0a634ab30000"}


def test_the_model_comes_from_modelname_and_presence_from_the_gpu_temperature():
    _, got = _read(LKE)
    assert _one(got, c.GPU_INFO).labels["name"] == "NVIDIA RTX 4000 Ada Generation"
    assert _one(got, c.GPU_UP).value == 1.0


def test_a_deployments_pod_is_its_job_without_the_replicaset_hash_and_pod_suffix():
    _, got = _read(LKE)
    jobs = [a for a in got if a.metric == c.GPU_ALLOCATION_INFO.name]
    # "namespace="default",pod="cuda-75454ffb9f-8ljq7"": the Deployment "cuda"; no hpc_job
    assert [a.labels["job_id"] for a in jobs] == ["default/cuda"]


def test_a_scrape_without_pod_or_hpc_job_labels_attributes_no_job():
    _, got = _read(T4)
    assert not [a for a in got if a.metric == c.GPU_ALLOCATION_INFO.name]


def test_mig_instances_of_one_gpu_read_as_that_gpu_once():
    data, got = _read(A30)
    clocks = [s for s in data if s.name == c.GPU_SM_CLOCK.dcgm[0].name]
    assert len(clocks) == 6  # GPU 0 has instances 3, 4, 5, 6; GPU 1 has 3, 4
    assert _one(got, c.GPU_SM_CLOCK, "0").value == pytest.approx(1.44e9)  # 1440 MHz
    assert _one(got, c.GPU_SM_CLOCK, "1").value == pytest.approx(1.44e9)
    assert _one(got, c.GPU_MEMORY_TEMPERATURE, "0").value == 35.0
    assert _one(got, c.GPU_MEMORY_TEMPERATURE, "1").value == 34.0
    node = {a.labels["node"] for a in got}
    assert node == {"yg-data-k8s-gpu-a30-node-test-test0003.mt"}


@pytest.mark.parametrize("path", [LKE, T4], ids=["4.x-err-code", "older"])
def test_the_recorded_last_xid_gauge_is_the_code_itself_and_zero_means_no_error(path):
    data, got = _read(path)
    xids = [s for s in data if s.name == c.DCGM_LAST_XID.name]
    assert len(xids) == 1 and xids[0].value == 0.0
    if "err_code" in xids[0].labels:  # dcgm-exporter 3.3.6+: the code as a label too
        assert xids[0].labels["err_code"] == "0" and xids[0].labels["err_msg"] == "No Error"
    q = next(q for q in dcgm.queries() if q.source == c.DCGM_LAST_XID.name)
    # a new code changes err_code/err_msg: grouped away, the GPU's row stays one series
    assert {"err_code", "err_msg"}.isdisjoint(q.by) and q.anchored
    assert _one(got, c.DCGM_LAST_XID).value == 0.0


def _events(row: list[float], anchor: float = np.nan) -> list[tuple[float, int]]:
    vals = np.array([row])
    found = dcgm.last_xid_events(vals, np.array([anchor]), np.array([0]), np.array([0]),
                                 np.arange(len(row)) * 30.0, np.ones((len(row), 1), bool))  # fmt: skip
    return [(e.t, e.xid) for e in found]


def test_the_recorded_no_error_value_held_over_a_window_is_no_event():
    _, got = _read(LKE)
    v = _one(got, c.DCGM_LAST_XID).value  # 0: "err_msg="No Error""
    assert _events([v, v, v]) == [] and _events([v, v], anchor=v) == []


def test_a_gpu_that_goes_from_the_recorded_no_error_to_an_xid_is_one_event_of_that_code():
    _, got = _read(LKE)
    v = _one(got, c.DCGM_LAST_XID).value
    # XID 79 (fallen off the bus) after the recorded 0, held: one event, at its first sample
    assert _events([v, 79.0, 79.0]) == [(30.0, 79)]
    assert _events([79.0, 79.0], anchor=v) == [(0.0, 79)]
