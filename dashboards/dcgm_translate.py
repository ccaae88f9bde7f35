"""PromQL over gpuwarden's series, rewritten for a fleet that runs dcgm-exporter instead.

The dcgm-exporter dialect of the shared translator (:mod:`dashboards.translate`): each
catalogue metric's ``DcgmField`` (name, unit scale, the native labels a field pins, the labels
it sums away), dcgm-exporter's host label for ``node`` and ``UUID`` for ``uuid``. Recording
rules of the variant are named ``gpuwarden_dcgm:...`` so both variants can be loaded into one
Prometheus. The dcgm-exporter variants of the alert rules (``alerts/generate_dcgm_rules.py`` ->
``alerts/dcgm/``) and of the dashboards (``python -m dashboards`` -> ``dashboards/json/dcgm/``)
are generated through it. Pure string functions; no I/O.
"""

from __future__ import annotations

from dashboards import translate as t
from dashboards.translate import SERVICES, Untranslatable
from exporter import catalog as c
from exporter.catalog import MetricDef

__all__ = ["DCGM", "HOST_LABEL", "RECORD_PREFIX", "SERVICES", "Untranslatable", "record_name",
           "relabel", "translate", "with_node"]  # fmt: skip

HOST_LABEL = "Hostname"  # dcgm-exporter 3.x-4.8 (4.x after PR #655: hostname)
RECORD_PREFIX = "gpuwarden_dcgm:"
LABELS = {"node": HOST_LABEL, "uuid": "UUID"}
BY_NAME: dict[str, MetricDef] = {m.name: m for m in c.all_metrics()}
DCGM = t.Dialect(
    exporter="dcgm-exporter",
    short="dcgm",
    record_prefix=RECORD_PREFIX,
    host_label=HOST_LABEL,
    labels=LABELS,
    # MIG series share the GPU's field names by design: not read through them
    fields={m.name: m.dcgm for m in c.all_metrics() if m.dcgm and "_mig_" not in m.name},
    alert_labels=(("node", HOST_LABEL),),
)
SHARED = DCGM.shared()  # dcgm fields several native metrics add into (NVLink TX + RX)


def translate(expr: str, produced: frozenset[str] | set[str] | None = None) -> str:
    """``expr`` over dcgm-exporter's series (:func:`dashboards.translate.translate`)."""
    return t.translate(expr, DCGM, produced)


def relabel(text: str) -> str:
    """``node``/``uuid`` as label names (grouping, matchers, legends) -> dcgm's names."""
    return t.relabel(text, DCGM)


def record_name(name: str) -> str:
    return t.record_name(name, DCGM)


def with_node(expr: str) -> str:
    """An alert's expression with a ``node`` label copied from the host label, so the alert
    carries ``node`` as every gpuwarden alert does (remediation keys on it)."""
    return t.with_node(expr, DCGM)
