"""The ledger over a hand-written ``History`` (the seam to remediation's journal,
accounting/journal.py): what it asks the journal and Prometheus, and what it makes of the
answers, including the journal's odd corners (no alert decided, no parseable startsAt,
several mitigations of one failure)."""

from __future__ import annotations

from dataclasses import dataclass, field

from accounting import ledger
from accounting.journal import AlertSeen, History, IncidentRow, Mitigation
from accounting.model import Exposure, JobHit, JobRun
from accounting.prometheus_evidence import PrometheusEvidence

T = 1_800_000_000.0


@dataclass
class FakeHistory:
    rows: list[IncidentRow] = field(default_factory=list)
    seen: dict[int, list[AlertSeen]] = field(default_factory=dict)
    mitigations: dict[int, Mitigation] = field(default_factory=dict)
    releases: dict[str, float] = field(default_factory=dict)
    span: tuple[float | None, float | None] = (None, None)

    def incidents(self) -> list[IncidentRow]:
        return list(self.rows)

    def alerts(self, inc: IncidentRow) -> list[AlertSeen]:
        return self.seen.get(inc.id, [])

    def mitigation(self, incident_id: int) -> Mitigation | None:
        return self.mitigations.get(incident_id)

    def release_after(self, node: str, after: float) -> float | None:
        at = self.releases.get(node)
        return at if at is not None and at >= after else None

    def acks(self, incident_id: int) -> dict[str, float]:
        return {}

    def first_event(self) -> float | None:
        return self.span[0]

    def decision_span(self) -> tuple[float | None, float | None]:
        return self.span

    def close(self) -> None:
        pass


@dataclass
class AskedEvidence:
    """Records what the ledger asks; answers little."""

    gpu_count: int | None = None
    asked: list[tuple[str, object]] = field(default_factory=list)

    def onset(self, node: str, gpu: str | None, detected: float) -> float | None:
        self.asked.append(("onset", (node, gpu, detected)))
        return None

    def gpu_model(self, node: str) -> str | None:
        return None

    def gpus(self, node: str) -> int | None:
        return self.gpu_count

    def jobs(self, node: str, gpu: str | None, onset: float, at: float) -> list[JobHit]:
        self.asked.append(("jobs", (node, gpu, onset, at)))
        return []

    def exposure(self, since: float, until: float) -> list[Exposure]:
        self.asked.append(("exposure", (since, until)))
        return []

    def runs(self, since: float, until: float) -> list[JobRun]:
        self.asked.append(("runs", (since, until)))
        return []


def _row(id_: int, at: float) -> IncidentRow:
    return IncidentRow(id_, "n1", "xid_fatal", at, at)


def _alert(at: float, starts: str = "", fp: str = "fp", **labels: str) -> AlertSeen:
    return AlertSeen({"gpu": "3", **labels}, fp, starts, at)


def test_the_fake_is_a_history() -> None:
    journal: History = FakeHistory()  # mypy holds the fake to the Protocol
    assert ledger.from_history(journal) == ([], [], [])


def test_an_incident_with_no_alert_decided_and_no_mitigation_is_detected_when_opened() -> None:
    fake = AskedEvidence(gpu_count=8)
    (inc,), _, _ = ledger.from_history(FakeHistory(rows=[_row(1, T)], span=(T, T)), fake)
    assert inc.detected == T and inc.gpu is None and inc.gpu_model == "unknown"
    assert inc.mitigated is None and inc.returned is None and inc.gpus_out == 0
    assert ("jobs", ("n1", None, T, T)) in fake.asked  # unmitigated: asked at detection


def test_an_alert_without_a_readable_starts_at_leaves_detection_at_the_opening() -> None:
    history = FakeHistory(rows=[_row(1, T)], seen={1: [_alert(T, "not a time")]}, span=(T, T))
    (inc,), _, _ = ledger.from_history(history)
    assert inc.detected == T


def test_the_evidence_is_asked_about_the_incidents_gpu_at_its_detection_and_mitigation() -> None:
    history = FakeHistory(
        rows=[_row(1, T)],
        seen={1: [_alert(T, "2027-01-15T07:58:00Z")]},
        mitigations={1: Mitigation(T + 30, False)},
        span=(T, T + 30),
    )
    fake = AskedEvidence(gpu_count=4)
    (inc,), _, _ = ledger.from_history(history, fake, now=T + 100)
    assert ("onset", ("n1", "3", T - 120)) in fake.asked
    assert ("jobs", ("n1", "3", T - 120, T + 30)) in fake.asked
    start = T - 120 - ledger.LOOKBACK_S
    assert ("exposure", (start, T + 100)) in fake.asked
    assert ("runs", (start, T + 100)) in fake.asked
    assert inc.gpus_out == 4


def test_a_node_prometheus_cannot_count_has_no_gpu_out_rather_than_a_guess() -> None:
    history = FakeHistory(
        rows=[_row(1, T)], mitigations={1: Mitigation(T + 30, False)}, span=(T, T + 30)
    )
    (inc,), _, _ = ledger.from_history(history, AskedEvidence(gpu_count=None))
    assert inc.gpus_out == 0


def test_one_failure_of_several_journal_incidents_takes_the_earliest_mitigation() -> None:
    history = FakeHistory(
        rows=[_row(1, T), _row(2, T + 600)],
        seen={1: [_alert(T, "2027-01-15T08:00:00Z")], 2: [_alert(T + 600, "2027-01-15T08:00:00Z")]},
        mitigations={1: Mitigation(T + 900, False), 2: Mitigation(T + 700, True)},
        releases={"n1": T + 3600},
        span=(T, T + 900),
    )
    (inc,), _, _ = ledger.from_history(history, AskedEvidence(gpu_count=8))
    assert inc.id == "gw-1" and inc.mitigated == T + 700 and inc.gpus_out == 1
    assert inc.returned == T + 3600


def test_the_model_comes_from_the_alerts_gpu_model_label_else_its_model_label() -> None:
    for labels, want in (({"gpu_model": "NVIDIA H100 80GB HBM3", "model": "x"}, "NVIDIA H100 80GB HBM3"),
                         ({"model": "NVIDIA A100-SXM4-40GB"}, "NVIDIA A100-SXM4-40GB")):  # fmt: skip
        history = FakeHistory(rows=[_row(1, T)], seen={1: [_alert(T, **labels)]}, span=(T, T))
        (inc,), _, _ = ledger.from_history(history)
        assert inc.gpu_model == want


def test_evidence_for_a_url_is_prometheus_with_its_gpus_per_node() -> None:
    evidence = ledger.evidence_for("http://prometheus:9090", 4)
    assert isinstance(evidence, PrometheusEvidence)
    assert evidence.api.url == "http://prometheus:9090" and evidence.gpus_per_node == 4  # type: ignore[attr-defined]
    assert isinstance(ledger.evidence_for(None, 4), ledger.NoEvidence)
