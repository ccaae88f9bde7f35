"""Nothing counted twice, nothing charged to the wrong unit: one alert is one failure, one
GPU out takes only that GPU's exposure, and overlapping outages of a node are charged once
per GPU-hour (issue 31, items 5-7). Hand-computed answers on the real journal."""

from pathlib import Path

import pytest

from accounting import ledger, metrics, report
from accounting.model import Exposure, Incident
from accounting.window import Window
from remediation.clock import FakeClock
from remediation.journal import Journal
from tests.accounting.fakeevidence import FakeEvidence
from tests.accounting.helpers import service
from tests.remediation.helpers import alert, topology_file

T = 1_800_000_000.0  # 2027-01-15T08:00:00Z
H = 3600.0
NODE = "gpu-node-001"


def _run_actions(svc, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
    clock.advance(30)
    for action in svc.journal.pending_actions():
        svc.executor.run(action)


@pytest.mark.parametrize(
    "gap_s",
    [420.0, 4 * H],
    ids=["nvlink-settle-420s", "denied-while-paused-then-alertmanagers-repeat"],
)
def test_one_alert_decided_twice_beyond_the_incident_window_is_one_failure(
    tmp_path: Path, gap_s: float
) -> None:
    # decided once and denied (paused: a transient guard, like the NVLink settle window's
    # hold), decided again on the repeat more than incident_window_s (120 s) later: the
    # engine opens a second journal incident; the ledger must still count one failure
    clock = FakeClock(T)
    svc = service(tmp_path, clock=clock, topology=topology_file(tmp_path, 2))
    a = alert(node=NODE, starts_at="2027-01-15T08:00:00Z", fp="fp-once", gpu="3", xid="79")
    svc.engine.set_paused(True, "test")
    svc.journal.accept([a], clock.now())
    svc.engine.decide(a)
    clock.advance(gap_s)
    svc.engine.set_paused(False, "test")
    svc.journal.accept([a], clock.now())  # Alertmanager's repeat of the same notification
    svc.engine.decide(a)
    _run_actions(svc, clock)
    clock.advance(H)
    assert svc.engine.release(NODE, True).allow
    opened = svc.journal.rows("SELECT id FROM incidents WHERE node=?", (NODE,))
    svc.journal.close()
    assert len(opened) == 2  # the engine's two incidents (its window is its business)
    (inc,), _, _ = ledger.from_journal(tmp_path / "state.db")
    assert inc.id == f"gw-{opened[0]['id']}"
    assert inc.detected == T and inc.mitigated == T + gap_s + 30
    built = report.build([inc], [], since=T, until=T + gap_s + 2 * H)
    (cell,) = [c for c in built.cells if c.component == "gpu"]
    assert cell.failures == 1


def test_two_alerts_of_one_fault_still_far_apart_are_two_failures(tmp_path: Path) -> None:
    # the other way: a new alert (another startsAt) a day later is a second failure
    clock = FakeClock(T)
    svc = service(tmp_path, clock=clock, topology=topology_file(tmp_path, 2))
    for starts in ("2027-01-15T08:00:00Z", "2027-01-16T08:00:00Z"):
        a = alert(node=NODE, starts_at=starts, fp="fp-same", gpu="3", xid="79")
        svc.journal.accept([a], clock.now())
        svc.engine.decide(a)
        _run_actions(svc, clock)
        clock.advance(H)
        assert svc.engine.release(NODE, True).allow
        clock.advance(86400 - H - 30)
    svc.journal.close()
    incidents, _, _ = ledger.from_journal(tmp_path / "state.db")
    assert len(incidents) == 2


def _isolated_gpu3_for_50h(tmp_path: Path) -> Path:
    """GPU 3 of gpu-node-001 isolated (a DRA device taint) from T + 30 s for 50 h."""
    clock = FakeClock(T)
    svc = service(tmp_path, clock=clock, topology=topology_file(tmp_path, 4))
    a = alert(node=NODE, starts_at="2027-01-15T08:00:00Z", fp="fp-dra", gpu="3", xid="79")
    svc.journal.accept([a], clock.now())
    svc.engine.decide(a)
    _run_actions(svc, clock)
    clock.advance(50 * H)
    assert svc.engine.release(NODE, True).allow
    svc.journal.close()
    db = tmp_path / "state.db"
    journal = Journal(db)
    with journal.tx() as tx:  # as the Kubernetes backend's isolation journals it
        (aid,) = tx.execute("SELECT id FROM actions WHERE incident_id=1").fetchone()
        tx.execute(
            "INSERT INTO steps(action_id, step, state, detail) VALUES(?, 'isolate_gpu', 'done', '')",
            (aid,),
        )
    journal.close()
    return db


def _exposure_hours(built: report.Report, component: str) -> float:
    (cell,) = [c for c in built.cells if c.component == component]
    assert cell.exposure_hours is not None
    return cell.exposure_hours


def test_one_gpu_isolated_removes_only_that_gpus_exposure_from_prometheus_presence(
    tmp_path: Path,
) -> None:
    # hand check: 8 GPUs x 100 h present, GPU 3 out 50 h: 750 GPU-h, and the node (in
    # service all along, seven GPUs schedulable) 100 node-h
    db = _isolated_gpu3_for_50h(tmp_path)
    rows = [Exposure(f"s{g}", NODE, str(g), "H100", T + 30 - 25 * H, None) for g in range(8)]
    fake = FakeEvidence(models={NODE: "H100"}, gpu_counts={NODE: 8}, rows=rows)
    incidents, exposure, _ = ledger.from_journal(db, fake, now=T + 30 + 75 * H)
    (inc,) = incidents
    assert inc.gpus_out == 1 and inc.gpu == "3"
    built = report.build(incidents, exposure, since=T + 30 - 25 * H, until=T + 30 + 75 * H)
    assert _exposure_hours(built, "gpu") == pytest.approx(750.0)
    assert _exposure_hours(built, "host") == pytest.approx(100.0)
    assert built.costs[0].capacity_h == pytest.approx(50.0)


def test_one_gpu_isolated_removes_only_that_gpus_exposure_on_the_journal_only_path(
    tmp_path: Path,
) -> None:
    db = _isolated_gpu3_for_50h(tmp_path)
    built = metrics.build_report(db, T + 100 * H, [NODE], gpus_per_node=8)
    assert built.window is not None and built.window.since == T
    assert _exposure_hours(built, "gpu") == pytest.approx(750.0)
    assert _exposure_hours(built, "host") == pytest.approx(100.0)


def _out(id_: str, mitigated_h: float, returned_h: float | None, **kw: object) -> Incident:
    fields: dict = dict(
        id=id_, node=NODE, gpu=None, gpu_model="H100", component="gpu", fault_class="xid_fatal",
        onset=T + mitigated_h * H - 60, detected=T + mitigated_h * H - 60,
        mitigated=T + mitigated_h * H, returned=None if returned_h is None else T + returned_h * H,
        gpus_out=8,
    )  # fmt: skip
    fields.update(kw)
    return Incident(**fields)


def test_two_overlapping_outages_of_one_node_are_charged_once_per_gpu_hour() -> None:
    # hand check: the node drained 10 h for a first XID; a second XID while it is still out
    # (mitigated 10 min later, returned with it): 80 GPU-h lost in all, not 80 + 78.7
    first = _out("a", 0.0, 10.0)
    second = _out("b", 1 / 6, 10.0)
    costs = report.build([first, second], [], since=T - H, until=T + 20 * H).costs
    assert sum(c.capacity_h for c in costs) == pytest.approx(80.0)
    assert [c.capacity_h for c in costs] == [pytest.approx(80.0), pytest.approx(0.0)]


def test_a_later_outage_is_charged_only_beyond_the_earlier_and_a_whole_node_outage_covers_a_gpu() -> (
    None
):
    # a 10 h drain; a second from 8 h to 14 h: 4 h x 8 more. GPU 3 isolated 12-20 h: out
    # with the node until 14 h, alone after: 6 h x 1
    drains = [_out("a", 0.0, 10.0), _out("b", 8.0, 14.0)]
    gpu3 = _out("c", 12.0, 20.0, gpu="3", gpus_out=1)
    costs = report.build([*drains, gpu3], [], since=T - H, until=T + 30 * H).costs
    assert [round(c.capacity_h, 6) for c in costs] == [80.0, 32.0, 6.0]


def test_capacity_lost_never_depends_on_the_windows_cut_of_an_earlier_outage() -> None:
    window = Window(T + 5 * H, T + 30 * H)
    second = _out("b", 8.0, 14.0)
    both = report.build([_out("a", 0.0, 10.0), second], [], window.since, window.until)
    # the first's onset is before the window (not listed); the second is charged only
    # beyond it, as it is in a report of the whole time
    assert [c.incident.id for c in both.costs] == ["b"]
    assert both.costs[0].capacity_h == pytest.approx(32.0)
