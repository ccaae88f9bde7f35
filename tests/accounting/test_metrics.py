"""The live gpuwarden_accounting_* series on the remediation service's /metrics, rebuilt
from the journal after a restart to the same values."""

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from accounting.metrics import AccountingCollector, node_facts
from accounting.model import JobHit, JobRun
from accounting.prometheus_evidence import PrometheusEvidence, UrllibApi
from common.settings import SettingsError
from exporter import catalog as c
from remediation import topology
from remediation.clock import FakeClock
from tests.accounting.fakeevidence import FakeEvidence
from tests.accounting.helpers import service
from tests.accounting.test_ledger import T, _first_run, _incident
from tests.realcomp import free_port
from tests.remediation.helpers import alert, topology_file


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


def _topology(tmp_path: Path, gpus: int, model: str) -> Path:
    path = tmp_path / "topology.yaml"
    path.write_text(
        "nodes: {gpu-node-001: {leaf: leaf-00}, gpu-node-002: {leaf: leaf-00}}\n"
        f"inventory: {{defaults: {{gpus: 8, model: H100}}, nodes: {{gpu-node-001: {{gpus: {gpus},"
        f" model: {model}}}, gpu-node-002: {{gpus: {gpus}, model: {model}}}}}}}\n"
    )
    return path


def test_exposure_starts_at_the_journals_first_record_not_the_first_incident(
    tmp_path: Path,
) -> None:
    # an alert received at T (resolved, no incident); the first incident a day later
    clock = FakeClock(T)
    svc = service(tmp_path, clock=clock, topology=topology_file(tmp_path, 4))
    svc.journal.accept([alert(node="gpu-node-004", status="resolved", fp="early")], T)
    clock.advance(86400)
    _incident(svc, clock, "gpu-node-001", "2027-01-16T08:00:00Z", 3600, gpu="3", xid="79")
    clock.advance(3600)
    got = _accounting(svc.metrics.render())
    svc.journal.close()
    # 4 nodes x 8 GPUs from T to now (T + 1 d + 30 s + 1 h + 1 h), less 8 GPUs for 1 h
    exposure = (c.ACCOUNTING_EXPOSURE.name, (("component", "gpu"), ("gpu_model", "unknown")))
    assert got[exposure] == pytest.approx(4 * 8 * (86400 + 30 + 7200) - 8 * 3600)


def test_gpus_per_node_and_the_model_come_from_the_topology_where_it_gives_them(
    tmp_path: Path,
) -> None:
    clock = FakeClock(T)
    svc = service(tmp_path, clock=clock, topology=_topology(tmp_path, 4, "GB200"))
    _incident(svc, clock, "gpu-node-001", "2027-01-15T08:00:00Z", 3600, gpu="3", xid="79")
    clock.advance(3600)
    got = _accounting(svc.metrics.render())
    svc.journal.close()
    # 2 nodes x 4 GPUs over 2 h 30 s, less gpu-node-001's 4 GPUs for its hour out
    exposure = (c.ACCOUNTING_EXPOSURE.name, (("component", "gpu"), ("gpu_model", "GB200")))
    assert got[exposure] == pytest.approx(2 * 4 * (7200 + 30) - 4 * 3600)
    lost = (c.ACCOUNTING_LOST.name, (("cause", "capacity"), ("component", "gpu")))
    assert got[lost] == pytest.approx(4 * 3600)
    count = (c.ACCOUNTING_INCIDENTS.name, (("component", "gpu"), ("gpu_model", "GB200")))
    assert got[count] == 1
    # the inventory section is no failure domain: budgets and placement see the leaf only
    assert topology.load(tmp_path / "topology.yaml")["gpu-node-001"] == {"leaf": "leaf-00"}


def test_the_inventory_defaults_apply_to_every_node_it_does_not_name(tmp_path: Path) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text(
        "nodes: {a: {leaf: l0}, b: {leaf: l0}}\n"
        "inventory: {defaults: {gpus: 4, model: A100}, nodes: {b: {gpus: 2}}}\n"
    )
    assert node_facts(path, ["a", "b"]) == ({"a": 4, "b": 2}, {"a": "A100", "b": "A100"})
    assert node_facts(None, ["a"]) == ({}, {})


def test_a_bad_gpu_count_in_the_topology_stops_the_start_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text(
        "nodes: {gpu-node-001: {leaf: leaf-00}}\n"
        "inventory: {nodes: {gpu-node-001: {gpus: eight}}}\n"
    )
    with pytest.raises(SettingsError, match=r"inventory gpu-node-001\.gpus: 'eight'"):
        service(tmp_path, clock=FakeClock(T), topology=path)


def test_ettr_is_exported_when_the_evidence_knows_the_job_runs(tmp_path: Path) -> None:
    # the journal's span is from the alert's startsAt (T - 120 s) to now (T + 10 h); a 4-GPU
    # job running since T - 10 h, interrupted at T - 100 s with a checkpoint at T - 110 s,
    # resumed at T + 1700 s: allocated in the span 4 x 36,120 = 144,480 GPU-s, lost
    # 4 x (1800 restart + 10 recompute) = 7,240 GPU-s
    db = _first_run(tmp_path)
    hit = JobHit("42", 4, T - 100, T + 1700, T - 110)
    fake = FakeEvidence(hits={"gpu-node-001": [hit]}, job_runs=[JobRun("42", 4, T - 36000, None)])
    collector = AccountingCollector(db, lambda: T + 36000, nodes=["gpu-node-001"], evidence=fake)
    registry = CollectorRegistry()
    registry.register(collector)
    got = _accounting(generate_latest(registry))
    want = (144_480 - 7_240) / 144_480
    for weighting in ("gpu_hour", "job_count"):
        assert got[(c.ACCOUNTING_ETTR.name, (("weighting", weighting),))] == pytest.approx(want)


def test_without_job_runs_the_ettr_series_is_absent_not_zero(tmp_path: Path) -> None:
    db = _first_run(tmp_path)
    collector = AccountingCollector(db, lambda: T + 36000, nodes=["gpu-node-001"])
    registry = CollectorRegistry()
    registry.register(collector)
    got = _accounting(generate_latest(registry))
    assert not [k for k in got if k[0] == c.ACCOUNTING_ETTR.name]


def test_a_prometheus_that_cannot_answer_costs_ettr_not_the_scrape(tmp_path: Path) -> None:
    # nothing listens on the port: the series come from the journal alone, ETTR is absent
    db = _first_run(tmp_path)
    down = PrometheusEvidence(UrllibApi(f"http://127.0.0.1:{free_port()}", timeout_s=2.0))
    collector = AccountingCollector(db, lambda: T + 36000, nodes=["gpu-node-001"], evidence=down)
    registry = CollectorRegistry()
    registry.register(collector)
    got = _accounting(generate_latest(registry))
    count = (c.ACCOUNTING_INCIDENTS.name, (("component", "gpu"), ("gpu_model", "unknown")))
    assert got[count] == 1
    assert not [k for k in got if k[0] == c.ACCOUNTING_ETTR.name]


@pytest.mark.parametrize(
    "url", ["ftp://prom:9090", "prometheus:9090", "http://:9090", "http://p:x"]
)
def test_a_bad_prometheus_url_stops_the_start_with_one_line(
    tmp_path: Path, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuwarden import remediation_service

    argv = ["--prometheus", url, "--state-db", str(tmp_path / "s.db"), "--check",
            "--allow-unauthenticated"]  # fmt: skip
    assert remediation_service.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--prometheus: {url!r}" in err
