"""The renderer: text format details and the dcgm-exporter compatibility mapping."""

from __future__ import annotations

from exporter import catalog
from exporter.exposition import format_value, render

N = "node-a"


def _info(gpu: str, uuid: str, pci: str) -> catalog.Sample:
    return catalog.GPU_INFO.make(1, N, gpu, uuid, "NVIDIA H100 80GB HBM3", pci, "s", "v", "550")


def test_label_values_are_escaped_and_empty_labels_are_omitted() -> None:
    body = render([catalog.GPU_UP.make(1, N, "0", 'u"1\\x\n', "")]).decode()
    assert f'{catalog.GPU_UP.name}{{node="node-a",gpu="0",uuid="u\\"1\\\\x\\n"}} 1' in body
    assert "reason=" not in body


def test_values_render_as_integers_floats_and_special_values() -> None:
    assert [format_value(v) for v in (3.0, 0.25, float("nan"), float("inf"), -float("inf"))] == [
        "3",
        "0.25",
        "NaN",
        "+Inf",
        "-Inf",
    ]


def test_each_metric_gets_one_help_and_type_line_and_duplicate_series_render_once() -> None:
    s = catalog.GPU_TEMPERATURE.make(40, N, "0", "u0")
    body = render([s, s, catalog.GPU_TEMPERATURE.make(41, N, "1", "u1")]).decode()
    assert body.count(f"# TYPE {catalog.GPU_TEMPERATURE.name} gauge") == 1
    assert body.count('gpu="0"') == 1 and 'gpu="1",uuid="u1"} 41' in body


def test_dcgm_mode_renders_dcgm_names_units_and_identity_labels() -> None:
    samples = [
        _info("0", "GPU-a", "00000000:18:00.0"),
        catalog.GPU_SM_CLOCK.make(1.98e9, N, "0", "GPU-a"),
        catalog.GPU_MEMORY_USED.make(2 * 1048576, N, "0", "GPU-a"),
        catalog.GPU_UTILIZATION.make(0.5, N, "0", "GPU-a"),
    ]
    body = render(samples, dcgm=True).decode()
    ident = (
        'gpu="0",UUID="GPU-a",pci_bus_id="00000000:18:00.0",device="nvidia0",'
        'modelName="NVIDIA H100 80GB HBM3",Hostname="node-a",'
        f'{catalog.DCGM_DRIVER_LABEL}="550"'
    )
    for metric, value in (
        (catalog.GPU_SM_CLOCK, 1980),
        (catalog.GPU_MEMORY_USED, 2),
        (catalog.GPU_UTILIZATION, 50),
    ):
        assert f"{metric.dcgm[0].name}{{{ident}}} {value}" in body
        assert f"{metric.name}{{" in body  # native names stay


def test_dcgm_ecc_fields_pick_their_error_and_counter_type() -> None:
    samples = [_info("0", "GPU-a", "00000000:18:00.0")] + [
        catalog.GPU_ECC_ERRORS.make(v, N, "0", "GPU-a", et, ct)
        for v, et, ct in (
            (1, "corrected", "volatile"),
            (2, "uncorrected", "volatile"),
            (3, "corrected", "aggregate"),
            (4, "uncorrected", "aggregate"),
        )
    ]
    body = render(samples, dcgm=True).decode()
    for field, v in zip(catalog.GPU_ECC_ERRORS.dcgm, (1, 2, 3, 4), strict=True):
        assert f'{field.name}{{gpu="0"' in body
        assert any(
            ln.startswith(field.name + "{") and ln.endswith(f" {v}") for ln in body.splitlines()
        )


def test_dcgm_nvlink_totals_sum_over_links() -> None:
    samples = [_info("0", "GPU-a", "00000000:18:00.0")] + [
        catalog.NVLINK_ERRORS.make(link + 1, N, "0", "GPU-a", str(link), "crc_flit")
        for link in range(18)
    ]
    body = render(samples, dcgm=True).decode()
    crc_flit = catalog.NVLINK_ERRORS.dcgm[0].name
    line = next(ln for ln in body.splitlines() if ln.startswith(crc_flit + "{"))
    assert line.endswith(f" {sum(range(1, 19))}")


def test_dcgm_last_xid_gauge_comes_from_the_xid_collector_and_defaults_to_zero() -> None:
    samples = [
        _info("0", "GPU-a", "00000000:18:00.0"),
        _info("1", "GPU-b", "00000000:2a:00.0"),
        catalog.GPU_XID_ERRORS.make(2, N, "0", "GPU-a", "79"),
    ]
    body = render(samples, dcgm=True, last_xid={"0": 79}).decode()
    name = catalog.DCGM_LAST_XID.name
    lines = [ln for ln in body.splitlines() if ln.startswith(name + "{")]
    assert len(lines) == 2
    assert lines[0].startswith(name + '{gpu="0"') and lines[0].endswith(" 79")
    assert lines[1].endswith(" 0")
