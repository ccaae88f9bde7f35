"""XID rules over dcgm-exporter's last-XID gauge, for the dcgm-exporter variant (alerts/dcgm/).

Sits in alerts/ (decides), beside generate_dcgm_rules.py, which loads it. The native XID rules
(alerts/generate_xid_rules.py) read a counter per (GPU, XID); dcgm-exporter serves only
``DCGM_FI_DEV_XID_ERRORS``, a gauge holding the code of the LAST XID of the GPU (0 until the
first; 4.x also labels it ``err_code``/``err_msg``, so a new code is a new series). An XID
event is that gauge taking a non-zero value within the window: it changed, it differs from its
last value before the window (the exporter was away), or it is new (never seen the day before).
A repeat of the same XID does not change the gauge and is invisible. A PromQL label cannot be
taken from a value, so one recording names the code: ``xid="<code>"`` for each code of the
catalogue that alerts. The alerts are the native per-class rules from the same catalogue, with
their names, severity and labels, reading that recording instead of the counter's increase.
"""

from __future__ import annotations

from typing import Any

from exporter.catalog import DCGM_LAST_XID

WINDOW = "10m"
MEMORY = "1d"  # how far back a GPU's last XID is remembered across an exporter gap
LAST = "gpuwarden_dcgm:gpu_xid_last:without_target"
EVENTS = f"gpuwarden_dcgm:gpu_xid_last:changed{WINDOW}"
NOTE = (
    " dcgm-exporter serves only the last XID per GPU: a repeat of the same XID is invisible"
    " there, so this alert counts one event."
)
LOGGED = 'was logged {{ printf "%.0f" $value }} time(s)'
# native rules with no dcgm form, and why
LEFT_OUT = {
    "GpuXidNvlink5": "dcgm-exporter does not serve the NVLink5 XID's unit, status or sub-code",
    "GpuXidRepeatedApplication": "a repeat of the same XID is invisible on dcgm-exporter's "
    "last-XID gauge",
}


def alerting_xids(cat: dict[int, dict[str, Any]]) -> list[int]:
    return sorted(x for x, e in cat.items() if e["severity"] in ("critical", "warning"))


def recordings(cat: dict[int, dict[str, Any]], increase_record: str) -> list[dict[str, str]]:
    """The gauge without the target's labels, its events, and the events named by code
    (recorded as ``increase_record`` renamed, value 1: one event seen)."""
    last, before = LAST, f"last_over_time({LAST}[{MEMORY}] offset {WINDOW})"
    events = (
        f"{last} > 0 and (\n  changes({last}[{WINDOW}]) > 0\n  or {last} != {before}\n"
        f"  or {last} unless {before}\n)"
    )
    named = "\nor ".join(
        f'label_replace({EVENTS} == {x}, "xid", "{x}", "", "")' for x in alerting_xids(cat)
    )
    return [
        {
            "record": LAST,
            "expr": f"max without (instance, pod, err_code, err_msg) ({DCGM_LAST_XID.name})",
        },
        {"record": EVENTS, "expr": events},
        {"record": increase_record, "expr": f"(\n{named}\n) * 0 + 1"},
    ]


def alert(rule: dict[str, Any], native_record: str, record: str) -> dict[str, Any]:
    """A native per-class XID alert reading the dcgm events; its text says what dcgm hides."""
    notes = dict(rule["annotations"])
    notes["description"] = (
        notes["description"].replace(LOGGED, "became the last XID dcgm-exporter reports") + NOTE
    )
    return {**rule, "expr": rule["expr"].replace(native_record, record), "annotations": notes}
