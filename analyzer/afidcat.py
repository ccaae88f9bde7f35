"""The AFID catalogue as the analyzer reads it: ``afid_catalog.yaml`` plus per-site overrides.

Sits beside the AFID detector (:mod:`analyzer.detectors.afid`), as :mod:`analyzer.xidcat` sits
beside the XID one: it turns an AMD Field ID and the CPER severity of its event into class,
severity and action. Sites override single AFIDs in the analyzer config
(``afid_overrides: {22: {action: drain}}``). Each entry also carries AMD's resolution (the
Service Action Guide condition the event falls under: ``amd``) and why gpuwarden departs from
it where it does (``deviation``). An AFID the catalogue lacks is judged by its CPER severity
alone (``cper_severities``): a fatal event is never less than critical and drain.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from analyzer.xidcat import CLASSES, _check

CATALOG_PATH = Path(__file__).with_name("afid_catalog.yaml")
CPER_SEVERITIES = ("fatal", "non_fatal_uncorrected", "non_fatal_corrected")
_ANY = ("uncorrected", "any")  # an AFID the decoder gives to several CPER severities
_RANK = {"info": 0, "warning": 1, "critical": 2}


@dataclass(frozen=True)
class AmdResolution:
    """AMD's answer for an event: the SAG condition and its remediation (fixture codes)."""

    condition: str = ""
    physical_action: bool = False
    remediation: str = ""
    on_test_failure: str = ""


@dataclass(frozen=True)
class AfidInfo:
    afid: int
    name: str
    cls: str
    cper_severity: str
    severity: str
    action: str
    reset_suffices: bool = False
    amd: AmdResolution = AmdResolution()
    deviation: str = ""

    @property
    def fatal(self) -> bool:
        return self.severity == "critical" or self.action in ("drain", "reboot")


@dataclass(frozen=True)
class AfidCatalog:
    entries: Mapping[int, AfidInfo]
    by_severity: Mapping[str, tuple[str, str]]  # CPER severity -> (severity, action)

    def get(self, afid: int, cper_severity: str = "") -> AfidInfo:
        """The entry for ``afid`` as an event of ``cper_severity`` shows it: never milder than
        the CPER severity's floor (an uncorrected AFID in a fatal record drains)."""
        info = self.entries.get(afid)
        if info is None:
            info = AfidInfo(afid, f"AFID {afid}", "unknown", "any", "warning", "notify")
        floor = self.by_severity.get(cper_severity)
        if floor and _RANK[floor[0]] > _RANK[info.severity]:
            info = replace(info, severity=floor[0], action=floor[1])
        return info


def _entry(afid: int, raw: Mapping[str, Any], base: AfidInfo | None = None) -> AfidInfo:
    if not isinstance(raw, Mapping):
        raise ValueError(f"afid {afid}: expected a mapping")
    info = base or AfidInfo(afid, f"AFID {afid}", "unknown", "any", "warning", "notify")
    amd = raw.get("amd")
    info = replace(
        info,
        name=str(raw.get("name", info.name)),
        cls=str(raw.get("class", info.cls)),
        cper_severity=str(raw.get("cper_severity", info.cper_severity)),
        severity=str(raw.get("severity", info.severity)),
        action=str(raw.get("action", info.action)),
        reset_suffices=bool(raw.get("reset_suffices", info.reset_suffices)),
        amd=AmdResolution(**amd) if isinstance(amd, Mapping) else info.amd,
        deviation=str((raw.get("deviation") or {}).get("reason", info.deviation)),
    )
    if info.cls not in CLASSES:
        raise ValueError(f"afid {afid}: unknown class {info.cls!r}")
    if info.cper_severity not in (*CPER_SEVERITIES, *_ANY):
        raise ValueError(f"afid {afid}: unknown CPER severity {info.cper_severity!r}")
    _check(f"afid {afid}", info.severity, info.action)
    return info


def load_catalog(
    path: str | Path | None = None, overrides: Mapping[Any, Mapping[str, Any]] | None = None
) -> AfidCatalog:
    data = yaml.safe_load(Path(path or CATALOG_PATH).read_text()) or {}
    table = data.get("afids") if isinstance(data, dict) else None
    if not isinstance(table, dict):
        raise ValueError("afid catalogue: expected a top-level 'afids' mapping")
    entries = {int(k): _entry(int(k), v) for k, v in table.items()}
    for k, v in (overrides or {}).items():
        entries[int(k)] = _entry(int(k), v, entries.get(int(k)))
    floors = {}
    for sev, raw in (data.get("cper_severities") or {}).items():
        if sev not in CPER_SEVERITIES:
            raise ValueError(f"afid catalogue: unknown CPER severity {sev!r}")
        _check(f"cper severity {sev}", str(raw["severity"]), str(raw["action"]))
        floors[sev] = (str(raw["severity"]), str(raw["action"]))
    return AfidCatalog(entries, floors)


@cache
def _shipped() -> AfidCatalog:
    return load_catalog()


def resolution(afid: int) -> AmdResolution:
    """AMD's resolution for an AFID (``AmdResolution()`` where AMD names no condition)."""
    return _shipped().get(afid).amd
