"""A scheduler or API server that does not answer while an alert is decided: the alert waits
undecided (never a denial that drops a fatal fault), later alerts wait behind it in order,
the status and a gauge say why, and everything is decided once the backend answers.

Before this, a stalled API server turned the drain of a fatal XID into a permanent
"internal error" denial (found by tests/remediation/test_kube_service_real.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from exporter import catalog as c
from remediation.app import build_app
from remediation.backends.base import BackendError, Unavailable
from remediation.backends.dryrun import DryRunBackend
from remediation.backends.runner import Result, checked
from remediation.clock import FakeClock
from remediation.journal import Journal
from remediation.model import NodeView
from remediation.service import build
from remediation.settings import Settings
from tests.remediation.helpers import AUTH, LIVE_POLICY, TOKEN, alert, payload

NODES = {f"gpu-node-{i:03d}": {} for i in range(1, 9)}


class StalledBackend(DryRunBackend):
    """Dry-run whose reads fail as an unanswered API server's do while ``down`` is set."""

    down = True

    def fleet(self) -> tuple[NodeView, ...]:
        if self.down:
            raise Unavailable("Kubernetes API server did not answer list_node within 1 s")
        return super().fleet()

    def node(self, name: str) -> NodeView | None:
        if self.down:
            raise Unavailable("Kubernetes API server did not answer read_node within 1 s")
        return super().node(name)


def scalar(db: Journal, sql: str) -> int:
    return int(db.scalar(sql))


async def until(pred: object, what: str, seconds: float = 10) -> None:
    for _ in range(int(seconds / 0.05)):
        if pred():  # type: ignore[operator]
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def sample(text: str, name: str) -> float:
    [line] = [ln for ln in text.splitlines() if ln.startswith(name + " ")]
    return float(line.split()[1])


async def test_alerts_met_by_an_unanswering_backend_wait_undecided_and_are_decided_when_it_answers(
    tmp_path: Path,
) -> None:
    (tmp_path / "policy.yaml").write_text(LIVE_POLICY)
    s = Settings(
        policy=tmp_path / "policy.yaml", state_db=tmp_path / "s.db", webhook_token=TOKEN,
        tick_s=0.1, backend="dry-run",
    )  # fmt: skip
    clock = FakeClock()
    side = Journal(tmp_path / "s.db")
    backend = StalledBackend(side, NODES, clock.now)
    svc = build(s, clock=clock, backend=backend)
    first, second = alert("gpu-node-001", fp="a"), alert("gpu-node-002", fp="b")
    async with TestClient(TestServer(build_app(svc))) as client:
        r = await client.post("/alertmanager", data=payload(first, second), headers=AUTH)
        assert r.status == 200
        await until(lambda: svc.worker.unreachable, "the worker to meet the stalled backend")
        await asyncio.sleep(0.5)  # several ticks against the stalled backend
        assert scalar(svc.journal, "SELECT COUNT(*) FROM decisions") == 0, "decided blind"
        assert scalar(svc.journal, "SELECT COUNT(*) FROM alerts WHERE processed=0") == 2
        status = await (await client.get("/api/v1/nodes", headers=AUTH)).json()
        assert "did not answer" in status["backend_unreachable"]
        metrics = await (await client.get("/metrics")).text()
        assert sample(metrics, c.REMEDIATION_BACKEND_UNREACHABLE.name) == 1
        assert (await client.get("/healthz")).status == 200, "a scheduler outage is not ours"

        backend.down = False
        await until(
            lambda: scalar(svc.journal, "SELECT COUNT(*) FROM alerts WHERE processed=0") == 0,
            "the waiting alerts to be decided",
        )
        await until(lambda: not svc.worker.unreachable, "the worker to see the backend back")
        drained = "SELECT COUNT(*) FROM decisions WHERE verdict='allow' AND action='drain'"
        assert scalar(svc.journal, drained) == 2
        errors = "SELECT COUNT(*) FROM decisions WHERE reason LIKE 'internal error%'"
        assert scalar(svc.journal, errors) == 0
        metrics = await (await client.get("/metrics")).text()
        assert sample(metrics, c.REMEDIATION_BACKEND_UNREACHABLE.name) == 0
    side.close()


class Scripted:
    def __init__(self, result: Result) -> None:
        self.result = result

    def run(self, argv: object, timeout: float = 10.0) -> Result:
        return self.result


def test_a_slurm_command_that_timed_out_or_could_not_reach_slurmctld_is_unavailable() -> None:
    for result in (
        Result(124, "", "sinfo: timed out after 10s"),
        Result(
            1, "", "slurm_load_node error: Unable to contact slurm controller (connect failure)"
        ),
        Result(1, "", "sinfo: error: Socket timed out on send/recv operation"),
    ):
        try:
            checked(Scripted(result), ["sinfo", "--json"], 10)
        except Unavailable as e:
            assert str(result.rc) in str(e)
        else:
            raise AssertionError(f"{result} was not Unavailable")


def test_a_slurm_command_that_answered_no_is_a_plain_backend_error() -> None:
    refused = Result(1, "", "scontrol: error: Invalid node name specified")
    try:
        checked(Scripted(refused), ["scontrol", "update", "nodename=x"], 10)
    except Unavailable:
        raise AssertionError("a refusal is an answer, not an outage") from None
    except BackendError as e:
        assert "Invalid node name" in str(e)
    else:
        raise AssertionError("a failed command passed")
