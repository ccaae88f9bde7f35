"""Per-model baselines with AMD Instinct beside NVIDIA in one fleet (issue 34): an MI3xx GPU is
compared with its own model (or its specification when too few nodes of it report), never
with the fleet; shown both ways as tests/analyzer/test_mixed_fleet.py does for A100/H100."""

from __future__ import annotations

from dataclasses import replace

from analyzer.detectors.throttling import ThrottlingDetector
from exporter import catalog as c

from .synth import healthy, keys, window


def _fleet(h100: int, amd: int, model: str, limit: float):
    d = healthy(h100 + amd)
    m, a = d["metrics"], slice(h100, None)
    m[c.GPU_POWER_LIMIT.name][:, a] = limit
    m[c.GPU_POWER.name][:, a] += limit - 700.0
    m[c.GPU_SM_CLOCK.name][:, a] = 2100e6
    return d, ("h100-sxm",) * h100 + (model,) * amd


def test_h100s_are_not_capped_because_a_mi325x_majority_draws_1000_w():
    d, sku = _fleet(4, 8, "mi325x", 1000.0)
    assert any(f.kind == "throttling" for f in ThrottlingDetector().detect(window(d))), "cause"
    assert ThrottlingDetector().detect(replace(window(d), sku=sku)) == []


def test_a_capped_mi325x_is_found_against_its_own_models_limit():
    d, sku = _fleet(4, 8, "mi325x", 1000.0)
    d["metrics"][c.GPU_POWER_LIMIT.name][:, 9, 1] = 600.0
    got = ThrottlingDetector().detect(replace(window(d), sku=sku))
    assert keys(got) == {("node-09", "gpu=1", "throttling")}
    assert got[0].evidence["model_limit_w"] == 1000.0


def test_two_mi300x_nodes_fall_back_to_the_mi300x_specification_never_the_fleet():
    d, sku = _fleet(8, 2, "mi300x", 750.0)
    d["metrics"][c.GPU_POWER_LIMIT.name][:, 9, :] = 500.0  # one MI300X node capped hard
    got = ThrottlingDetector().detect(replace(window(d), sku=sku))
    assert {f.node for f in got} == {"node-09"}
    assert {f.evidence["model_limit_w"] for f in got} == {750.0}  # MI300X board power
