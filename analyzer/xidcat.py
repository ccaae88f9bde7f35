"""The XID catalogue as the analyzer reads it: ``xid_catalog.yaml`` plus per-site overrides.

Sits beside the XID detector: it turns an XID number into class, severity and action. The
same YAML feeds the alert rules (alerts/ generates rules from ``xids.<n>.class/severity/
action``), so extensions keep that shape. Sites override single XIDs in the analyzer config
(``xid_overrides: {63: {action: drain}}``) because vendors disagree on some codes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
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
        "informational",
        "consequence",
        "unknown",
    }
)


@dataclass(frozen=True)
class XidInfo:
    xid: int
    name: str
    cls: str
    severity: str
    action: str
    repeat_count: int = 0
    repeat_window: float = 0.0

    @property
    def fatal(self) -> bool:
        return self.severity == "critical" or self.action in ("drain", "reboot")


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
    )
    if info.cls not in CLASSES:
        raise ValueError(f"xid {xid}: unknown class {info.cls!r}")
    if info.severity not in SEVERITIES:
        raise ValueError(f"xid {xid}: unknown severity {info.severity!r}")
    if info.action not in ACTIONS:
        raise ValueError(f"xid {xid}: unknown action {info.action!r}")
    return info


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
