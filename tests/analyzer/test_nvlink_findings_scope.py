"""What an NVLink finding names, as remediation and an engineer read it: a domain-wide finding
is scoped to its NVLink domain (``scope="domain"``, no node), and a dcgm-exporter fleet's
per-GPU error sums give a finding about the GPU, never a link index nobody measured."""

from __future__ import annotations

import numpy as np

from analyzer.detectors import default_detectors
from analyzer.detectors.nvlink import NvlinkDetector
from analyzer.engine import Engine
from analyzer.output import alertmanager_alerts
from analyzer.sources.dialects import dcgm
from analyzer.window import Window
from exporter import catalog as c
from remediation import nvlink as remediation_nvlink

T, N, G, L = 8, 4, 8, 18
DOM = "9c6f5af3-53bf-49b5-a436-b66766c413c3.4026"


def _links_down_on_every_node() -> Window:
    up = np.ones((T, N, G, L))
    up[-4:, :, :, 2] = 0.0  # a switch tray: the same link on every GPU of the domain
    return Window(t=np.arange(T) * 15.0, nodes=tuple(f"gb200-{i:03d}" for i in range(N)),
                  metrics={c.NVLINK_UP.name: up}, nvlink_domain_of=dict.fromkeys(range(N), DOM),
                  gpus=G)  # fmt: skip


def test_the_nvlink_domain_finding_reaches_alertmanager_scoped_to_the_domain_not_a_node():
    [f] = NvlinkDetector().detect(_links_down_on_every_node())
    assert (f.kind, f.subject) == ("switch_degraded", f"nvlink_domain={DOM}")
    [alert] = alertmanager_alerts([f], now=f.since, resolve_after=45)
    labels = alert["labels"]
    assert labels["scope"] == "domain" and labels["nvlink_domain"] == DOM
    assert "node" not in labels  # a domain is not a node: nothing to drain by that name
    # remediation takes it as the domain's one incident (remediation/nvlink.py)
    assert remediation_nvlink.domain_of(labels) == DOM


def _dcgm_nvlink_window(dialect: str) -> Window:
    """GPU 5 of node 1 ramps CRC errors on its link 10; dcgm-exporter serves only the GPU's
    sum over its links (``DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL``, no link label), read
    through the dcgm reader's own query (its relabel places the sum on link 0)."""
    field = c.NVLINK_ERRORS.dcgm[0].name
    [q] = [q for q in dcgm.queries() if q.source == field]
    assert q.relabel is not None
    labels = q.relabel({"Hostname": "gpu-node-002", "gpu": "5", "modelName": "NVIDIA H100"})
    assert labels["link"] == "0" and labels["error_type"] == "crc_flit"
    per_link = np.zeros((T, N, G, L))
    per_link[:, 1, 5, 10] = np.cumsum(np.r_[0, [4] * (T - 1)])  # the truth: link 10
    err = np.full((T, N, G, L, len(c.NVLINK_ERROR_TYPES)), np.nan)
    err[:, :, :, 0, c.NVLINK_ERROR_TYPES.index("crc_flit")] = per_link.sum(axis=3) / q.divide
    return Window(t=np.arange(T) * 15.0, nodes=tuple(f"gpu-node-{i:03d}" for i in range(1, N + 1)),
                  metrics={c.NVLINK_ERRORS.name: err}, gpus=G,
                  dialect_of=dict.fromkeys(range(N), dialect))  # fmt: skip


def test_an_nvlink_error_ramp_on_a_dcgm_fleet_names_the_gpu_never_a_link_index():
    found = Engine(default_detectors()).cycle(_dcgm_nvlink_window("dcgm-exporter+node_exporter"))
    [f] = [f for f in found if f.kind == "nvlink_errors"]
    assert (f.node, f.subject) == ("gpu-node-002", "gpu=5")
    assert f.evidence["reduced_signal"] == 1.0 and "not to a link" in f.summary
    [alert] = alertmanager_alerts([f], now=f.since, resolve_after=45)
    assert alert["labels"]["gpu"] == "5" and "link" not in alert["labels"]


def test_the_same_sums_on_a_gpuwarden_node_stay_a_link_finding():
    # gpuwarden's exporter measures each link: its link index is real and kept
    [f] = NvlinkDetector().detect(_dcgm_nvlink_window("gpuwarden"))
    assert f.subject == "link=gpu5/0"


def test_every_finding_about_an_nvlink_domain_is_pushed_scoped_to_it():
    from analyzer.findings import Finding

    for kind, detector in (("switch_degraded", "fabric"),
                           ("domain_fabric_service_down", "fabric_services")):  # fmt: skip
        f = Finding(DOM, f"nvlink_domain={DOM}", kind, "critical", "notify", detector, 1.0, 0.0)
        [alert] = alertmanager_alerts([f], now=0.0, resolve_after=45)
        assert remediation_nvlink.domain_of(alert["labels"]) == DOM, kind
        assert "node" not in alert["labels"], kind
    # a node's own finding keeps its node and gets no scope
    f = Finding("gb200-001", "gpu=3", "fabric_degraded", "warning", "drain", "fabric", 1.0, 0.0)
    [alert] = alertmanager_alerts([f], now=0.0, resolve_after=45)
    assert alert["labels"]["node"] == "gb200-001" and "scope" not in alert["labels"]
