"""The rules only an AMD (DME) fleet has, for the AMD variant (alerts/amd/).

Sits in alerts/ (decides), beside generate_amd_rules.py, which loads it. The native rules are
translated (dashboards/amd_translate.py); what NVIDIA's rules cannot say about an AMD Instinct
GPU is written here, in the catalogue's terms where the catalogue has the series (RAS errors per
block, ECC totals: translated like the native rules) and in DME's own names where it has none:

- ``gpu_health`` 0 (DME's health, 0 on the first uncorrectable error by default): GpuUnhealthy;
- deferred errors (poison caught, not consumed) per RAS block: GpuRasDeferredErrors, as the
  analyzer's ``ras_deferred`` finding (warning, cordon);
- XGMI: uncorrectable ``xgmi_wafl`` errors drain, a correctable rate cordons (as NVLink's);
- uncorrectable ECC, the native rule with its XID 94 exemption read as AMD's: an error that came
  with a contained (non-fatal, poison-consumed) HBM AFID and no fatal one cordons via its AFID
  alert instead of draining;
- AFIDs (``gpu_afid_errors{afid_index,severity}``, the AFIDs of the GPU's *last* RAS event): an
  event is the gauge taking a new value within the window (as dcgm's last-XID gauge,
  alerts/dcgm_xid.py); the alerts are generated from analyzer/afid_catalog.yaml per class, with
  the catalogue's severity and action and the CPER severity's floor (a fatal record drains);
- throttling: violation residency as the share of time each throttle reason held
  (``THROTTLE_RECORD``), which the native GpuThrottlingSustained then reads: PPT (the power cap)
  is ``sw_power_cap`` and never pages, socket/HBM thermal, VR thermal and PROCHOT do.
"""

from __future__ import annotations

from typing import Any

from analyzer.afidcat import AfidCatalog, AfidInfo, load_catalog
from analyzer.findings import FAULT_CLASS
from dashboards.amd_translate import THROTTLE_RECORD
from exporter import catalog as c
from exporter import catalog_amd as dme

WINDOW = "10m"
MEMORY = "1d"  # how far back a GPU's last AFIDs are remembered across an exporter gap
RUNBOOK = "https://github.com/gpuwarden/gpuwarden/blob/main/alerts/runbooks.md#"
AFID = dme.AFID_ERRORS
# labels of the scraped target or the workload, not of the event: a new pod must not make the
# same AFIDs a new series (and so a new event)
TARGET = ("instance", "pod", "namespace", "container", "pod_uuid", "job_id", "job_user",
          "job_partition", "kfd_process_id")  # fmt: skip
LAST = "gpuwarden_amd:gpu_afid_last:without_target"
EVENTS = f"gpuwarden_amd:gpu_afid_last:changed{WINDOW}"
NOTE = (
    " DME keeps the AFIDs of the GPU's last RAS event only: an earlier event between two"
    " scrapes is lost and a repeat of the same AFIDs is invisible (the analyzer's afid findings"
    " say when uncorrectable errors outnumber the events seen)."
)
_CLASS_NAME = {"memory": "Memory", "link": "Link", "firmware": "Firmware",
               "hardware": "Hardware"}  # fmt: skip
_RAS = c.GPU_RAS_ERRORS.name


def _rise(selector: str) -> str:
    """The rise within the window as a whole number (the native memory rules' form)."""
    return f"last_over_time({selector}[{WINDOW}]) - min_over_time({selector}[{WINDOW}])"


def throttle_record() -> dict[str, str]:
    """Per (GPU, throttle reason) the share of DME's interval each violation held (0-1); two
    causes of one reason (socket and HBM thermal) count the larger."""
    parts = []
    for cause, reason in dme.VIOLATIONS.items():
        pct = dme.violation_fields(cause)[1]
        parts.append(f'label_replace(label_replace({pct} / 100, "reason", "{reason}", "", ""),'
                     f' "dme_field", "{pct}", "", "")')  # fmt: skip
    return {"record": THROTTLE_RECORD, "expr": "max without (dme_field) (\n  "
            + "\n  or ".join(parts) + "\n)"}  # fmt: skip


