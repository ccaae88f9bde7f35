"""Settings of the remediation service (flags > GPUWARDEN_<FIELD> env > YAML --config)."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from remediation.events import config as events_config
from remediation.events.config import DEFAULT_SOURCE

BACKENDS = ("dry-run", "slurm", "kubernetes")
LEADER_ELECT = ("off", "kubernetes", "directory")


def _http_url(url: str) -> bool:
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018  (a bad port raises here)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


@dataclass(frozen=True)
class Settings:
    listen: str = "127.0.0.1:9836"
    policy: Path | None = None  # None: the shipped default (dry-run)
    state_db: Path = Path("gpuwarden-remediation.db")
    backend: str = "dry-run"
    webhook_token: str | None = None  # env GPUWARDEN_WEBHOOK_TOKEN only (no flag)
    webhook_token_file: Path | None = None
    webhook_basic_auth_file: Path | None = None  # one line user:password
    allow_unauthenticated: bool = False
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    alertmanager: str | None = None  # for silences
    # Prometheus-compatible API the service's failure-accounting series read (exposure, the
    # jobs hit, job runs and so ETTR); remediation itself never queries it
    prometheus: str | None = None
    topology: Path | None = None
    tick_s: float = 5.0
    command_timeout_s: float = 10.0
    # events out (docs/remediation.md#events-out): CloudEvents over HTTP; None = off
    events_url: str | None = None
    events_mode: str = "structured"  # or binary, or otlp (OTLP/HTTP JSON log records)
    events_source: str = DEFAULT_SOURCE
    events_kinds: tuple[str, ...] = ()  # finding, decision, action, maintenance; () = all
    events_min_severity: str = ""  # info | warning | critical; "" = all
    events_labels: tuple[str, ...] = ()  # name=value / name!=value, all must hold
    events_token_file: Path | None = None  # bearer token for the receiver
    events_max_attempts: int = 0  # 0: retry until delivered
    events_backoff_s: float = 1.0
    events_backoff_max_s: float = 300.0
    events_timeout_s: float = 10.0
    events_interval_s: float = 1.0
    events_retention_s: float = 7 * 86400.0
    # one active instance among several (remediation/leader): off | kubernetes | directory
    leader_elect: str = "off"
    leader_dir: Path | None = None  # directory: shared by the hosts, honours flock
    leader_namespace: str = ""  # kubernetes: "" = the pod's namespace, else default
    leader_lease_name: str = "gpuwarden-remediation"
    leader_identity: str = ""  # "" = host, pid and a random tag
    leader_lease_s: float = 15.0
    leader_renew_deadline_s: float = 10.0
    leader_retry_s: float = 2.0

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"--backend: {self.backend!r} is not one of {', '.join(BACKENDS)}")
        host, sep, port = self.listen.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"--listen: {self.listen!r} is not HOST:PORT")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("--tls-cert-file and --tls-key-file go together")
        if self.prometheus is not None and not _http_url(self.prometheus):
            raise ValueError(
                f"--prometheus: {self.prometheus!r} is not an http(s)://HOST[:PORT] URL"
            )
        if self.tick_s <= 0 or self.command_timeout_s <= 0:
            raise ValueError("--tick-s and --command-timeout-s must be > 0")
        events_config.check(self)
        self._check_leader()

    def _check_leader(self) -> None:
        if self.leader_elect not in LEADER_ELECT:
            raise ValueError(
                f"--leader-elect: {self.leader_elect!r} is not one of {', '.join(LEADER_ELECT)}"
            )
        if self.leader_elect == "directory" and self.leader_dir is None:
            raise ValueError("--leader-elect directory needs --leader-dir")
        if self.leader_elect != "directory" and self.leader_dir is not None:
            raise ValueError("--leader-dir is only for --leader-elect directory")
        if not 0 < self.leader_retry_s < self.leader_renew_deadline_s < self.leader_lease_s:
            raise ValueError(
                "leader timing: want 0 < --leader-retry-s < --leader-renew-deadline-s < "
                f"--leader-lease-s, got {self.leader_retry_s:g}, "
                f"{self.leader_renew_deadline_s:g}, {self.leader_lease_s:g}"
            )

    @property
    def elects(self) -> bool:
        """Leader election is on: standbys wait, and the journal sits where other hosts open
        it too."""
        return self.leader_elect != "off"

    @property
    def host_port(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)
