"""The whole loop on one machine: simulator -> Prometheus -> analyzer -> Alertmanager -> remediation.

Used by `gpuwarden demo`, the end-to-end test and the end-to-end benchmark. Real Prometheus
and Alertmanager are wired in with the project's rules and routes when their binaries are
installed; without them the analyzer scrapes the simulator itself (embedded path) and no
alerts flow. Remediation acts through Slurm when a Slurm environment is given, else dry-run.
"""

from __future__ import annotations

import json
import secrets
import shutil
import sys
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from gpuwarden.processes import StartError, Supervisor, free_port_block
from simulator.telemetry import is_dcgm

ROOT = Path(__file__).resolve().parents[1]
RULES_DIR = ROOT / "alerts"


def rule_files(telemetry: str = "gpuwarden") -> list[Path]:
    """The rule files Prometheus loads for a fleet of ``telemetry``: the native ones, with each
    hardware file replaced by its dcgm-exporter variant (alerts/dcgm/, same name) on a dcgm
    fleet, as docs/alerts.md tells a dcgm operator to do. The others stay: findings, pipeline,
    placement and remediation read gpuwarden's own services' series, which either fleet has;
    fabric's have no dcgm variant (they stay silent on a dcgm fleet)."""
    native = sorted(RULES_DIR.glob("*.rules.yml"))
    if not is_dcgm(telemetry):
        return native
    return [RULES_DIR / "dcgm" / p.name if (RULES_DIR / "dcgm" / p.name).exists() else p
            for p in native]  # fmt: skip


@dataclass(frozen=True)
class StackOptions:
    workdir: Path
    nodes: int = 32
    seed: int = 1
    base_port: int = 9840
    scrape_interval_s: float = 5.0
    analyzer_interval_s: float = 5.0
    tick_s: float = 1.0  # simulator model step (wall seconds)
    real_servers: bool = True  # Prometheus + Alertmanager, when installed
    slurm_env: Mapping[str, str] | None = None  # SLURM_CONF etc. -> Slurm backend
    policy: Mapping[str, Any] | None = None  # remediation policy overrides (merged)
    scenario: Path | None = None
    time_scale: float = 1.0
    analyzer_config: Mapping[str, Any] | None = None  # analyzer YAML settings (--config)
    analyzer_push: bool = False  # the analyzer also posts findings to Alertmanager directly
    storage_mounts: tuple[str, ...] = ()  # checkpoint mounts the simulated nodes probe
    # dcgm-exporter: the simulator serves every node as dcgm-exporter + node_exporter would (the
    # analyzer reads that dialect through Prometheus; the embedded scrape reads only gpuwarden's)
    telemetry: str = "gpuwarden"
    # a mixed fleet rack by rack (simulate --skus, e.g. h100:2,mi300x:2) and its rack size
    skus: str | None = None
    nodes_per_leaf: int | None = None

    @property
    def backend(self) -> str:
        return "slurm" if self.slurm_env else "dry-run"


@dataclass
class Urls:
    simulator: str
    analyzer: str
    remediation: str
    prometheus: str | None = None
    alertmanager: str | None = None


def servers_installed() -> bool:
    return all(shutil.which(b) for b in ("prometheus", "prometheus-alertmanager"))