def _labels(severity: str, action: str, fault_class: str) -> dict[str, str]:
    return {"severity": severity, "action": action, "fault_class": fault_class}


def gpu_rules() -> list[dict[str, Any]]:
    """Alerts of the gpu file (after the translated ones)."""
    return [{
        "alert": "GpuUnhealthy",
        # DME's own verdict (its 30 s health poll); AMD's device plugin stops scheduling on
        # the GPU. How grave the cause is, the ECC, RAS and AFID alerts say (they drain).
        "expr": "gpu_health == 0",
        "for": "2m",
        "keep_firing_for": "5m",
        "labels": _labels("warning", "cordon", "gpu_lost"),
        "annotations": {
            "summary": "GPU {{ $labels.gpu }} on {{ $labels.node }} is unhealthy",
            "description": "DME reports GPU {{ $labels.gpu }}{{ with $labels.gpu_uuid }} ({{ . }})"
                           "{{ end }} on {{ $labels.node }} unhealthy (gpu_health 0) for 2"
                           " minutes; by default it turns so on the first uncorrectable error.",
            "runbook_url": RUNBOOK + "gpuunhealthy",
        },
    }]  # fmt: skip


def _afid_events(values: str) -> str:
    """An inline AFID event on a GPU in the window whose gauge ``values`` selects (for a rule
    of another group, which must not read this variant's AFID recordings a cycle late)."""
    return (f"max by (node, gpu) (\n      ({values})\n      and (changes({AFID}[{WINDOW}]) > 0"
            f" or {AFID} unless {AFID} offset {WINDOW})\n    )")  # fmt: skip


def memory_rules(cat: AfidCatalog) -> list[dict[str, Any]]:
    """Records and alerts of the memory file beside the translated ones, in native terms."""
    memory = [e for e in cat.entries.values() if e.cls == "memory"]
    sev = dme.AFID_SEVERITY
    contained = " or ".join(f'{AFID}{{{sev}!="fatal"}} == {e.afid}' for e in memory
                            if e.cper_severity == "non_fatal_uncorrected")  # fmt: skip
    uncontained = " or ".join([*(f"{AFID} == {e.afid}" for e in memory if e.severity == "critical"),
                               f'{AFID}{{{sev}="fatal"}}'])  # fmt: skip
    deferred = f'{_RAS}{{error_type="deferred"}}'
    return [
        # every block's deferred errors as one series each, so the rise is taken once
        {"record": "gpuwarden:gpu_ras_errors:deferred", "expr": deferred},
        {
            "record": "gpuwarden:gpu_ras_deferred:increase10m",
            "expr": _rise("gpuwarden:gpu_ras_errors:deferred"),
        },
        {
            "alert": "GpuEccUncorrectable",
            # As the native rule: an error that came with a contained HBM event (a non-fatal
            # record of AFID 22/23: the poison was caught and contained) pages through its AFID
            # alert (cordon) instead, unless an uncontained one (a fatal record, AFID 20/21/25)
            # came too.
            "expr": "max without (counter_type) (\n"
            '  gpuwarden:gpu_ecc_errors:increase10m{error_type="uncorrected"}\n) > 0\n'
            f"unless on (node, gpu) (\n    {_afid_events(contained)}\n"
            f"  unless on (node, gpu)\n    {_afid_events(uncontained)}\n)\n",
            "labels": _labels("critical", "drain", "memory"),
            "annotations": {
                "summary": "Uncorrectable ECC errors on {{ $labels.node }} GPU {{ $labels.gpu }}",
                "description": "GPU {{ $labels.gpu }}{{ with $labels.gpu_uuid }} ({{ . }}){{ end }}"
                " on {{ $labels.node }} reported {{ $value | humanize }}"
                " uncorrectable ECC error(s) in the last 10 minutes.",
                "runbook_url": RUNBOOK + "gpueccuncorrectable",
            },
        },
        {
            "alert": "GpuRasDeferredErrors",
            # Poison caught before it was consumed (the analyzer's ras_deferred): keep new work
            # off the GPU; the job that owns the page may still finish.
            "expr": "gpuwarden:gpu_ras_deferred:increase10m > 0",
            "labels": _labels("warning", "cordon", FAULT_CLASS["ras_deferred"]),
            "annotations": {
                "summary": "Deferred (poisoned) errors in {{ $labels.block }} of {{ $labels.node }}"
                " GPU {{ $labels.gpu }}",
                "description": "GPU {{ $labels.gpu }} on {{ $labels.node }} deferred"
                " {{ $value | humanize }} uncorrectable error(s) in RAS block"
                " {{ $labels.block }} (umc is HBM) in the last 10 minutes: the"
                " data was poisoned, not yet consumed.",
                "runbook_url": RUNBOOK + "gpurasdeferrederrors",
            },
        },
    ]


