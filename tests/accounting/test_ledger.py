"""The ledger from a real remediation journal (the service's own engine and executor on a
fake clock and the dry-run backend), across a restart of the service."""

import json
from pathlib import Path

import pytest

from accounting import ledger
from accounting.model import Exposure, JobHit
from gpuwarden import cli
from remediation.clock import FakeClock
from remediation.service import Service
from tests.accounting.fakeevidence import FakeEvidence
from tests.remediation.helpers import alert, service, topology_file

T = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def _incident(
    svc: Service, clock: FakeClock, node: str, starts_at: str, out_s: float, **labels: str
) -> None:
    """An alert at ``clock``, its drain done 30 s later, the node released ``out_s`` after."""
    a = alert(node=node, starts_at=starts_at, fp=f"fp-{node}-{clock.now()}", **labels)
    svc.journal.accept([a], clock.now())
    svc.engine.decide(a)
    clock.advance(30)
    for action in svc.journal.pending_actions():
        svc.executor.run(action)
    clock.advance(out_s)
    assert svc.engine.release(node, True).allow


def _first_run(tmp_path: Path) -> Path:
    clock = FakeClock(T)
    svc = service(tmp_path, clock=clock, topology=topology_file(tmp_path, 4))
    _incident(svc, clock, "gpu-node-001", "2027-01-15T07:58:00Z", 3600, gpu="3", xid="79")
    svc.journal.close()
    return tmp_path / "state.db"


def test_journal_incidents_carry_detection_mitigation_and_return_times(tmp_path: Path) -> None:
    (inc,), exposure, runs = ledger.from_journal(_first_run(tmp_path))
    assert inc.id == "gw-1" and inc.node == "gpu-node-001" and inc.gpu == "3"
    assert inc.component == "gpu" and inc.fault_class == "xid_fatal"
    assert inc.detected == T - 120  # the alert's startsAt
    assert inc.onset == inc.detected  # without Prometheus there is no earlier evidence
    assert inc.mitigated == T + 30  # the drain finished
    assert inc.returned == T + 30 + 3600  # the release
    assert inc.gpus_out == 8 and inc.gpu_model == "unknown"
    assert exposure == [] and runs == []


def test_evidence_supplies_onset_model_gpus_jobs_and_exposure(tmp_path: Path) -> None:
    rows = [Exposure(f"s{g}", "gpu-node-001", str(g), "H100", T - 86400, None) for g in range(4)]
    hit = JobHit("42", 4, T - 100, T + 600, T - 1800)
    fake = FakeEvidence(
        onsets={("gpu-node-001", "3"): T - 600},
        models={"gpu-node-001": "H100"},
        gpu_counts={"gpu-node-001": 4},
        hits={"gpu-node-001": [hit]},
        rows=rows,
    )
    (inc,), exposure, _ = ledger.from_journal(_first_run(tmp_path), fake)
    assert inc.onset == T - 600 and inc.gpu_model == "H100" and inc.gpus_out == 4
    assert inc.jobs == (hit,)
    assert fake.asked == [("gpu-node-001", T - 600, T + 30)]
    # present in Prometheus all along, but out of service from the drain to the release
    assert sorted(exposure, key=lambda r: (str(r.unit), r.start)) == [
        piece
        for g in range(4)
        for piece in (
            Exposure(f"s{g}", "gpu-node-001", str(g), "H100", T - 86400, T + 30),
            Exposure(f"s{g}", "gpu-node-001", str(g), "H100", T + 3630, None),
        )
    ]


def test_a_memory_xid_is_charged_to_gpu_memory(tmp_path: Path) -> None:
    clock = FakeClock(T)
    svc = service(tmp_path, clock=clock, topology=topology_file(tmp_path, 4))
    _incident(svc, clock, "gpu-node-002", "2027-01-15T07:59:00Z", 60, gpu="1", xid="48")
    svc.journal.close()
    (inc,), _, _ = ledger.from_journal(tmp_path / "state.db")
    assert inc.component == "gpu_memory"


def _action_is(db: Path, action: str, step: str | None = None) -> None:
    """Rewrite the first run's drain as another action (and give it a step), as if the
    ladder had chosen it: the timings stay those of the executed action."""
    from remediation.journal import Journal

    journal = Journal(db)
    with journal.tx() as tx:
        (aid,) = tx.execute("SELECT id FROM actions WHERE incident_id=1").fetchone()
        tx.execute("UPDATE actions SET action=? WHERE id=?", (action, aid))
        if step is not None:
            tx.execute(
                "INSERT INTO steps(action_id, step, state, detail) VALUES(?, ?, 'done', '')",
                (aid, step),
            )
    journal.close()


