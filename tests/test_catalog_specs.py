"""The per-model specification table: NVML names map to peer-group keys, and the values are
the published ones the analyzer falls back to when a peer group is too small."""

from __future__ import annotations

import pytest

from exporter import catalog_specs as cs


@pytest.mark.parametrize(
    ("nvml_name", "key"),
    [
        ("NVIDIA A100-SXM4-80GB", "a100-sxm"),
        ("NVIDIA A100-SXM4-40GB", "a100-sxm"),
        ("NVIDIA A100 80GB PCIe", "a100-pcie"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H200", "h200-sxm"),
        ("NVIDIA B200", "b200-sxm"),
        ("NVIDIA L40S", "l40s"),
        ("AMD Instinct MI300X OAM", "mi300x"),  # amd-smi's market name, DME's card_model
        ("AMD Instinct MI300X", "mi300x"),
        ("0x74a1", "mi300x"),  # the PCI device id where a model label carries it
        ("AMD Instinct MI325X OAM", "mi325x"),
        ("AMD Instinct MI355X", "mi355x"),
    ],
)
def test_nvml_device_names_map_to_their_model_key(nvml_name, key):
    assert cs.model_key(nvml_name) == key
    spec = cs.spec(nvml_name)
    assert spec is not None and spec.key == key


def test_an_unknown_model_keeps_its_own_name_and_has_no_spec():
    assert cs.model_key("  Tesla V100-SXM2-32GB ") == "tesla v100-sxm2-32gb"
    assert cs.spec("Tesla V100-SXM2-32GB") is None


def test_sxm_generations_carry_their_power_links_and_fabric():
    a100, h100 = cs.BY_KEY["a100-sxm"], cs.BY_KEY["h100-sxm"]
    assert (a100.power_limit_w, a100.nvlinks, a100.hca) == (400.0, 12, "HDR")
    assert (h100.power_limit_w, h100.nvlinks, h100.hca) == (700.0, 18, "NDR")
    assert cs.BY_KEY["b200-sxm"].nvlink_bytes_per_s == 2 * h100.nvlink_bytes_per_s
    assert h100.sm_clock_max_hz > a100.sm_clock_max_hz


def test_pcie_models_have_no_nvlink():
    for key in ("l40s", "h100-pcie", "a100-pcie"):
        assert cs.BY_KEY[key].nvlinks == 0 and cs.BY_KEY[key].form == "pcie"


def test_hca_rates_are_hdr_200_ndr_400_xdr_800_gigabits():
    assert cs.hca_rate("HDR") * 8 == 200e9
    assert cs.hca_rate("ndr") * 8 == 400e9
    assert cs.hca_rate("XDR") * 8 == 800e9
    assert cs.hca_rate("MT4123") == cs.hca_rate("HDR")  # ConnectX-6
    assert cs.hca_rate(12.5e9) == 12.5e9
    assert cs.BY_KEY["l40s"].hca_rate is None


@pytest.mark.parametrize("bad", ["QDR-ish", -1, True, ""])
def test_an_unknown_hca_rate_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="unknown HCA rate"):
        cs.hca_rate(bad)


def test_amd_instinct_models_have_no_nvlink_and_their_own_power_and_clock():
    mi300x, mi325x, mi355x = (cs.BY_KEY[k] for k in ("mi300x", "mi325x", "mi355x"))
    assert (mi300x.power_limit_w, mi325x.power_limit_w, mi355x.power_limit_w) == (750, 1000, 1400)
    assert all(s.nvlinks == 0 and s.form == "oam" for s in (mi300x, mi325x, mi355x))
    assert mi300x.memory_bytes < mi325x.memory_bytes < mi355x.memory_bytes
    assert cs.model_key("AMD Instinct MI300A") != "mi300x"  # the APU is a model of its own