def xgmi_rules() -> list[dict[str, Any]]:
    """XGMI errors (DME has no link state: a lost link is the analyzer's xgmi finding)."""
    unc = f'{_RAS}{{block="xgmi_wafl",error_type="uncorrectable"}}'
    cor = f'{_RAS}{{block="xgmi_wafl",error_type="correctable"}}'
    nvlink = FAULT_CLASS["xgmi_link_lost"]
    return [
        {"record": "gpuwarden:gpu_xgmi_errors:rate5m", "expr": f"rate({cor}[5m])"},
        {
            "alert": "XgmiUncorrectableErrors",
            "expr": f"{_rise(unc)} > 0",
            "labels": _labels("critical", "drain", nvlink),
            "annotations": {
                "summary": "Uncorrectable XGMI errors on {{ $labels.node }} GPU {{ $labels.gpu }}",
                "description": "The XGMI (xgmi_wafl) block of GPU {{ $labels.gpu }} on"
                               " {{ $labels.node }} reported {{ $value | humanize }} uncorrectable"
                               " error(s) in the last 10 minutes.",
                "runbook_url": RUNBOOK + "xgmiuncorrectableerrors",
            },
        },
        {
            "alert": "XgmiErrorRateHigh",
            # as NvlinkErrorRateHigh: a few corrected errors are retried; a sustained rate
            # costs bandwidth and precedes a link loss. 1 error/s.
            "expr": "gpuwarden:gpu_xgmi_errors:rate5m > 1",
            "for": "10m",
            "labels": _labels("warning", "cordon", nvlink),
            "annotations": {
                "summary": "XGMI of {{ $labels.node }} GPU {{ $labels.gpu }} has a high error rate",
                "description": "The XGMI (xgmi_wafl) block of GPU {{ $labels.gpu }} on"
                               ' {{ $labels.node }} corrected {{ printf "%.3g" $value }} errors/s'
                               " for 10 minutes.",
                "runbook_url": RUNBOOK + "xgmierrorratehigh",
            },
        },
    ]  # fmt: skip


def afid_records() -> list[dict[str, str]]:
    """The gauge without the target's labels (its CPER severity as ``cper_severity``, since
    ``severity`` is the alert's), and its events: a non-zero value new within the window."""
    last, before = LAST, f"last_over_time({LAST}[{MEMORY}] offset {WINDOW})"
    return [
        {"record": LAST,
         "expr": f"max without ({', '.join((*TARGET, dme.AFID_SEVERITY))}) (\n  label_replace("
                 f'{AFID}, "cper_severity", "$1", "{dme.AFID_SEVERITY}", "(.*)")\n)'},
        {"record": EVENTS,
         "expr": f"{last} > 0 and (\n  changes({last}[{WINDOW}]) > 0\n  or {last} != {before}\n"
                 f"  or {last} unless {before}\n)"},
    ]  # fmt: skip


