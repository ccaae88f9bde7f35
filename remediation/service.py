"""Composition root: builds journal, backend, policy, engine, executor and worker from Settings.

Everything injectable (clock, backend, command runner) so tests build the same service
around fakes or a real Slurm; the HTTP app (app.py) and the CLI sit on top.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.registry import Collector

from common.settings import SettingsError
from remediation import auth, policy, topology
from remediation.backends.base import Backend
from remediation.backends.dryrun import DryRunBackend
from remediation.backends.runner import Runner, SubprocessRunner
from remediation.backends.slurm import SlurmBackend
from remediation.clock import Clock, SystemClock
from remediation.engine import Engine
from remediation.events import capture
from remediation.events import config as events_config
from remediation.events.relay import Relay
from remediation.events.sink import HttpSink, Sink
from remediation.executor import Executor
from remediation.gpureset import release as reset_release
from remediation.journal import HELD_STATES, Journal
from remediation.maintenance.runner import Maintenance
from remediation.metrics import Metrics
from remediation.pager import AlertmanagerPager, NoPager
from remediation.placement.manager import Placement
from remediation.placement.projection import Projection, RecordOnly
from remediation.policy import Policy
from remediation.settings import Settings
from remediation.silences import AlertmanagerSilences, NoSilences, Silences
from remediation.validation.release import SuiteRunner, Validator
from remediation.worker import Worker

# More series for the service's /metrics, made by whoever assembles the service: the umbrella
# gives failure accounting's (gpuwarden/remediation_service.py). Remediation never imports
# accounting (docs/architecture.md); it calls this with its settings, clock and known nodes
# while it builds, so a bad value stops the start like any other setting.
CollectorsFor = Callable[[Settings, Clock, Sequence[str]], Iterable[Collector]]


@dataclass
class Service:
    settings: Settings
    policy: Policy
    journal: Journal
    backend: Backend
    engine: Engine
    executor: Executor
    worker: Worker
    metrics: Metrics
    clock: Clock
    credentials: auth.Credentials | None
    relay: Relay | None = None  # events out (remediation/events), None when off
    maintenance: Maintenance | None = None  # rolling maintenance (remediation/maintenance)

    @property
    def validator(self) -> Validator:
        return self.engine.validator  # type: ignore[no-any-return]

    def nodes(self) -> list[dict[str, Any]]:
        """The nodes table (read-only connection), each with its last validation."""
        rows = self.journal.read("SELECT * FROM nodes ORDER BY node")
        last, blocked = self.validator.latest(), self.journal.evacuations()
        return [
            {**r, "validation": last.get(r["node"]), "parked": self.validator.parked(r["node"]),
             "evacuation": blocked.get(r["node"])}
            for r in rows
        ]  # fmt: skip

    def evacuation(self, node: str) -> dict[str, Any] | None:
        """The node's blocked evacuation (which pods, since when, the server's status,
        reason and message), None when nothing is blocked."""
        return self.journal.evacuations(node).get(node)

    def request_release(self, node: str, who: str) -> tuple[int, dict[str, Any]]:
        """A manual release: validated first when the policy says so (202 and the run),
        else released now (200, or 409 with the denying guard)."""
        vp, rec = self.policy.validation, self.journal.node(node)
        resetting = reset_release.blocked(self.journal, self.executor.resetter, node)
        if resetting is not None:  # never back in service under a running reset job
            return 409, {"node": node, "released": False, "guard": "gpu_reset",
                         "reason": resetting}  # fmt: skip
        if self.engine.paused and vp.manual_release and _needs_validation(vp, rec):
            return 409, {"node": node, "released": False, "guard": "paused",
                         "reason": "remediation is paused: the validation this release needs "
                         "starts after resume"}  # fmt: skip
        vid = self.validator.running(node, gating=True)
        if vid is not None:  # on Slurm the node sits in our reservation: nothing to resume yet
            return 409, {"node": node, "released": False, "guard": "validation",
                         "reason": f"validation #{vid} runs; the node is released when it "
                         "passes (or ask again once it ended)"}  # fmt: skip
        held = rec is not None and rec["state"] not in ("released", None)
        if self.engine.release_placement(node, who) and not held:
            return 200, {"node": node, "released": True, "guard": "manual",
                         "reason": f"placement tier ended by {who}"}  # fmt: skip
        if (
            vp.manual_release
            and held
            and vp.suite_for(rec["fault_class"]) is not None  # type: ignore[index]
            and self.validator.gate(rec, "manual", who)  # type: ignore[arg-type]
        ):
            last = self.validator.latest().get(node)
            return 202, {
                "node": node,
                "released": False,
                "guard": "validation",
                "reason": "validation first; released when it passes",
                "validation": last,
            }
        v = self.engine.release(node, True, who)
        body = {"node": node, "released": v.allow, "guard": v.guard, "reason": v.reason}
        return (200 if v.allow else 409), body

    def status(self) -> dict[str, Any]:
        return {
            "paused": self.engine.paused,
            "breaker_open": self.journal.get("breaker_opened_at") is not None,
            "dry_run": self.policy.dry_run,
            "backend": self.backend.name,
            # why accepted alerts wait undecided ("" while the backend answers)
            "backend_unreachable": self.worker.unreachable,
        }

    def decisions(self, node: str | None, limit: int) -> list[dict[str, Any]]:
        if node:
            sql, args = (
                "SELECT * FROM decisions WHERE node=? ORDER BY id DESC LIMIT ?",
                (node, limit),
            )
        else:
            sql, args = "SELECT * FROM decisions ORDER BY id DESC LIMIT ?", (limit,)  # type: ignore[assignment]
        return self.journal.read(sql, args)

    def refresh_gauges(self) -> None:
        """Gauges from committed state (the read-only connection: a writer cannot stall it)."""
        rows = self.journal.read("SELECT state, COUNT(*) AS n FROM nodes GROUP BY state")
        for state in HELD_STATES:
            n = next((r["n"] for r in rows if r["state"] == state), 0)
            self.metrics.quarantined.labels(state).set(n)
        failed = self.journal.read("SELECT node FROM nodes WHERE state='action_failed'")
        self.metrics.node_failed.clear()
        for r in failed:
            self.metrics.node_failed.labels(r["node"]).set(1)
        for node in self.validator.stuck():  # a validation that could not be stopped pages too
            self.metrics.node_failed.labels(node).set(1)
        self.metrics.evictions_blocked.clear()
        for node, ev in self.journal.evacuations().items():
            for p in ev["pods"]:
                reason = p.get("reason") or f"HTTP{p.get('status')}"
                self.metrics.evictions_blocked.labels(node, reason).inc()
        self.metrics.paused.set(1 if self.engine.paused else 0)
        self.metrics.unreachable.set(1 if self.worker.unreachable else 0)
        self.metrics.breaker.set(1 if self.status()["breaker_open"] else 0)
        if self.maintenance is not None:
            self.maintenance.refresh(self.metrics)

    def health_problem(self) -> str:
        """Why the service cannot be trusted to act now ("" when healthy). Reads only the
        read-only connection, so a locked journal does not make /healthz hang."""
        if not self.worker.alive():
            return "worker not running"
        lag = time.monotonic() - self.worker.last_tick
        if self.worker.last_tick and lag > 3 * self.settings.tick_s + 30:
            return f"tick loop lags: last cycle {lag:.0f}s ago"
        if self.worker.write_error:
            return f"journal unwritable: {self.worker.write_error}"
        try:
            late = self.journal.read(
                "SELECT a.id, a.node FROM steps s JOIN actions a ON a.id=s.action_id "
                "WHERE s.state='waiting' AND a.state IN ('pending','waiting') AND s.deadline<? "
                "LIMIT 1",
                (self.clock.now() - 2 * self.settings.tick_s - 5,),
            )
        except Exception as e:  # the journal is the one thing we cannot act without
            return f"journal unavailable: {e}"
        if late:
            return f"action {late[0]['id']} on {late[0]['node']} is past its deadline"
        return ""

    def ssl_context(self) -> ssl.SSLContext | None:
        return ssl_context(self.settings)


def ssl_context(s: Settings) -> ssl.SSLContext | None:
    """The listener's TLS (the service's, and a standby's: remediation/leader/run.py)."""
    if s.tls_cert_file is None or s.tls_key_file is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(s.tls_cert_file), str(s.tls_key_file))
    return ctx