@pytest.mark.parametrize("action", ["reset_gpu", "inspect"])
def test_a_gpu_reset_or_an_inspection_is_a_mitigation(tmp_path: Path, action: str) -> None:
    # a reset cordons the node and requeues its jobs before resetting (gpureset/saga.py):
    # the node's GPUs are out, as for a drain
    db = _first_run(tmp_path)
    _action_is(db, action)
    (inc,), _, _ = ledger.from_journal(db, FakeEvidence(gpu_counts={"gpu-node-001": 4}))
    assert inc.mitigated == T + 30
    assert inc.returned == T + 30 + 3600
    assert inc.gpus_out == 4


def test_an_action_that_isolated_one_gpu_takes_one_gpu_out(tmp_path: Path) -> None:
    db = _first_run(tmp_path)
    _action_is(db, "drain", step="isolate_gpu")  # Kubernetes DRA: the device tainted
    (inc,), _, _ = ledger.from_journal(db, FakeEvidence(gpu_counts={"gpu-node-001": 4}))
    assert inc.gpus_out == 1
    assert inc.mitigated == T + 30


def test_an_nvlink5_xid_from_the_journal_is_charged_to_nvlink(tmp_path: Path) -> None:
    clock = FakeClock(T)
    svc = service(tmp_path, clock=clock, topology=topology_file(tmp_path, 4))
    _incident(svc, clock, "gpu-node-002", "2027-01-15T07:59:00Z", 60, gpu="1", xid="149")
    svc.journal.close()
    (inc,), _, _ = ledger.from_journal(tmp_path / "state.db")
    assert inc.component == "nvlink"


def test_the_report_across_a_remediation_restart_keeps_the_first_runs_incident(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _first_run(tmp_path)
    assert cli.main(["report", "--state-db", str(db), "--format", "json"]) == 0
    before = json.loads(capsys.readouterr().out)
    # the service restarts on the same journal and handles a second incident
    clock = FakeClock(T + 86400)
    svc = service(tmp_path, clock=clock, topology=topology_file(tmp_path, 4))
    _incident(svc, clock, "gpu-node-002", "2027-01-16T07:59:00Z", 7200, gpu="0")
    svc.journal.close()
    assert cli.main(["report", "--state-db", str(db), "--format", "json"]) == 0
    after = json.loads(capsys.readouterr().out)
    first = before["incidents"][0]
    assert [i["id"] for i in after["incidents"]] == ["gw-1", "gw-2"]
    assert after["incidents"][0] == first
    assert first["gpu_hours_lost"]["capacity"] == pytest.approx(8.0)
    assert after["incidents"][1]["gpu_hours_lost"]["capacity"] == pytest.approx(16.0)
    assert first["ttd_s"] == 0 and first["ttm_s"] == 150 and first["ttr_s"] == 3750


def test_a_checkpoint_ack_before_the_move_is_the_jobs_last_checkpoint(tmp_path: Path) -> None:
    db = _first_run(tmp_path)
    from remediation.journal import Journal

    journal = Journal(db)
    with journal.tx() as tx:
        (aid,) = tx.execute("SELECT id FROM actions WHERE incident_id=1").fetchone()
        tx.execute(
            "INSERT INTO steps(action_id, step, state, detail) VALUES(?, 'ack:42', 'done', '')",
            (aid,),
        )
    journal.close()
    hits = {"gpu-node-001": [JobHit("42", 8, T + 30, T + 900), JobHit("43", 8, T + 30, T + 900)]}
    (inc,), _, _ = ledger.from_journal(db, FakeEvidence(hits=hits))
    acked, other = inc.jobs
    assert acked.last_checkpoint == T + 30  # the drain finished right after the ack
    assert other.last_checkpoint is None  # no ack: unknown, never guessed


def test_an_incident_open_across_a_restart_is_returned_by_the_release_after_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = FakeClock(T)
    svc = service(tmp_path, clock=clock, topology=topology_file(tmp_path, 4))
    a = alert(node="gpu-node-003", starts_at="2027-01-15T07:59:00Z", fp="fp-open", gpu="2")
    svc.journal.accept([a], clock.now())
    svc.engine.decide(a)
    clock.advance(30)
    for action in svc.journal.pending_actions():
        svc.executor.run(action)
    svc.journal.close()  # the service stops with the node drained
    db = tmp_path / "state.db"
    assert cli.main(["report", "--state-db", str(db), "--format", "json"]) == 0
    (still_out,) = json.loads(capsys.readouterr().out)["incidents"]
    later = FakeClock(T + 7200)
    again = service(tmp_path, clock=later, topology=topology_file(tmp_path, 4))
    assert again.engine.release("gpu-node-003", True).allow
    again.journal.close()
    (inc,), _, _ = ledger.from_journal(db)
    assert inc.mitigated == T + 30 and inc.returned == T + 7200
    assert still_out["ttr_s"] == 90  # still out: to the report's end, the latest time known
    assert cli.main(["report", "--state-db", str(db), "--format", "json"]) == 0
    (back,) = json.loads(capsys.readouterr().out)["incidents"]
    assert back["ttr_s"] == 7260 and back["gpu_hours_lost"]["capacity"] == pytest.approx(
        8 * (7170 / 3600)
    )
