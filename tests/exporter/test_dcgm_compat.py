"""``--compat dcgm`` is a drop-in for dcgm-exporter: every default field, named, typed, labelled
and formatted as dcgm-exporter renders it (checked against its vendored default-counters.csv)."""

from __future__ import annotations

import re
from pathlib import Path

import pynvml
import pytest

from exporter import catalog as c
from exporter.assemble import collectors_for
from exporter.collection import CollectionLoop
from exporter.collectors.gpu import GpuCollector
from exporter.exposition import render
from exporter.sources.kmsg import ListKernelLog
from exporter.sources.sysfs import DictSysfs
from exporter.xid_messages import message
from simulator.nvml_fake import FakeGpuState, FakeNvml
from tests.realcomp import promtool

CSV = Path(__file__).resolve().parents[2] / "fixtures" / "dcgm" / "default-counters.csv"
ROW = re.compile(r"^#?\s*(DCGM_\w+)\s*,\s*(\w+)\s*,\s*(.*?)\s*$")


def _csv_rows() -> list[tuple[str, str, str, bool]]:
    """(field, type, help, enabled by default) for every field, commented ones too.

    A field listed twice (PCIE_TX_BYTES: a commented counter and an enabled DCP gauge) is
    taken from its enabled row, the one dcgm-exporter renders by default.
    """
    rows: dict[str, tuple[str, str, str, bool]] = {}
    for line in CSV.read_text().splitlines():
        m = ROW.match(line)
        if m and (m[1] not in rows or not line.startswith("#")):
            rows[m[1]] = (m[1], m[2], m[3], not line.startswith("#"))
    return list(rows.values())


def _node(gpu: FakeGpuState | None = None) -> FakeNvml:
    g = gpu or FakeGpuState.h100(0)
    g.vgpu_licensed = True
    g.sm_clock_mhz, g.util_gpu_pct, g.enc_util_pct, g.dec_util_pct = 1755, 97, 3, 7
    g.tensor_active_pct, g.gr_engine_active_pct, g.dram_active_pct = 61.5, 98.25, 40.0
    g.pcie_tx_mib_s, g.pcie_rx_mib_s = 12.5, 300.0
    g.violations_ns[pynvml.NVML_PERF_POLICY_POWER] = 2_500_000_000
    g.remapped_rows = (3, 1, 0, 0)
    g.nvlink_tx_bytes[0], g.nvlink_rx_bytes[1] = 4096 * 1024, 1024 * 1024
    return FakeNvml([g], driver_version="550.54.15")


def _scrape(nvml: FakeNvml, *, hostname_label: str = "Hostname", kmsg: list[str] = ()) -> str:
    cols = collectors_for("n1", nvml, DictSysfs(), ListKernelLog(list(kmsg)))
    loop = CollectionLoop(
        cols, "n1", source="test", interval=5, dcgm=True, hostname_label=hostname_label
    )
    loop.run_once()  # profiling (GPM) needs a pair of samples
    return loop.run_once().body.decode()


def _lines(body: str, name: str) -> list[str]:
    return [ln for ln in body.splitlines() if ln.startswith(name + "{")]


def test_the_vendored_csv_is_the_real_file_with_its_source_and_commit() -> None:
    head = CSV.read_text().splitlines()[:3]
    assert "github.com/NVIDIA/dcgm-exporter/blob/" in head[1]
    assert re.search(r"[0-9a-f]{40}", head[1])
    assert len([r for r in _csv_rows() if r[3]]) >= 25


# Opt-in rows we do not serve: dcgm-exporter's own DCGM_EXP_* series and per-lane NVLink
# bandwidth (the native per-link byte counters carry that, by link).
NOT_SERVED = ("DCGM_EXP_", c.NVLINK_TRANSMIT.dcgm[0].name.replace("TOTAL", "L"))


def test_every_row_we_do_not_serve_is_opt_in_in_the_csv() -> None:
    skipped = [r for r in _csv_rows() if r[0].startswith(NOT_SERVED)]
    assert skipped and not any(enabled for *_, enabled in skipped)


@pytest.mark.parametrize(
    "row",
    [r for r in _csv_rows() if r[1] != "label" and not r[0].startswith(NOT_SERVED)],
    ids=lambda r: r[0],
)
def test_each_dcgm_csv_field_we_serve_has_dcgm_exporters_type_and_help(
    row: tuple[str, str, str, bool],
) -> None:
    name, type_, help_, enabled = row
    fields = c.dcgm_fields()
    if name == c.DCGM_LAST_XID.name:
        assert (type_, help_) == ("gauge", c.DCGM_LAST_XID_HELP)
        return
    assert name in fields, f"{name} (dcgm default: {enabled}) has no source in the catalogue"
    assert (fields[name].type, fields[name].help) == (type_, help_)


def test_every_default_field_of_the_csv_is_in_one_scrape_with_its_type_line() -> None:
    body = _scrape(_node())
    for name, type_, _, enabled in _csv_rows():
        if enabled and type_ != "label":
            assert f"# TYPE {name} {type_}" in body, name
            assert _lines(body, name), name


def test_every_dcgm_series_carries_the_driver_version_label_and_the_identity() -> None:
    body = _scrape(_node())
    dcgm = [ln for ln in body.splitlines() if ln.startswith("DCGM_")]
    assert len(dcgm) > 25
    for ln in dcgm:
        assert f'{c.DCGM_DRIVER_LABEL}="550.54.15"' in ln, ln
        assert 'gpu="0",UUID="GPU-' in ln and 'device="nvidia0"' in ln and 'Hostname="n1"' in ln


