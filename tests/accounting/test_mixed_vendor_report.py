"""Per-model reliability on a fleet of AMD Instinct GPUs beside NVIDIA ones: each Instinct
spelling is one SKU (``MI300X OAM 192GB``) as each NVIDIA one is, one report table holds
MI300X beside H100 with each model's own MTBF, an AFID event counts against the component its
catalogue class names, and a real Prometheus's DME series (``gpu_health`` with ``card_model``,
``serial_number``, ``job_id``) are the AMD GPUs' exposure and jobs, beside gpuwarden's own
series for the NVIDIA ones."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from accounting import report, text
from accounting.components import component
from accounting.gpu_models import sku
from accounting.model import Exposure, Incident
from accounting.prometheus_evidence import PrometheusEvidence
from exporter import catalog as c
from tests.accounting.builders import at
from tests.accounting.helpers import prometheus_scraping
from tests.realcomp import Prometheus

DME_MODEL = "AMD Instinct MI300X OAM"  # DME's card_model (fixtures/amd-dme/)
NVML_H100 = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize(
    ("name", "want"),
    [
        (DME_MODEL, "MI300X OAM 192GB"),
        ("AMD Instinct MI300X", "MI300X OAM 192GB"),  # without the form factor
        ("MI300X", "MI300X OAM 192GB"),  # a topology file
        ("mi300x oam 192 GB", "MI300X OAM 192GB"),
        ("AMD Instinct MI325X OAM", "MI325X OAM 256GB"),
        ("AMD Instinct MI355X OAM", "MI355X OAM 288GB"),
        # not one known board: kept as given
        ("AMD Instinct MI300X VF", "AMD Instinct MI300X VF"),  # an SR-IOV virtual function
        ("AMD Instinct MI300A", "AMD Instinct MI300A"),  # the APU: not in the table
        ("MI300X 128GB", "MI300X 128GB"),  # a size the MI300X does not come in
        ("MI300X PCIe", "MI300X PCIe"),  # no such card
        ("H100 OAM 80GB", "H100 OAM 80GB"),  # NVIDIA makes no OAM H100
    ],
)
def test_an_instinct_name_is_its_sku_or_kept_as_given(name: str, want: str) -> None:
    assert sku(name) == want


def test_three_instinct_generations_are_three_cells_and_never_an_nvidia_one() -> None:
    names = [DME_MODEL, "AMD Instinct MI325X OAM", "AMD Instinct MI355X OAM", NVML_H100,
             "NVIDIA H200"]  # fmt: skip
    assert len({sku(n) for n in names}) == len(names)


def _incident(i: str, node: str, model: str, fault_class: str, hours: float) -> Incident:
    return Incident(i, node, "0", model, component(fault_class), fault_class, at(hours),
                    at(hours), None, None, 0)  # fmt: skip


def test_one_report_table_holds_mi300x_beside_h100_each_with_its_own_mtbf() -> None:
    # 8 H100s and 8 MI300Xs for 100 h; 1 GPU failure on the H100s, 2 on the MI300Xs (one
    # spelt as DME labels the model, one as amd-smi without the form factor)
    exposure = [Exposure(f"h{g}", "h100-01", str(g), NVML_H100, at(0), at(100)) for g in range(8)]
    exposure += [Exposure(f"m{g}", "mi300x-07", str(g), DME_MODEL, at(0), at(100))
                 for g in range(8)]  # fmt: skip
    incidents = [
        _incident("1", "h100-01", NVML_H100, "xid_fatal", 10),
        _incident("2", "mi300x-07", DME_MODEL, "xid_fatal", 20),
        _incident("3", "mi300x-07", "AMD Instinct MI300X", "gpu_lost", 30),
    ]
    built = report.build(incidents, exposure, since=at(0), until=at(100))
    gpu = {cell.gpu_model: cell for cell in built.cells if cell.component == "gpu"}
    assert sorted(gpu) == ["H100 SXM5 80GB", "MI300X OAM 192GB"]
    assert (gpu["H100 SXM5 80GB"].failures, gpu["MI300X OAM 192GB"].failures) == (1, 2)
    assert gpu["H100 SXM5 80GB"].exposure_hours == pytest.approx(800.0)
    assert gpu["MI300X OAM 192GB"].exposure_hours == pytest.approx(800.0)
    assert gpu["H100 SXM5 80GB"].mtbf_hours == pytest.approx(800.0)
    assert gpu["MI300X OAM 192GB"].mtbf_hours == pytest.approx(400.0)
    assert gpu["MI300X OAM 192GB"].names == ("AMD Instinct MI300X", DME_MODEL)
    rendered = text.render(built)
    table = rendered.split("MTBF per GPU model")[1]
    assert "H100 SXM5 80GB" in table and "MI300X OAM 192GB" in table
    assert f"MI300X OAM 192GB given as: AMD Instinct MI300X, {DME_MODEL}" in rendered


def test_an_afid_alert_counts_against_the_component_its_catalogue_class_names() -> None:
    assert component("xid_fatal", {"afid_class": "memory"}) == "gpu_memory"
    assert component("xid_fatal", {"afid_class": "link"}) == "nvlink"  # XGMI
    assert component("xid_fatal", {"afid_class": "hardware"}) == "gpu"
    assert component("faulty_machine", {"afid_class": "memory"}) == "host"  # not a GPU fault


def _scrape() -> bytes:
    """An H100 node as gpuwarden's exporter serves it and an MI300X node as DME does (GPU 1
    unhealthy: still there); job 42 (DME's Slurm prolog) holds GPU 0 of the MI300X node."""
    lines = [f"# TYPE {c.GPU_INFO.name} gauge", "# TYPE gpu_health gauge"]
    for g in ("0", "1"):
        lines.append(f'{c.GPU_INFO.name}{{node="h100-01",gpu="{g}",uuid="GPU-h-{g}",'
                     f'name="{NVML_H100}",serial="S-h-{g}"}} 1')  # fmt: skip
        job = ',job_id="42"' if g == "0" else ""
        lines.append(f'gpu_health{{hostname="mi300x-07",gpu_id="{g}",serial_number="PCB-{g}",'
                     f'gpu_uuid="{g}6ff74a1-0000-1000-80c5-3f2b9c5e0d10",card_model="{DME_MODEL}",'
                     f'gpu_partition_id="0",deployment_mode="baremetal"{job}}} {1 - int(g)}')  # fmt: skip
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture(scope="module")
def prom() -> Iterator[Prometheus]:
    with prometheus_scraping(_scrape(), "count_over_time(gpu_health[1m]) >= 4") as p:
        yield p


@pytest.mark.real
def test_dme_series_are_the_amd_gpus_exposure_beside_gpuwardens_for_the_nvidia_ones(
    prom: Prometheus,
) -> None:
    evidence = PrometheusEvidence(prom.url, step_s=1.0)
    now = time.time()
    rows = evidence.exposure(now - 120, now)
    assert sorted((r.node, r.gpu, str(r.unit), r.gpu_model) for r in rows) == [
        ("h100-01", "0", "S-h-0", NVML_H100), ("h100-01", "1", "S-h-1", NVML_H100),
        ("mi300x-07", "0", "PCB-0", DME_MODEL), ("mi300x-07", "1", "PCB-1", DME_MODEL),
    ]  # fmt: skip
    assert evidence.gpu_model("mi300x-07") == DME_MODEL
    assert evidence.gpus("mi300x-07") == evidence.gpus("h100-01") == 2
    (run,) = evidence.runs(now - 120, now)
    assert (run.job_id, run.gpus) == ("42", 1)
    # the mixed fleet's report: one table, both SKUs, from the Prometheus's own labels
    hbm = Incident("9", "mi300x-07", "1", DME_MODEL, component("memory"), "memory", now - 60,
                   now - 60, None, None, 0)  # fmt: skip
    built = report.build([hbm], rows, since=now - 120, until=now)
    memory = {
        cell.gpu_model: cell.failures for cell in built.cells if cell.component == "gpu_memory"
    }
    assert memory == {"H100 SXM5 80GB": 0, "MI300X OAM 192GB": 1}
