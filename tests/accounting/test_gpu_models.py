"""One spelling per GPU model family, so that the journal's NVML names and imported
history's family names fall into one MTBF cell; and the report's --since bounds what the
journal path reads from Prometheus."""

from pathlib import Path

import pytest

from accounting import cli, ledger, report
from accounting.gpu_models import family
from accounting.model import Exposure, Incident
from gpuwarden import cli as umbrella
from tests.accounting.fakeevidence import FakeEvidence
from tests.accounting.test_ledger import T, _first_run


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("H100", "H100"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("h100", "H100"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe"),
        ("NVIDIA GB200", "GB200"),
        ("Tesla V100-SXM2-32GB", "V100"),
        ("unknown", "unknown"),
        ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"),  # no family: kept as given
    ],
)
def test_a_model_name_is_spelt_as_its_family_with_pcie_cards_apart(name: str, want: str) -> None:
    assert family(name) == want


def test_a_journal_incident_and_an_imported_one_of_one_family_share_one_cell(
    tmp_path: Path,
) -> None:
    # the journal (through Prometheus) says "NVIDIA H100 80GB HBM3", the imported RMA
    # history says "H100": one cell of 2 failures over both sources' exposure
    nvml = "NVIDIA H100 80GB HBM3"
    rows = [Exposure(f"s{g}", "gpu-node-001", str(g), nvml, T - 86400, T + 86400) for g in range(4)]
    fake = FakeEvidence(models={"gpu-node-001": nvml}, gpu_counts={"gpu-node-001": 4}, rows=rows)
    merged = cli.Ledger()
    merged.add(*ledger.from_journal(_first_run(tmp_path), fake))
    old = Incident("rma-7", "gpu-node-009", "2", "H100", "gpu", "xid_fatal", T - 3600,
                   T - 3600, None, None, 0)  # fmt: skip
    merged.add([old], [Exposure("S9", "gpu-node-009", "2", "H100", T - 86400, T + 86400)])
    built = report.build(merged.incidents, merged.exposure, since=T - 86400, until=T + 86400)
    gpu_cells = [c for c in built.cells if c.component == "gpu"]
    assert [(c.gpu_model, c.failures) for c in gpu_cells] == [("H100", 2)]
    # 4 GPUs for 2 days less gpu-node-001's hour out of service, and S9's 2 days
    assert gpu_cells[0].exposure_hours == pytest.approx(4 * 48 - 4 * (3630 - 30) / 3600 + 48)


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
