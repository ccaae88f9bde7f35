"""The events settings, checked at start-up (the ``events_*`` fields of remediation's
Settings: flags > GPUWARDEN_EVENTS_* > YAML). A bad value stops the start with one line."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remediation.events import filter as efilter
from remediation.events.cloudevent import MODES

DEFAULT_SOURCE = "/gpuwarden/remediation"


@dataclass(frozen=True)
class EventsConfig:
    url: str
    mode: str = "structured"
    source: str = DEFAULT_SOURCE
    keep: efilter.Filter = field(default_factory=efilter.Filter)
    max_attempts: int = 0  # 0: retry until delivered (only a refused event is dead-lettered)
    backoff_s: float = 1.0
    backoff_max_s: float = 300.0
    timeout_s: float = 10.0
    interval_s: float = 1.0
    retention_s: float = 7 * 86400.0
    token: str | None = None


def _url_ok(url: str) -> bool:
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018  (a bad port raises here)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def check(s: Any) -> None:
    """Raise ValueError (one line) for a bad ``events_*`` setting of remediation Settings."""
    if s.events_url is None:
        return
    if not _url_ok(s.events_url):
        raise ValueError(f"--events-url: {s.events_url!r} is not an http(s)://HOST[:PORT] URL")
    if s.events_mode not in (*MODES, "otlp"):
        raise ValueError(f"--events-mode: {s.events_mode!r} is not one of {', '.join(MODES)}, otlp")
    src = s.events_source
    if not src or any(c.isspace() for c in src) or urllib.parse.urlsplit(src).geturl() != src:
        raise ValueError(f"--events-source: {src!r} is not a URI-reference (no spaces)")
    efilter.build(s.events_kinds, s.events_min_severity, s.events_labels)
    if s.events_max_attempts < 0:
        raise ValueError("--events-max-attempts must be >= 0 (0: retry until delivered)")
    for name in ("backoff_s", "backoff_max_s", "timeout_s", "interval_s", "retention_s"):
        if getattr(s, f"events_{name}") <= 0:
            raise ValueError(f"--events-{name.replace('_', '-')} must be > 0")
    if s.events_backoff_max_s < s.events_backoff_s:
        raise ValueError("--events-backoff-max-s must be >= --events-backoff-s")


def from_settings(s: Any) -> EventsConfig | None:
    """The relay's configuration, None when no events URL is set (events off)."""
    if s.events_url is None:
        return None
    token = None
    if s.events_token_file is not None:
        try:
            token = Path(s.events_token_file).read_text().strip()
        except OSError as e:
            raise ValueError(f"--events-token-file: {e.strerror or e}") from None
    return EventsConfig(
        s.events_url, s.events_mode, s.events_source,
        efilter.build(s.events_kinds, s.events_min_severity, s.events_labels),
        s.events_max_attempts, s.events_backoff_s, s.events_backoff_max_s, s.events_timeout_s,
        s.events_interval_s, s.events_retention_s, token,
    )  # fmt: skip


def describe(s: Any) -> str:
    """One line for ``--check`` and the start-up log: where events go and which."""
    if s.events_url is None:
        return "events: off (no --events-url)"
    parts = urllib.parse.urlsplit(s.events_url)
    where = f"{parts.scheme}://{parts.netloc}{parts.path}"  # never a query's secrets
    what = [f"kinds {','.join(s.events_kinds) or 'all'}"]
    if s.events_min_severity:
        what.append(f"severity >= {s.events_min_severity}")
    if s.events_labels:
        what.append(f"labels {','.join(s.events_labels)}")
    how = "OTLP logs" if s.events_mode == "otlp" else f"CloudEvents ({s.events_mode})"
    return f"events: {how} to {where}, {'; '.join(what)}"