def test_hostname_label_can_be_dcgm_exporter_4s_lowercase_hostname() -> None:
    body = _scrape(_node(), hostname_label="hostname")
    temp = c.GPU_TEMPERATURE.dcgm[0].name
    assert 'hostname="n1"' in _lines(body, temp)[0] and "Hostname=" not in body


def test_a_bad_hostname_label_is_refused_at_start_up() -> None:
    from exporter.settings import ExporterSettings

    with pytest.raises(ValueError, match="hostname-label"):
        ExporterSettings(hostname_label="HOST")


def test_integer_fields_print_without_a_fraction_and_ratios_keep_theirs() -> None:
    body = _scrape(_node())
    for name, field in c.dcgm_fields().items():
        for ln in _lines(body, name):
            value = ln.rsplit(" ", 1)[1]
            if field.integer:
                assert re.fullmatch(r"-?\d+", value), ln
    assert _lines(body, c.GPU_SM_CLOCK.dcgm[0].name)[0].endswith(" 1755")
    assert _lines(body, c.GPU_TENSOR_ACTIVE.dcgm[0].name)[0].endswith(" 0.615")
    assert _lines(body, c.GPU_GRAPHICS_ACTIVE.dcgm[0].name)[0].endswith(" 0.9825")


def test_units_are_dcgms_percent_mib_nanoseconds_and_bytes() -> None:
    body = _scrape(_node())
    value = {
        n: float(_lines(body, n)[0].rsplit(" ", 1)[1]) for n in c.dcgm_fields() if _lines(body, n)
    }
    assert value[c.GPU_UTILIZATION.dcgm[0].name] == 97
    assert value[c.GPU_ENCODER_UTILIZATION.dcgm[0].name] == 3
    assert value[c.GPU_DECODER_UTILIZATION.dcgm[0].name] == 7
    assert value[c.GPU_MEMORY_RESERVED.dcgm[0].name] == 608
    power = next(f.name for f in c.GPU_CLOCK_VIOLATION.dcgm if ("policy", "power") in f.match)
    assert value[power] == 2_500_000_000
    assert value[c.GPU_PCIE_RECEIVE_RATE.dcgm[0].name] == 300 * 1048576
    assert value[c.NVLINK_TRANSMIT.dcgm[0].name] == 5 * 1024 * 1024  # TX + RX, every link
    assert value[c.GPU_REMAPPED_ROWS.dcgm[0].name] == 3


def test_remapped_rows_and_violations_are_counters_as_in_dcgm() -> None:
    body = _scrape(_node())
    for f in (*c.GPU_REMAPPED_ROWS.dcgm, *c.GPU_CLOCK_VIOLATION.dcgm[:1]):
        assert f"# TYPE {f.name} counter" in body


def test_the_xid_series_carries_err_code_and_err_msg_and_zero_means_no_error() -> None:
    nvml = _node()
    nvml.gpus.append(FakeGpuState.h100(1))
    line = "[ 12.5] NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus."
    body = _scrape(nvml, kmsg=[line])
    xid = _lines(body, c.DCGM_LAST_XID.name)
    assert xid[0].endswith(f'err_code="79",err_msg="{message(79)}"}} 79')
    assert xid[1].endswith('err_code="0",err_msg="No Error"} 0')
    assert message(100000) == "Unknown Error"


def test_an_ampere_gpu_without_dcgm_has_no_profiling_series_and_says_why() -> None:
    body = _scrape(_node(FakeGpuState.a100(0)))
    for m in c.PROFILING_METRICS:
        assert not _lines(body, m.name) and not _lines(body, m.dcgm[0].name)
        assert (
            f'{c.FIELD_UNAVAILABLE.name}{{node="n1",gpu="0",metric="{m.name}",'
            'reason="gpm_unsupported"} 1'
        ) in body


def test_gpm_samples_are_freed_and_profiling_starts_on_the_second_cycle() -> None:
    nvml = _node()
    col = GpuCollector(nvml, "n1")
    first = {s.metric for s in col.collect()}
    assert not first & set(c.PROFILING_METRICS)
    for _ in range(3):
        assert set(c.PROFILING_METRICS) <= {s.metric for s in col.collect()}
    assert sum(not s.freed for s in nvml.gpm_samples) == 1  # only the latest is kept
    col.close()
    assert all(s.freed for s in nvml.gpm_samples)


@pytest.mark.real
@pytest.mark.parametrize("label", c.HOSTNAME_LABELS)
def test_a_dcgm_mode_scrape_parses_in_promtool_and_breaks_only_dcgm_naming_rules(
    label: str,
) -> None:
    r = promtool("check", "metrics", stdin=_scrape(_node(), hostname_label=label).encode())
    problems = set(r.stderr.decode().splitlines())
    assert r.returncode in (0, 3), problems  # 1 would be a format error
    assert all(p.split()[0] in c.dcgm_names() for p in problems), problems
    naming = ("camelCase", '"_total" suffix', "should not include type 'counter'")
    assert all(any(n in p for n in naming) for p in problems), problems


def test_native_mode_is_unchanged_by_dcgm_fields() -> None:
    body = render(GpuCollector(_node(), "n1").collect()).decode()
    assert "DCGM_" not in body
