"""A PCIe link that trained below its peers' on a fleet that exports no maximum link
(dcgm-exporter serves ``DCGM_FI_DEV_PCIE_LINK_GEN`` / ``..._WIDTH`` and nothing like a
maximum): the GPU's same-model peers, and its own node's siblings, are the reference."""

from __future__ import annotations

import numpy as np
import pytest

from analyzer.detectors.pcie import PcieDetector
from analyzer.sources.dialects import DCGM, dcgm
from analyzer.window import Window
from exporter import catalog as c

T, N, G = 12, 4, 8


def _dcgm(metric: c.MetricDef) -> str:
    return metric.dcgm[0].name


def _read(gen: np.ndarray, width: np.ndarray, util: np.ndarray, sku: tuple[str, ...]) -> Window:
    """The window the dcgm reader makes of dcgm-exporter's fields (its queries' ``divide``:
    generation and width as served, utilisation % -> ratio); no maximum-link series."""
    series = {_dcgm(c.GPU_PCIE_GENERATION): gen, _dcgm(c.GPU_PCIE_WIDTH): width,
              _dcgm(c.GPU_UTILIZATION): util}  # fmt: skip
    metrics = {}
    for q in dcgm.queries():
        if q.source in series and q.metric.name not in metrics:
            metrics[q.metric.name] = series[q.source] / q.divide
    assert set(metrics) == {c.GPU_PCIE_GENERATION.name, c.GPU_PCIE_WIDTH.name,
                            c.GPU_UTILIZATION.name}  # fmt: skip
    return Window(t=15.0 * np.arange(T), nodes=tuple(f"gpu-{i:02d}" for i in range(N)),
                  metrics=metrics, sku=sku, gpus=G,
                  dialect_of=dict.fromkeys(range(N), DCGM))  # fmt: skip


def _fleet(gen: float = 5.0, width: float = 16.0, util: float = 95.0):
    shape = (T, N, G)
    return np.full(shape, gen), np.full(shape, width), np.full(shape, util)


H100 = ("h100-sxm",) * N


def test_a_gpu_trained_a_generation_below_its_same_model_peers_is_a_finding():
    gen, width, util = _fleet()
    gen[:, 2, 3] = 4.0  # one GPU's link trained at Gen4, its peers and siblings at Gen5
    [f] = PcieDetector().detect(_read(gen, width, util, H100))
    assert (f.node, f.subject, f.kind, f.action) == ("gpu-02", "gpu=3", "pcie_downgrade", "drain")
    assert f.evidence["generation"] == 4.0 and f.evidence["peer_generation"] == 5.0
    assert "peers" in f.summary


def test_a_gpu_below_its_peers_width_is_a_finding_busy_or_not():
    gen, width, util = _fleet(util=0.0)
    width[:, 1, 6] = 8.0
    [f] = PcieDetector().detect(_read(gen, width, util, H100))
    assert (f.node, f.subject) == ("gpu-01", "gpu=6") and f.evidence["peer_width"] == 16.0


def test_a_fleet_whose_gpus_of_a_model_all_run_at_the_lower_generation_is_no_finding():
    gen, width, util = _fleet(gen=4.0)
    assert PcieDetector().detect(_read(gen, width, util, H100)) == []


def test_different_models_are_never_compared():
    gen, width, util = _fleet()
    gen[:, :2] = 4.0  # two A100 nodes (PCIe Gen4 parts) beside H100 nodes at Gen5
    sku = ("a100-sxm", "a100-sxm", "h100-sxm", "h100-sxm")
    assert PcieDetector().detect(_read(gen, width, util, sku)) == []
    # ... and a model with too few nodes to be its own peers is not judged at all
    gen[:, 0, 5] = 3.0
    assert PcieDetector().detect(_read(gen, width, util, sku)) == []


def test_a_node_whose_gpus_all_run_at_the_lower_generation_is_its_platform_not_a_fault():
    gen, width, util = _fleet()
    gen[:, 3] = 4.0
    assert PcieDetector().detect(_read(gen, width, util, H100)) == []


@pytest.mark.parametrize("idle", [True, False], ids=["idle", "unknown-load"])
def test_a_lower_generation_while_idle_or_unknown_load_is_not_judged(idle):
    gen, width, util = _fleet()
    gen[:, 2, 3] = 2.0  # GPUs drop the generation at idle to save power
    util[:, 2, 3] = 0.0 if idle else np.nan
    assert PcieDetector().detect(_read(gen, width, util, H100)) == []
