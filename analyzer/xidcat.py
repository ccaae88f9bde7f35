"""The XID catalogue as the analyzer reads it: ``xid_catalog.yaml`` plus per-site overrides.

Sits beside the XID detector: it turns an XID number into class, severity and action. The
same YAML feeds the alert rules (alerts/ generates rules from ``xids.<n>.class/severity/
action``), so extensions keep that shape. Sites override single XIDs in the analyzer config
(``xid_overrides: {63: {action: drain}}``) because vendors disagree on some codes.

Each entry also carries NVIDIA's immediate and investigatory resolution (``nvidia``), whether
a GPU reset suffices (``reset_suffices``), why gpuwarden departs from NVIDIA where it does
(``deviation``), and for the NVLink5 XIDs 144-150 NVIDIA's decode rows (``subcodes``), each
with its own severity and action. :func:`resolution` and :func:`reset_suffices` answer from
the shipped catalogue; remediation does not import this module, it reads the same facts from
the alert labels (``reset_suffices``, ``nvidia_resolution``) that alerts/ generates.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from analyzer.findings import ACTIONS, SEVERITIES

CATALOG_PATH = Path(__file__).with_name("xid_catalog.yaml")
CLASSES = frozenset(
    {
        "application",
        "hardware",
        "memory",
        "link",
        "firmware",
        "driver",
        "power",
        "informational",
        "consequence",
        "unknown",
    }
)


@dataclass(frozen=True)
class Resolution:
    """NVIDIA's answer for an XID (or one decode row of 144-150), verbatim."""

    immediate: str = ""
    investigatory: str = ""


@dataclass(frozen=True)
class SubCode:
    """One NVLink5 decode row: the unit the log line names, its error status, the sub-code
    (bits 20-25 of intrinfo), and what gpuwarden does about it."""

    unit: str
    error_status: int
    index: int
    severity: str
    action: str
    reset_suffices: bool = False
    nvidia: Resolution = Resolution()

    def names(self, unit: str) -> bool:
        """True when a log line's unit is this row's (``NETIR_LINK_EVT/NETIR_LINK_DOWN`` is
        logged whole or as either half)."""
        return unit == self.unit or unit in self.unit.split("/")


@dataclass(frozen=True)
class XidInfo:
    xid: int
    name: str
    cls: str
    severity: str
    action: str
    repeat_count: int = 0
    repeat_window: float = 0.0
    reset_suffices: bool = False
    nvidia: Resolution = Resolution()
    deviation: str = ""
    subcodes: tuple[SubCode, ...] = field(default=())

    @property
    def fatal(self) -> bool:
        return self.severity == "critical" or self.action in ("drain", "reboot")

    def subcode(self, unit: str, error_status: int, index: int) -> SubCode | None:
        """The decode row of one NVLink5 line, or None when the line decodes to none (the
        XID-level fields apply then). A whole-name match wins over a half-name one."""
        rows = [r for r in self.subcodes if r.error_status == error_status and r.index == index]
        exact = [r for r in rows if r.unit == unit]
        named = exact or [r for r in rows if r.names(unit)]
        return named[0] if named else None


@dataclass(frozen=True)
class XidCatalog:
    entries: Mapping[int, XidInfo]

    def get(self, xid: int) -> XidInfo:
        info = self.entries.get(xid)
        if info is None:
            return XidInfo(xid, f"XID {xid}", "unknown", "warning", "notify")
        return info


def parse_duration(v: Any) -> float:
    """``"5s"``, ``"10m"``, ``"1h"``, ``"2d"`` or a number of seconds."""
    if isinstance(v, (int, float)):
        return float(v)
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", str(v))
    if not m:
        raise ValueError(f"not a duration: {v!r}")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def _entry(xid: int, raw: Mapping[str, Any], base: XidInfo | None = None) -> XidInfo:
    if not isinstance(raw, Mapping):
        raise ValueError(f"xid {xid}: expected a mapping")
    info = base or XidInfo(xid, f"XID {xid}", "unknown", "warning", "notify")
    rep = raw.get("repeat") or {}
    info = replace(
        info,
        name=str(raw.get("name", info.name)),
        cls=str(raw.get("class", info.cls)),
        severity=str(raw.get("severity", info.severity)),
        action=str(raw.get("action", info.action)),
        repeat_count=int(rep.get("count", info.repeat_count)),
        repeat_window=parse_duration(rep.get("window", info.repeat_window)),
        reset_suffices=bool(raw.get("reset_suffices", info.reset_suffices)),
        nvidia=_resolution(raw["nvidia"]) if "nvidia" in raw else info.nvidia,
        deviation=str((raw.get("deviation") or {}).get("reason", info.deviation)),
    )
    if "subcodes" in raw:
        info = replace(info, subcodes=tuple(_subcode(xid, r) for r in raw["subcodes"]))
    if info.cls not in CLASSES:
        raise ValueError(f"xid {xid}: unknown class {info.cls!r}")
    _check(f"xid {xid}", info.severity, info.action)
    return info


def _check(where: str, severity: str, action: str) -> None:
    if severity not in SEVERITIES:
        raise ValueError(f"{where}: unknown severity {severity!r}")
    if action not in ACTIONS:
        raise ValueError(f"{where}: unknown action {action!r}")


def _resolution(raw: Any) -> Resolution:
    if not isinstance(raw, Mapping):
        raise ValueError("nvidia: expected {immediate, investigatory}")
    return Resolution(str(raw.get("immediate", "")), str(raw.get("investigatory", "")))


def _subcode(xid: int, raw: Mapping[str, Any]) -> SubCode:
    row = SubCode(
        unit=str(raw["unit"]),
        error_status=int(str(raw["error_status"]), 0),
        index=int(raw.get("index", 0)),
        severity=str(raw["severity"]),
        action=str(raw["action"]),
        reset_suffices=bool(raw.get("reset_suffices", False)),
        nvidia=_resolution(raw.get("nvidia") or {}),
    )
    _check(f"xid {xid} {row.unit} {raw['error_status']}", row.severity, row.action)
    return row


def load_catalog(
    path: str | Path | None = None, overrides: Mapping[Any, Mapping[str, Any]] | None = None
) -> XidCatalog:
    data = yaml.safe_load(Path(path or CATALOG_PATH).read_text()) or {}
    table = data.get("xids") if isinstance(data, dict) else None
    if not isinstance(table, dict):
        raise ValueError("xid catalogue: expected a top-level 'xids' mapping")
    entries = {int(k): _entry(int(k), v) for k, v in table.items()}
    for k, v in (overrides or {}).items():
        xid = int(k)
        entries[xid] = _entry(xid, v, entries.get(xid))
    return XidCatalog(entries)


@cache
def _shipped() -> XidCatalog:
    return load_catalog()


def resolution(
    xid: int, unit: str | None = None, error_status: int = 0, index: int = 0
) -> Resolution:
    """NVIDIA's resolution for an XID (and, for 144-150, the decode row of one line); an XID
    NVIDIA does not list answers ``Resolution()``."""
    info = _shipped().get(xid)
    row = info.subcode(unit, error_status, index) if unit is not None else None
    return row.nvidia if row else info.nvidia


def reset_suffices(
    xid: int, unit: str | None = None, error_status: int = 0, index: int = 0
) -> bool:
    """True when NVIDIA's answer to this XID (or decode row) is a GPU reset."""
    info = _shipped().get(xid)
    row = info.subcode(unit, error_status, index) if unit is not None else None
    return row.reset_suffices if row else info.reset_suffices
