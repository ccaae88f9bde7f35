"""The live gpuwarden_accounting_* series on the remediation service's /metrics, rebuilt
from the journal after a restart to the same values."""

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter import catalog as c
from remediation.clock import FakeClock
from tests.remediation.accounting.test_ledger import T, _incident
from tests.remediation.helpers import service, topology_file


def _accounting(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text.decode())
        for s in fam.samples
        if s.name.startswith(c.ACCOUNTING_LOST.name.split("lost")[0])
    }


def test_accounting_series_survive_a_restart_with_the_same_values(tmp_path: Path) -> None:
    clock = FakeClock(T)
    svc = service(tmp_path, clock=clock, topology=topology_file(tmp_path, 4))
    _incident(svc, clock, "gpu-node-001", "2027-01-15T07:58:00Z", 3600, gpu="3", xid="79")
    clock.advance(86400)
    before = _accounting(svc.metrics.render())
    svc.journal.close()
    again = service(tmp_path, clock=FakeClock(clock.now()), topology=topology_file(tmp_path, 4))
    after = _accounting(again.metrics.render())
    again.journal.close()
    assert after == before
    lost = (c.ACCOUNTING_LOST.name, (("cause", "capacity"), ("component", "gpu")))
    assert before[lost] == pytest.approx(8 * 3600)
    count = (c.ACCOUNTING_INCIDENTS.name, (("component", "gpu"), ("gpu_model", "unknown")))
    assert before[count] == 1
    # 4 nodes x 8 GPUs from onset to now, less gpu-node-001's hour out of service
    exposure = (c.ACCOUNTING_EXPOSURE.name, (("component", "gpu"), ("gpu_model", "unknown")))
    hours = 4 * 8 * (3600 + 30 + 120 + 86400) - 8 * 3600
    assert before[exposure] == pytest.approx(hours)
    estimate = (
        c.ACCOUNTING_MTBF.name,
        (("bound", "estimate"), ("component", "gpu"), ("gpu_model", "unknown")),
    )
    assert before[estimate] == pytest.approx(hours)
    assert (
        c.ACCOUNTING_MTBF.name,
        (("bound", "upper90"), ("component", "nvlink"), ("gpu_model", "unknown")),
    ) not in before
    assert before[(c.ACCOUNTING_UNKNOWN_RECOMPUTE.name, ())] == 0


def test_an_empty_journal_exports_no_loss_and_no_cell(tmp_path: Path) -> None:
    svc = service(tmp_path, clock=FakeClock(T))
    got = _accounting(svc.metrics.render())
    svc.journal.close()
    assert got == {(c.ACCOUNTING_UNKNOWN_RECOMPUTE.name, ()): 0}
