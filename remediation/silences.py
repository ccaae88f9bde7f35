"""Alertmanager silences as a per-node pause: asks Alertmanager's v2 API before acting.

An active silence whose matchers all match the alert's labels (e.g. just ``node=<n>``)
pauses remediation for that node. ``None`` means "could not ask"; the ``silenced`` guard
then denies if the policy requires the check (fail closed).
"""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any, Protocol


class Silences(Protocol):
    def silenced(self, labels: Mapping[str, str]) -> bool | None: ...


def matcher_matches(m: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    value = labels.get(str(m.get("name")), "")
    want = str(m.get("value", ""))
    hit = re.fullmatch(want, value) is not None if m.get("isRegex") else value == want
    return hit if m.get("isEqual", True) else not hit


def silence_matches(silence: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    if (silence.get("status") or {}).get("state") != "active":
        return False
    matchers = silence.get("matchers") or []
    return bool(matchers) and all(matcher_matches(m, labels) for m in matchers)


class NoSilences:
    """No Alertmanager configured: nothing is silenced."""

    def silenced(self, labels: Mapping[str, str]) -> bool | None:
        return False


class AlertmanagerSilences:
    def __init__(self, url: str, timeout: float = 3.0) -> None:
        self.url, self.timeout = url.rstrip("/"), timeout

    def silenced(self, labels: Mapping[str, str]) -> bool | None:
        node = labels.get("node", "")
        query = urllib.parse.urlencode({"filter": f'node="{node}"'})
        try:
            with urllib.request.urlopen(
                f"{self.url}/api/v2/silences?{query}", timeout=self.timeout
            ) as r:
                data = json.loads(r.read())
        except (OSError, ValueError):
            return None
        if not isinstance(data, list):
            return None
        return any(silence_matches(s, labels) for s in data if isinstance(s, dict))
