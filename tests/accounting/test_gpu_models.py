"""One canonical SKU per GPU model (family, form factor, memory size), so that the spellings
of one SKU (NVML's, a topology file's, an RMA record's) share an MTBF cell and two SKUs never
do; and the report's --since bounds what the journal path reads from Prometheus."""

from pathlib import Path

import pytest

from accounting import cli, ledger, report, text
from accounting.gpu_models import sku
from accounting.model import Exposure, Incident
from gpuwarden import cli as umbrella
from tests.accounting.fakeevidence import FakeEvidence
from tests.accounting.test_ledger import T, _first_run


@pytest.mark.parametrize(
    ("name", "want"),
    [
        # NVML's names (nvidia-smi --query-gpu=name, dcgm-exporter's modelName), an older
        # driver's, GPU feature discovery's dashed label, a topology file's, an RMA record's
        ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
        ("A100-SXM4-80GB", "A100 SXM4 80GB"),
        ("NVIDIA-A100-SXM4-80GB", "A100 SXM4 80GB"),
        ("A100 80GB SXM", "A100 SXM4 80GB"),
        ("a100 80 GB sxm4", "A100 SXM4 80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM4 40GB"),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM5 80GB"),
        ("H100 SXM 80GB", "H100 SXM5 80GB"),
        ("NVIDIA H100 PCIe", "H100 PCIe 80GB"),
        ("NVIDIA H100 NVL", "H100 NVL 94GB"),
        ("NVIDIA H200", "H200 SXM5 141GB"),
        ("NVIDIA H200 NVL", "H200 NVL 141GB"),
        ("Tesla V100-SXM2-32GB", "V100 SXM2 32GB"),
        ("Tesla V100S-PCIE-32GB", "V100S PCIe 32GB"),
        ("NVIDIA L40S", "L40S PCIe 48GB"),
        ("Tesla T4", "T4 PCIe 16GB"),
        # not one SKU: kept as given, merged with nothing but itself
        ("H100", "H100"),
        ("A100", "A100"),
        ("H100 80GB", "H100 80GB"),  # the PCIe card is 80 GB too
        ("H100 SXM4 80GB", "H100 SXM4 80GB"),  # no such board
        ("NVIDIA Tesla K20X", "NVIDIA Tesla K20X"),
        ("NVIDIA GB200", "NVIDIA GB200"),
        ("unknown", "unknown"),
        ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"),
    ],
)
def test_a_model_name_is_its_sku_with_memory_and_form_factor_or_kept_as_given(
    name: str, want: str
) -> None:
    assert sku(name) == want


def test_two_skus_of_one_family_are_never_one_cell() -> None:
    names = ["NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A100-PCIE-40GB",
             "NVIDIA A100 80GB PCIe", "A100", "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe",
             "NVIDIA H100 NVL", "H100"]  # fmt: skip
    assert len({sku(n) for n in names}) == len(names)


def test_the_nvml_name_and_a_topology_or_rma_spelling_of_one_sku_share_one_cell_showing_both(
    tmp_path: Path,
) -> None:
    # the journal (through Prometheus) says "NVIDIA H100 80GB HBM3", the imported RMA
    # history "H100 SXM5 80GB": one cell of 2 failures over both sources' exposure
    nvml = "NVIDIA H100 80GB HBM3"
    rows = [Exposure(f"s{g}", "gpu-node-001", str(g), nvml, T - 86400, T + 86400) for g in range(4)]
    fake = FakeEvidence(models={"gpu-node-001": nvml}, gpu_counts={"gpu-node-001": 4}, rows=rows)
    merged = cli.Ledger()
    merged.add(*ledger.from_journal(_first_run(tmp_path), fake))
    old = Incident("rma-7", "gpu-node-009", "2", "H100 SXM5 80GB", "gpu", "xid_fatal",
                   T - 3600, T - 3600, None, None, 0)  # fmt: skip
    merged.add([old], [Exposure("S9", "gpu-node-009", "2", "h100 sxm 80gb", T - 86400, T + 86400)])
    built = report.build(merged.incidents, merged.exposure, since=T - 86400, until=T + 86400)
    gpu_cells = [c for c in built.cells if c.component == "gpu"]
    assert [(c.gpu_model, c.failures) for c in gpu_cells] == [("H100 SXM5 80GB", 2)]
    # 4 GPUs for 2 days less gpu-node-001's hour out of service, and S9's 2 days
    assert gpu_cells[0].exposure_hours == pytest.approx(4 * 48 - 4 * (3630 - 30) / 3600 + 48)
    assert gpu_cells[0].names == ("H100 SXM5 80GB", "NVIDIA H100 80GB HBM3", "h100 sxm 80gb")
    doc = report.to_json(built)
    (cell,) = [c for c in doc["mtbf"] if c["component"] == "gpu"]
    assert cell["gpu_model_names"] == list(gpu_cells[0].names)
    assert "H100 SXM5 80GB given as: H100 SXM5 80GB, NVIDIA H100 80GB HBM3, h100 sxm 80gb" in (
        text.render(built)
    )
    # the exported ledger keeps the names as given
    assert {i.gpu_model for i in merged.incidents} == {nvml, "H100 SXM5 80GB"}


def test_a100_40gb_and_80gb_failures_are_two_cells(tmp_path: Path) -> None:
    def inc(id_: str, model: str) -> Incident:
        return Incident(id_, "n1", "0", model, "gpu", "xid_fatal", T, T, None, None, 0)

    built = report.build(
        [inc("a", "NVIDIA A100-SXM4-40GB"), inc("b", "NVIDIA A100-SXM4-80GB"), inc("c", "A100")],
        [],
        since=T - 3600,
        until=T + 3600,
    )
    assert sorted((c.gpu_model, c.failures) for c in built.cells) == [
        ("A100", 1),
        ("A100 SXM4 40GB", 1),
        ("A100 SXM4 80GB", 1),
    ]


def test_since_and_until_bound_the_exposure_the_journal_path_reads(tmp_path: Path) -> None:
    db = _first_run(tmp_path)
    default, bounded = FakeEvidence(), FakeEvidence()
    ledger.from_journal(db, default)
    ledger.from_journal(db, bounded, since=T - 90 * 86400, until=T + 86400)
    # by default from 30 days before the earliest time known (the alert's startsAt)
    assert default.ranges == [(T - 120 - 30 * 86400, T + 3630)]
    assert bounded.ranges == [(T - 90 * 86400, T + 86400)]


def test_the_report_command_passes_since_to_the_journal_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _first_run(tmp_path)
    fake = FakeEvidence()
    monkeypatch.setattr(ledger, "evidence_for", lambda url, gpus: fake)
    argv = ["report", "--state-db", str(db), "--prometheus", "http://prom.invalid:9090",
            "--since", "2026-10-01T00:00:00Z", "--until", "2027-01-16T00:00:00Z"]  # fmt: skip
    assert umbrella.main(argv) == 0
    capsys.readouterr()
    assert fake.ranges == [(1_790_812_800.0, 1_800_057_600.0)]