def demo_policy(overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """The shipped policy with actions turned on (the demo acts; the default is dry-run)."""
    base = yaml.safe_load((ROOT / "remediation" / "default_policy.yaml").read_text())
    base.update({"dry_run": False, "require_silence_check": False})
    base["checkpoint"] = {**base.get("checkpoint", {}), "deadline_s": 20, "restart_deadline_s": 60}
    base.update(dict(overrides or {}))
    return dict(base)


def _py(*module_args: str) -> list[str]:
    return [sys.executable, "-m", *module_args]


@dataclass
class Stack:
    opts: StackOptions
    sup: Supervisor = field(init=False)
    urls: Urls = field(init=False)
    token: str = field(default_factory=lambda: secrets.token_hex(16))

    def __post_init__(self) -> None:
        self.sup = Supervisor(self.opts.workdir / "logs")
        p = self.opts.base_port
        self.urls = Urls(
            f"http://127.0.0.1:{p}", f"http://127.0.0.1:{p + 1}", f"http://127.0.0.1:{p + 2}"
        )
        if self.opts.real_servers and servers_installed():
            self.urls.prometheus = f"http://127.0.0.1:{p + 3}"
            self.urls.alertmanager = f"http://127.0.0.1:{p + 4}"

    # ------------------------------------------------------------------ start / stop
    def start(self) -> Urls:
        w = self.opts.workdir
        w.mkdir(parents=True, exist_ok=True)
        try:
            self._start_simulator(w)
            self._write_topology(w)
            self._start_remediation(w)
            if self.urls.prometheus:
                self._start_alertmanager(w)
                self._start_prometheus(w)
            self._start_analyzer(w)
        except BaseException:
            self.stop()
            raise
        return self.urls

    def stop(self) -> None:
        self.sup.stop_all()

    def _port(self, url: str) -> str:
        return url.rsplit(":", 1)[1]

    def _start_simulator(self, w: Path) -> None:
        argv = _py(
            "gpuwarden",
            "simulate",
            "--nodes",
            str(self.opts.nodes),
            "--seed",
            str(self.opts.seed),
            "--listen",
            f"127.0.0.1:{self._port(self.urls.simulator)}",
            "--file-sd",
            str(w / "targets.json"),
            "--tick",
            str(self.opts.tick_s),
            "--time-scale",
            str(self.opts.time_scale),
            "--log-level",
            "warning",
        )
        if self.opts.scenario:
            argv += ["--scenario", str(self.opts.scenario)]
        if self.opts.storage_mounts:
            argv += ["--storage-mounts", ",".join(self.opts.storage_mounts)]
        if self.opts.telemetry != "gpuwarden":
            argv += ["--telemetry", self.opts.telemetry]
        if self.opts.skus:
            argv += ["--skus", self.opts.skus]
        if self.opts.nodes_per_leaf:
            argv += ["--nodes-per-leaf", str(self.opts.nodes_per_leaf)]
        self.sup.start("simulator", argv, ready_url=f"{self.urls.simulator}/healthz")

    def _write_topology(self, w: Path) -> None:
        """Failure domains for remediation's budgets, from the simulator's own inventory."""
        nodes = self.get_json(f"{self.urls.simulator}/nodes")
        topo = {"nodes": {n["node"]: {"leaf": n["leaf"]} for n in nodes}}
        (w / "topology.yml").write_text(yaml.safe_dump(topo))

    def _start_remediation(self, w: Path) -> None:
        pol = demo_policy(self.opts.policy)
        if "ack_dir" not in dict(self.opts.policy or {}).get("checkpoint", {}):
            # remediation refuses to start live without a writable ack directory
            (w / "acks").mkdir(exist_ok=True)
            (w / "acks").chmod(0o1777)
            pol["checkpoint"] = {**pol["checkpoint"], "ack_dir": str(w / "acks")}
        (w / "policy.yml").write_text(yaml.safe_dump(pol))
        (w / "webhook.token").write_text(self.token + "\n")
        (w / "webhook.token").chmod(0o600)
        argv = _py(
            "gpuwarden",  # the umbrella's remediation: with failure accounting's series
            "remediation",
            "--listen",
            f"127.0.0.1:{self._port(self.urls.remediation)}",
            "--policy",
            str(w / "policy.yml"),
            "--state-db",
            str(w / "remediation.db"),
            "--backend",
            self.opts.backend,
            "--webhook-token-file",
            str(w / "webhook.token"),
            "--tick-s",
            "1",
            "--topology",
            str(w / "topology.yml"),
        )
        if self.urls.alertmanager:
            argv += ["--alertmanager", self.urls.alertmanager]
        if self.urls.prometheus:  # accounting's exposure and job runs: the ETTR panel
            argv += ["--prometheus", self.urls.prometheus]
        self.sup.start(
            "remediation",
            argv,
            env=dict(self.opts.slurm_env or {}),
            ready_url=f"{self.urls.remediation}/healthz",
        )

    def _start_alertmanager(self, w: Path) -> None:
        assert self.urls.alertmanager
        config = {
            "route": {
                "receiver": "people",
                "group_by": ["alertname", "node", "gpu"],
                "group_wait": "0s",
                "group_interval": "2s",
                "repeat_interval": "1h",
                "routes": [
                    {"receiver": "remediation", "matchers": ['action=~".+"'], "continue": True}
                ],
            },
            "receivers": [
                {"name": "people"},
                {
                    "name": "remediation",
                    "webhook_configs": [
                        {
                            "url": f"{self.urls.remediation}/alertmanager",
                            "send_resolved": True,
                            "http_config": {
                                "authorization": {
                                    "type": "Bearer",
                                    "credentials_file": str(w / "webhook.token"),
                                }
                            },
                        }
                    ],
                },
            ],
        }
        (w / "alertmanager.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        port = self._port(self.urls.alertmanager)
        self.sup.start(
            "alertmanager",
            [
                "prometheus-alertmanager",
                f"--config.file={w / 'alertmanager.yml'}",
                f"--storage.path={w / 'amdata'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",
                "--log.level=warn",
                f"--web.external-url={self.urls.alertmanager}",
            ],
            ready_url=f"{self.urls.alertmanager}/-/ready",
        )

    def _start_prometheus(self, w: Path) -> None:
        assert self.urls.prometheus and self.urls.alertmanager
        s = f"{self.opts.scrape_interval_s:g}s"
        config = {
            "global": {"scrape_interval": s, "evaluation_interval": s},
            "rule_files": [str(p) for p in rule_files(self.opts.telemetry)],
            "alerting": {
                "alertmanagers": [
                    {
                        "static_configs": [
                            {"targets": [self.urls.alertmanager.removeprefix("http://")]}
                        ]
                    }
                ]
            },
            "scrape_configs": [
                {
                    "job_name": "gpuwarden-exporter",
                    "honor_labels": True,  # the exporter's own node label is the truth
                    "file_sd_configs": [
                        {"files": [str(w / "targets.json")], "refresh_interval": "5s"}
                    ],
                },
                {
                    "job_name": "gpuwarden-analyzer",
                    "static_configs": [{"targets": [self.urls.analyzer.removeprefix("http://")]}],
                },
                {
                    "job_name": "gpuwarden-remediation",
                    "static_configs": [
                        {"targets": [self.urls.remediation.removeprefix("http://")]}
                    ],
                },
                {
                    "job_name": "alertmanager",
                    "static_configs": [
                        {"targets": [self.urls.alertmanager.removeprefix("http://")]}
                    ],
                },
            ],
        }
        (w / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        port = self._port(self.urls.prometheus)
        self.sup.start(
            "prometheus",
            [
                "prometheus",
                f"--config.file={w / 'prometheus.yml'}",
                f"--storage.tsdb.path={w / 'promdata'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
                f"--web.external-url={self.urls.prometheus}",
            ],
            ready_url=f"{self.urls.prometheus}/-/ready",
        )

    def _start_analyzer(self, w: Path) -> None:
        port = self._port(self.urls.analyzer)
        argv = _py(
            "analyzer",
            "--listen",
            f"127.0.0.1:{port}",
            "--interval",
            f"{self.opts.analyzer_interval_s:g}",
        )
        if self.urls.prometheus:
            argv += ["--prometheus", self.urls.prometheus]
        else:
            argv += ["--targets", str(w / "targets.json")]
        if self.opts.analyzer_config:
            (w / "analyzer.yml").write_text(yaml.safe_dump(dict(self.opts.analyzer_config)))
            argv += ["--config", str(w / "analyzer.yml")]
        if self.opts.analyzer_push and self.urls.alertmanager:
            argv += ["--alertmanager", self.urls.alertmanager]
        self.sup.start("analyzer", argv, ready_url=f"{self.urls.analyzer}/metrics", timeout=90)

    # ------------------------------------------------------------------ talking to it
    def get_json(self, url: str, auth: bool = False) -> Any:
        headers = {"Authorization": f"Bearer {self.token}"} if auth else {}
        req = urllib.request.Request(url, headers=headers)
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read())

    def inject(self, node: str, kind: str, target: str, **parameters: Any) -> dict[str, Any]:
        body = json.dumps(
            {"node": node, "kind": kind, "target": target, "parameters": parameters}
        ).encode()
        req = urllib.request.Request(
            f"{self.urls.simulator}/inject",
            data=body,
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=5) as r:
            return dict(json.loads(r.read()))


def start_on_free_ports(opts: StackOptions, tries: int = 3) -> Stack:
    """Start a stack on a fresh block of loopback ports. A port can be taken between being
    found free and being bound (another process's outgoing connection draws from the same
    ephemeral range): a start that fails on an address in use is tried again on a new
    block; any other failure is raised at once."""
    for attempt in range(tries):
        stack = Stack(replace(opts, base_port=free_port_block(5)))
        try:
            stack.start()
            return stack
        except StartError as e:
            if "address already in use" not in str(e).lower() or attempt == tries - 1:
                raise
    raise RuntimeError("unreachable")
