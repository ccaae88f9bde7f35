"""Which events leave: a filter by kind, severity and labels (pure; validated at start-up).

Applied when an event is put into the outbox (outbox.py), so a receiver never sees what it
did not ask for and the outbox never holds it. Severities are the alert rules' (alerts/*.yml:
info < warning < critical); an event without one (an action without a severity label) passes
a severity floor only when ``keep_unrated`` is set (default: kept, since an action on a node
is never noise). Label selectors are Alertmanager-like ``name=value`` and ``name!=value``;
all must hold (a missing label is the empty string, as in Prometheus).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from remediation.events.cloudevent import KINDS

SEVERITIES = ("info", "warning", "critical")
_SELECTOR = re.compile(r"^([a-zA-Z_][a-zA-Z0-9_]*)(!=|=)(.*)$")


@dataclass(frozen=True)
class Selector:
    label: str
    equal: bool
    value: str

    def holds(self, labels: Mapping[str, str]) -> bool:
        return (labels.get(self.label, "") == self.value) == self.equal


def selector(text: str) -> Selector:
    m = _SELECTOR.match(text.strip())
    if m is None:
        raise ValueError(f"label selector {text!r} is not name=value or name!=value")
    return Selector(m[1], m[2] == "=", m[3].strip().strip('"'))


@dataclass(frozen=True)
class Filter:
    kinds: frozenset[str] = frozenset(KINDS)
    min_severity: str = ""  # "" = every severity
    selectors: tuple[Selector, ...] = ()
    keep_unrated: bool = True

    def passes(self, kind: str, severity: str, labels: Mapping[str, str]) -> bool:
        if kind not in self.kinds:
            return False
        if self.min_severity:
            if severity not in SEVERITIES:
                if not self.keep_unrated:
                    return False
            elif SEVERITIES.index(severity) < SEVERITIES.index(self.min_severity):
                return False
        return all(s.holds(labels) for s in self.selectors)


def build(kinds: Iterable[str] = (), min_severity: str = "", labels: Iterable[str] = ()) -> Filter:
    """A filter from settings; ValueError with a one-line reason on a bad value."""
    chosen = frozenset(kinds) or frozenset(KINDS)
    unknown = sorted(chosen - set(KINDS))
    if unknown:
        raise ValueError(f"--events-kinds: {', '.join(unknown)} not among {', '.join(KINDS)}")
    if min_severity and min_severity not in SEVERITIES:
        raise ValueError(
            f"--events-min-severity: {min_severity!r} is not one of {', '.join(SEVERITIES)}"
        )
    return Filter(chosen, min_severity, tuple(selector(t) for t in labels))