def _needs_validation(vp: Any, rec: dict[str, Any] | None) -> bool:
    """A node gpuwarden holds whose release the policy's suite must pass first."""
    held = rec is not None and rec["state"] not in ("released", None)
    return held and vp.suite_for(rec["fault_class"]) is not None  # type: ignore[index]


def make_backend(
    s: Settings, pol: Policy, topo: dict[str, dict[str, str]], runner: Runner | None
) -> Backend:
    if s.backend == "slurm":
        return SlurmBackend(runner or SubprocessRunner(), topo, s.command_timeout_s)
    if s.backend == "kubernetes":
        from remediation.backends.kubernetes import KubernetesBackend

        return KubernetesBackend.from_config(topo, pol.taint_effect, s.command_timeout_s)
    raise SettingsError(f"--backend {s.backend}: no such backend")


def make_projection(real: Backend | None, chosen: Backend) -> Projection:
    """Where placement tiers show: Slurm Weight/Extra, Kubernetes taints/labels, or nowhere
    (recorded only) without a scheduler."""
    if isinstance(real, SlurmBackend):
        from remediation.placement.slurm import SlurmPlacement

        return SlurmPlacement(real.runner, real.timeout)
    if real is not None and real.name == "kubernetes":
        from remediation.placement.kubernetes import KubePlacement

        return KubePlacement(real.api)  # type: ignore[attr-defined]
    return RecordOnly(lambda: (n.name for n in chosen.fleet()))


