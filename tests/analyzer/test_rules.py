"""Rule detectors on synthetic windows: memory, NVLink, InfiniBand, PCIe, throttling, silence."""

import numpy as np

from analyzer.detectors.infiniband import InfinibandDetector
from analyzer.detectors.memory import MemoryDetector
from analyzer.detectors.missing import MissingDetector
from analyzer.detectors.nvlink import NvlinkDetector
from analyzer.detectors.pcie import PcieDetector
from analyzer.detectors.throttling import ThrottlingDetector
from analyzer.engine import Engine
from analyzer.findings import Finding
from analyzer.window import THROTTLE_REASONS
from exporter import catalog as c

from .synth import healthy, keys, window


def test_healthy_fleet_gives_no_finding_from_any_rule_detector():
    w = window(healthy())
    for det in (MemoryDetector(), NvlinkDetector(), InfinibandDetector(), PcieDetector(),
                ThrottlingDetector(), MissingDetector()):  # fmt: skip
        assert det.detect(w) == [], det.name


def test_uncorrectable_ecc_increase_is_a_critical_drain_on_that_gpu():
    d = healthy()
    d["metrics"][c.GPU_ECC_ERRORS.name][30:, 2, 5, 1, 0] = 1
    out = MemoryDetector().detect(window(d))
    assert keys(out) == {("node-02", "gpu=5", "ecc_uncorrectable")}
    assert out[0].action == "drain" and out[0].since == d["t"][30]


def test_row_remap_pending_recommends_reset_and_failed_recommends_drain():
    d = healthy()
    d["metrics"][c.GPU_ROW_REMAP_PENDING.name][-3:, 1, 0] = 1
    d["metrics"][c.GPU_ROW_REMAP_FAILED.name][-1:, 3, 7] = 1
    out = {f.kind: f for f in MemoryDetector().detect(window(d))}
    assert (
        out["row_remap_pending"].action == "reboot" and out["row_remap_pending"].node == "node-01"
    )
    assert out["row_remap_failed"].action == "drain" and out["row_remap_failed"].subject == "gpu=7"


def test_rising_corrected_error_rate_is_flagged_but_a_counter_reset_is_not():
    d = healthy()
    sbe = d["metrics"][c.GPU_ECC_ERRORS.name][..., 0, 0]
    sbe[:, 0, 0] = np.cumsum(np.linspace(0, 10, len(d["t"])))  # 0 -> 10 errors per step
    sbe[:, 1, 1] = 1000.0
    sbe[20:, 1, 1] = 0.0  # reboot: counter restarts
    out = MemoryDetector().detect(window(d))
    assert keys(out) == {("node-00", "gpu=0", "sbe_rate_high")}


def test_nvlink_down_and_recurring_errors_are_per_link():
    d = healthy()
    d["metrics"][c.NVLINK_UP.name][-2:, 4, 3, 7] = 0
    err = d["metrics"][c.NVLINK_ERRORS.name]
    err[:, 5, 1, 2, 0] = np.cumsum(np.arange(len(d["t"])) > 35) * 2
    err[-1, 6, 0, 0, 0] = 1  # one background CRC error: no finding
    out = NvlinkDetector().detect(window(d))
    assert keys(out) == {("node-04", "link=gpu3/7", "nvlink_down"),
                         ("node-05", "link=gpu1/2", "nvlink_errors")}  # fmt: skip


def test_ib_port_down_rate_low_and_symbol_error_trend():
    d = healthy()
    d["metrics"][c.IB_PORT_STATE.name][-1, 0, 2] = 1
    d["metrics"][c.IB_PORT_RATE.name][:, 1, 4] = 25e9
    d["ib"]["symbol_error"][:, 2, 0] = np.cumsum(np.where(np.arange(len(d["t"])) > 36, 30.0, 0.0))
    out = InfinibandDetector().detect(window(d))
    assert keys(out) == {("node-00", "port=mlx5_2/1", "ib_port_down"),
                         ("node-01", "port=mlx5_4/1", "ib_rate_low"),
                         ("node-02", "port=mlx5_0/1", "ib_errors")}  # fmt: skip


def test_ib_flapping_after_three_down_up_cycles():
    d = healthy()
    for k in (5, 15, 25):
        d["metrics"][c.IB_PORT_STATE.name][k : k + 2, 3, 1] = 1
    out = InfinibandDetector().detect(window(d))
    assert ("node-03", "port=mlx5_1/1", "ib_flapping") in keys(out)


