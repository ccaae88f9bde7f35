"""PromQL over gpuwarden's series, rewritten for a fleet that runs AMD's Device Metrics Exporter.

The DME dialect of the shared translator (:mod:`dashboards.translate`), built from
:mod:`exporter.catalog_amd` (the same table the analyzer's AMD reader reads with): each
catalogue metric DME has a field for, its unit (activity % -> ratio, MHz -> Hz, KB -> bytes),
the native labels a field pins (DME has one field per RAS block and error type, one per ECC
total), and DME's labels: ``hostname`` for ``node``, ``gpu_id`` for ``gpu``, ``gpu_uuid`` for
``uuid``, ``link_index`` for ``link``. Names are DME's unprefixed ones (``MetricsFieldPrefix``
empty); recording rules of the variant are named ``gpuwarden_amd:...``.

Two catalogue series have no DME field and are stood in for: ``gpu_up`` by ``gpu_health``
(1 healthy, 0 unhealthy: a failing GPU, as NVML's gpu_up 0 with a reason; a GPU that falls off
the bus is not reported 0, its series vanish), and ``gpu_clock_throttle_active`` by the
variant's recording :data:`THROTTLE_RECORD` (violation residency per throttle reason, as a
share of time, alerts/amd_rules.py records it). Pure data and string functions; no I/O.
"""

from __future__ import annotations

from dashboards import translate as t
from dashboards.translate import Field, VendorField
from exporter import catalog as c
from exporter import catalog_amd as dme

RECORD_PREFIX = "gpuwarden_amd:"
HOST_LABEL = dme.HOSTNAME
LABELS = {"node": dme.HOSTNAME, "gpu": dme.GPU_ID, "uuid": dme.GPU_UUID, "link": dme.LINK_INDEX}
HEALTH = "gpu_health"  # DME's GPU_HEALTH: 1 healthy, 0 unhealthy (30 s poll)
THROTTLE_RECORD = RECORD_PREFIX + "gpu_clock_throttle_active:ratio"
_ERROR_TYPES = ("correctable", "uncorrectable", "deferred")


def _fields() -> dict[str, tuple[Field, ...]]:
    out: dict[str, tuple[Field, ...]] = {}
    for metric, fields in dme.GAUGES.items():
        out[metric] = tuple(VendorField(f.name, f.divide, select=f.match) for f in fields)
    out[c.GPU_ECC_ERRORS.name] = tuple(
        VendorField(name, match=(("error_type", kind), ("counter_type", "volatile")))
        for kind, name in dme.ECC_TOTALS.items()
    )
    out[c.GPU_RAS_ERRORS.name] = tuple(
        VendorField(dme.ras_field(block, kind), match=(("block", block), ("error_type", kind)))
        for block in c.RAS_BLOCKS for kind in _ERROR_TYPES
    )  # fmt: skip
    for metric, name in dme.XGMI.items():
        out[metric] = (VendorField(name, 1.0 / dme.XGMI_KB),)
    out[c.GPU_UP.name] = (VendorField(HEALTH),)
    out[c.GPU_THROTTLE.name] = (VendorField(THROTTLE_RECORD),)
    return out


DME = t.Dialect(
    exporter="DME",
    short="DME",
    record_prefix=RECORD_PREFIX,
    host_label=HOST_LABEL,
    labels=LABELS,
    fields=_fields(),
    alert_labels=(("node", dme.HOSTNAME), ("gpu", dme.GPU_ID)),
)


def translate(expr: str, produced: frozenset[str] | set[str] | None = None) -> str:
    """``expr`` over DME's series (:func:`dashboards.translate.translate`)."""
    return t.translate(expr, DME, produced)


def relabel(text: str) -> str:
    return t.relabel(text, DME)


def record_name(name: str) -> str:
    return t.record_name(name, DME)


def with_node(expr: str) -> str:
    return t.with_node(expr, DME)