def _values(afids: list[int], sel: str = "") -> str:
    return " or ".join(f"{EVENTS}{sel} == {a}" for a in afids)


def _afid_alert(name: str, expr: str, info: tuple[str, str, str], what: str, cls: str
                ) -> dict[str, Any]:  # fmt: skip
    """``afid_class``: the catalogue's class (as the XID alerts' ``xid_class``), which the
    failure accounting reads as the component (memory: gpu_memory, link: the XGMI fabric)."""
    severity, action, fault_class = info
    return {
        "alert": name,
        "expr": expr,
        "labels": {**_labels(severity, action, fault_class), "afid_class": cls},
        "annotations": {
            "summary": f"{what} on {{{{ $labels.node }}}} GPU {{{{ $labels.gpu }}}}: AFID"
                       " {{ $value }}",
            "description": "AFID {{ $value }} ({{ $labels.cper_severity }} CPER record) is among"
                           " the last RAS event's AFIDs DME reports for GPU {{ $labels.gpu }} on"
                           " {{ $labels.node }} (analyzer/afid_catalog.yaml says what it is and"
                           " AMD's resolution)." + NOTE,
            "runbook_url": RUNBOOK + name.lower(),
        },
    }  # fmt: skip


def afid_alerts(cat: AfidCatalog) -> list[dict[str, Any]]:
    """Per AFID class a fatal alert (the catalogue's critical AFIDs, and any AFID of the class
    in a fatal CPER record: the floor), one for the warnings that cordon, one for the
    unclassified (16999, or an AFID the catalogue does not list); corrected ones are counted,
    not paged (as the analyzer's afid detector)."""
    entries: list[AfidInfo] = sorted(cat.entries.values(), key=lambda e: e.afid)
    fatal = ("critical", "drain", FAULT_CLASS["afid_fatal"])
    out = []
    for cls, title in _CLASS_NAME.items():
        crit = [e.afid for e in entries if e.cls == cls and e.severity == "critical"]
        rest = [e.afid for e in entries if e.cls == cls and e.severity != "critical"]
        parts = [p for p in (_values(crit), _values(rest, '{cper_severity="fatal"}')) if p]
        if parts:
            out.append(_afid_alert(f"GpuAfidFatal{title}", "\nor ".join(parts) + "\n", fatal,
                                   f"Fatal {cls} RAS event", cls))  # fmt: skip
    listed = [e.afid for e in entries if e.cls in _CLASS_NAME]
    out.append(_afid_alert("GpuAfidFatalUnknown",
                           f'{EVENTS}{{cper_severity="fatal"}}\nunless ({_values(listed)})\n',
                           fatal, "Fatal unclassified RAS event", "unknown"))  # fmt: skip
    warn = [e for e in entries if e.severity == "warning" and e.cls in _CLASS_NAME]
    for action, cls in sorted({(e.action, e.cls) for e in warn}):
        afids = [e.afid for e in warn if (e.action, e.cls) == (action, cls)]
        name = "GpuAfidError" if action == "cordon" else f"GpuAfidError{action.title()}"
        out.append(_afid_alert(name, _values(afids, '{cper_severity!="fatal"}') + "\n",
                               ("warning", action, FAULT_CLASS["afid_event"]),
                               "Uncorrected RAS event", cls))  # fmt: skip
    unknown = [e for e in entries if e.cls not in _CLASS_NAME]
    action = unknown[0].action if unknown else "notify"
    out.append(_afid_alert(
        "GpuAfidUnclassified",
        f'{EVENTS}{{cper_severity!="fatal"}}\nunless ({_values(listed)})\n',
        ("warning", action, FAULT_CLASS["afid_event"]), "Unclassified RAS event",
        "unknown"))  # fmt: skip
    return out


def catalogue() -> AfidCatalog:
    return load_catalog()