def make_suite_runner(pol: Policy, real: Backend | None) -> SuiteRunner | None:
    """Where validation suites run: a Slurm job in our reservation, or a Kubernetes Job
    pinned to the node. None under dry-run (the run is recorded, not made)."""
    vp = pol.validation
    if pol.dry_run or real is None or not vp.suites:
        return None
    if isinstance(real, SlurmBackend):
        from remediation.validation.release import SlurmSuiteRunner
        from remediation.validation.slurm import SlurmValidation

        return SlurmSuiteRunner(SlurmValidation(real.runner, vp.out_dir))
    if real.name == "kubernetes":
        from remediation.validation.kubernetes import KubernetesValidation, TaintedCordon
        from remediation.validation.release import KubernetesSuiteRunner

        if not vp.kube_image:
            raise SettingsError(
                "policy validation.kubernetes.image: required to run suites on Kubernetes"
            )
        api = real.api  # type: ignore[attr-defined]
        return KubernetesSuiteRunner(
            KubernetesValidation(
                api, vp.kube_namespace, vp.kube_image, vp.kube_gpus, TaintedCordon(real)
            )
        )
    return None


def make_resetter(pol: Policy, real: Backend | None) -> Any:
    """Where reset_gpu runs, like a suite: a Slurm job in our reservation, or a privileged
    Kubernetes Job bound to the node (the validation image, which has nvidia-smi). None
    (the rung falls back to reboot, saying why) under dry-run or without an image."""
    if pol.dry_run or real is None:
        return None
    if isinstance(real, SlurmBackend):
        from remediation.validation.slurm import SlurmValidation

        return SlurmValidation(real.runner, pol.validation.out_dir)
    if real.name == "kubernetes" and pol.validation.kube_image:
        from remediation.gpureset.kubernetes import KubernetesReset

        vp = pol.validation
        return KubernetesReset(real.api, vp.kube_namespace, vp.kube_image)  # type: ignore[attr-defined]
    return None


