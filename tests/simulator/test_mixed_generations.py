"""Mixed generations: A100 SXM (400 W, 12 NVLinks, HDR), H100 SXM (700 W, 18, NDR) and a PCIe
L40S (no NVLink) side by side, with an administrator's power cap on one rack; the shapes stay
8 GPUs x 18 NVLinks (NaN where a model has fewer links)."""

from __future__ import annotations

import numpy as np
import pytest

from exporter import catalog as c
from simulator import Fleet
from tests.simulator.helpers import IB_RATE, NVL_TX, NVL_UP, POWER, SM, UP, run

SKUS = ("h100",) * 4 + ("a100",) * 4 + ("l40s",) * 4
LIMIT = c.GPU_POWER_LIMIT.name


def _fleet(**kw):
    return Fleet(12, seed=5, nodes_per_leaf=4, idle_fraction=0.0, skus=SKUS, **kw)


def test_each_generation_reports_its_own_limits_links_and_fabric():
    fleet = _fleet()
    frame = run(fleet, 600)[-1]
    h, a, pcie = slice(0, 4), slice(4, 8), slice(8, 12)
    assert np.all(frame[LIMIT][h] == 700) and np.all(frame[LIMIT][a] == 400)
    assert np.all(frame[LIMIT][pcie] == 350)
    assert frame[NVL_UP].shape == (12, 8, 18)
    assert np.all(frame[NVL_UP][h] == 1) and np.all(frame[NVL_UP][a, :, :12] == 1)
    assert np.isnan(frame[NVL_UP][a, :, 12:]).all() and np.isnan(frame[NVL_UP][pcie]).all()
    assert np.isnan(frame[NVL_TX][a, :, 12:]).all()
    assert np.all(frame[IB_RATE][h] == 50e9) and np.all(frame[IB_RATE][a] == 25e9)
    assert frame[SM][a].max() <= 1410e6 < frame[SM][h].max()
    assert np.all(frame[POWER][a] <= 400) and np.all(frame[UP] == 1)
    assert fleet.models == ("h100-sxm",) * 4 + ("a100-sxm",) * 4 + ("l40s",) * 4


def test_an_administrator_cap_lowers_one_racks_limit_and_power():
    capped = run(_fleet(power_caps={"leaf-01": 500.0}), 600)[-1]
    assert np.all(capped[LIMIT][:4] == 500) and np.all(capped[LIMIT][4:8] == 400)
    assert np.all(capped[POWER][:4] <= 500)


def test_a_homogeneous_fleet_is_unchanged_by_the_mixed_fleet_model():
    a, b = run(Fleet(4, seed=2), 300)[-1], run(Fleet(4, seed=2, skus=("h100",) * 4), 300)[-1]
    for name in a.metrics:
        assert np.array_equal(a[name], b[name], equal_nan=True), name


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        ({"skus": ("h100",) * 3}, "names 3 nodes"),
        ({"skus": ("h100",) * 3 + ("v100",)}, "unknown sku or leaf: v100"),
        ({"power_caps": {"leaf-99": 400}}, "unknown sku or leaf: leaf-99"),
        ({"power_caps": {"leaf-01": 0}}, "positive watts"),
    ],
)
def test_a_bad_mix_is_a_clear_error(kw, why):
    with pytest.raises(ValueError, match=why):
        Fleet(4, **kw)