def test_a_leaf_switch_whose_nodes_all_lose_ib_is_one_switch_finding():
    d = healthy(nodes=8)
    d["metrics"][c.IB_PORT_STATE.name][-2:, 4:8, :] = 1
    leaf = {i: ("leaf-01" if i < 4 else "leaf-02") for i in range(8)}
    out = InfinibandDetector().detect(window(d, leaf_of=leaf))
    assert keys(out) == {("leaf-02", "switch=leaf-02", "switch_degraded")}
    assert out[0].action == "notify"


def test_pcie_width_downgrade_is_found_but_idle_generation_drop_is_not():
    d = healthy()
    d["metrics"][c.GPU_PCIE_WIDTH.name][:, 2, 6] = 8
    d["metrics"][c.GPU_PCIE_GENERATION.name][:, 3, 1] = 1
    d["metrics"][c.GPU_UTILIZATION.name][:, 3, 1] = 0.0  # idle GPUs drop the generation
    out = PcieDetector().detect(window(d))
    assert keys(out) == {("node-02", "gpu=6", "pcie_downgrade")}


def test_sustained_hardware_thermal_throttle_but_not_power_cap_reason():
    d = healthy()
    thr = d["metrics"][c.GPU_THROTTLE.name]
    thr[-6:, 1, 2, THROTTLE_REASONS.index("hw_thermal_slowdown")] = 1
    thr[:, 2, 2, THROTTLE_REASONS.index("sw_power_cap")] = 1
    out = ThrottlingDetector().detect(window(d))
    assert keys(out) == {("node-01", "gpu=2", "throttling")}


def test_lowered_power_limit_is_throttling():
    d = healthy()
    d["metrics"][c.GPU_POWER_LIMIT.name][:, 5, 0] = 400
    out = ThrottlingDetector().detect(window(d))
    assert keys(out) == {("node-05", "gpu=0", "throttling")}


def test_gpu_up_zero_is_gpu_lost_and_a_silent_node_is_node_missing():
    d = healthy()
    d["metrics"][c.GPU_UP.name][-1, 0, 4] = 0
    for a in d["metrics"].values():
        if a.ndim >= 3 and a.shape[2] == 8:
            a[-8:, 6] = np.nan
    out = MissingDetector().detect(window(d))
    assert keys(out) == {("node-00", "gpu=4", "gpu_lost"), ("node-06", "node", "node_missing")}


def test_random_scrape_gaps_make_no_finding():
    d = healthy()
    rng = np.random.default_rng(3)
    for a in d["metrics"].values():
        a[rng.random(a.shape) < 0.3] = np.nan
    for a in d["ib"].values():
        a[rng.random(a.shape) < 0.3] = np.nan
    w = window(d)
    for det in (MemoryDetector(), NvlinkDetector(), InfinibandDetector(), PcieDetector(),
                ThrottlingDetector(), MissingDetector()):  # fmt: skip
        assert det.detect(w) == [], det.name


def test_empty_and_nan_windows_give_no_finding():
    d = healthy(T=1)
    for a in d["metrics"].values():
        a[:] = np.nan
    w = window(d)
    for det in (MemoryDetector(), NvlinkDetector(), InfinibandDetector(), PcieDetector(),
                ThrottlingDetector(), MissingDetector()):  # fmt: skip
        assert det.detect(w) == [], det.name


def test_any_link_downed_increase_is_an_ib_error_even_between_state_samples():
    d = healthy()
    d["ib"]["link_downed"][-2:, 4, 3] = 1
    out = InfinibandDetector().detect(window(d))
    assert keys(out) == {("node-04", "port=mlx5_3/1", "ib_errors")}


def test_a_degraded_leaf_explains_its_nodes_network_symptoms_but_not_their_slow_clocks():
    d = healthy(nodes=8)
    d["metrics"][c.IB_PORT_STATE.name][-2:, 4:8, :] = 1
    leaf = {i: ("leaf-01" if i < 4 else "leaf-02") for i in range(8)}
    w = window(d, leaf_of=leaf)
    slow = Finding("node-05", "node", "straggler", "warning", "drain", "straggler", 1.0, 0.0,
                   {"clock_deficit": 1.0})  # fmt: skip
    waiting = Finding("node-06", "node", "straggler", "warning", "notify", "straggler", 1.0, 0.0,
                      {"clock_deficit": 0.0})  # fmt: skip

    class Fixed:
        name = "fixed"

        def detect(self, window: object) -> list[Finding]:
            return [slow, waiting]

    out = Engine([InfinibandDetector(), Fixed()]).cycle(w)
    assert {(f.node, f.kind) for f in out} == {
        ("leaf-02", "switch_degraded"),
        ("node-05", "straggler"),
    }