def build(
    s: Settings,
    *,
    clock: Clock | None = None,
    backend: Backend | None = None,
    runner: Runner | None = None,
    silences: Silences | None = None,
    suite_runner: SuiteRunner | None = None,
    collectors: CollectorsFor | None = None,
    events_sink: Sink | None = None,
) -> Service:
    pol = policy.load(s.policy)
    creds = auth.load(s.webhook_token, s.webhook_token_file, s.webhook_basic_auth_file)
    if not creds.expected and not s.allow_unauthenticated:
        raise SettingsError(
            "no webhook credentials: set GPUWARDEN_WEBHOOK_TOKEN, --webhook-token-file or "
            "--webhook-basic-auth-file (or --allow-unauthenticated for a local test)"
        )
    topo = topology.load(s.topology)
    clock = clock or SystemClock()
    journal = Journal(s.state_db, shared=s.elects)
    real = backend
    if real is None and s.backend != "dry-run":
        real = make_backend(s, pol, topo, runner)
    chosen: Backend = (
        real
        if real is not None and not pol.dry_run
        else DryRunBackend(journal, topo, clock.now, source=real)
    )
    metrics = Metrics()
    for collector in collectors(s, clock, list(topo)) if collectors else ():
        metrics.registry.register(collector)
    if silences is None:
        silences = AlertmanagerSilences(s.alertmanager) if s.alertmanager else NoSilences()
    pager = AlertmanagerPager(s.alertmanager) if s.alertmanager else NoPager()
    engine = Engine(journal, chosen, pol, clock, metrics, silences, pager)
    engine.validator = Validator(engine, suite_runner or make_suite_runner(pol, real))
    engine.placement = Placement(
        journal,
        pol.placement,
        make_projection(real, chosen),
        clock.now,
        metrics,
        chosen.fleet,
        dry_run=pol.dry_run or real is None,
    )
    executor = Executor(journal, chosen, pol, clock.now, lambda: engine.paused)
    executor.resetter = make_resetter(pol, real)
    engine.release_blocked = lambda node: reset_release.blocked(journal, executor.resetter, node)
    worker = Worker(engine, executor, s.tick_s)
    relay = make_relay(s, journal, clock, metrics, events_sink)
    maint = make_maintenance(s, pol, journal, chosen, real, engine, clock, relay)
    worker.ticks.append(maint.tick)
    return Service(
        s,
        pol,
        journal,
        chosen,
        engine,
        executor,
        worker,
        metrics,
        clock,
        creds if creds.expected else None,
        relay,
        maint,
    )


def make_maintenance(
    s: Settings, pol: Policy, journal: Journal, chosen: Backend, real: Backend | None,
    engine: Engine, clock: Clock, relay: Relay | None,
) -> Maintenance:  # fmt: skip
    """Rolling maintenance on the chosen backend, its suites run where the validator's
    run; the engine's guards stop counting the nodes it may give back (faults win)."""
    runner = getattr(real, "runner", None) if isinstance(real, SlurmBackend) else None
    partition = None
    if runner is not None:
        from remediation.backends.hostlist import expand
        from remediation.backends.runner import checked

        def partition(name: str) -> tuple[str, ...]:
            out = checked(runner, ("sinfo", "-h", "-p", name, "-o", "%N"), s.command_timeout_s)
            return tuple(n for part in out.split() for n in expand(part))

    maint = Maintenance(
        journal,
        chosen,
        pol,
        clock.now,
        lambda: engine.paused,
        engine.validator.runner if engine.validator is not None else None,
        s.state_db.parent / "maintenance",
        events_source=s.events_source if relay is not None else None,
        partition=partition,
        runner=runner,
        kube=getattr(real, "api", None)
        if real is not None and real.name == "kubernetes" and not pol.dry_run
        else None,
        kube_namespace=pol.validation.kube_namespace,
    )
    engine.yielding = maint.out_for_faults
    return maint


def make_relay(
    s: Settings, journal: Journal, clock: Clock, metrics: Metrics | None, sink: Sink | None
) -> Relay | None:
    """The events relay when ``--events-url`` is set (a bad token file stops the start)."""
    try:
        cfg = events_config.from_settings(s)
    except ValueError as e:
        raise SettingsError(str(e)) from None
    if cfg is None:
        return None
    sink = sink or HttpSink(cfg.url, cfg.timeout_s, cfg.token)
    capture.prime(journal)  # what the service accepts from now on goes out
    return Relay(journal, cfg, sink, clock.now, metrics)
