"""A mixed MI300X + H100 history: AMD nodes as DME serves them (names from DME's field enum,
fixtures/amd-dme), H100 nodes as gpuwarden's exporter serves them, backfilled into a real
Prometheus and read back through the analyzer's real Prometheus source with discovery on.

Nodes: ``mi300x-a`` and ``mi300x-b`` behind DME's example prefix ``amd_``, ``mi300x-c`` without
a prefix and labelling its clocks as DME 1.4.0 did (``clock_type="GPU_CLOCK_TYPE_SYSTEM"``), ``h100-a`` and ``h100-b`` native. Faults (step = 15 s, 61
points, the analyzer's window the last 41):

- mi300x-a GPU 1: a fatal HBM uncorrectable error at point 40: ``gpu_ecc_uncorrect_umc`` and
  the total rise, the AFID gauge shows AFID 20 (fatal);
- mi300x-a GPU 3: two deferred errors in umc at point 35;
- mi300x-a GPU 5: XGMI link 2 carries nothing from point 30 while its other links rise;
- mi300x-b GPU 2: socket thermal residency 80 % from point 20 (throttling, thermal);
- mi300x-b GPU 4: PPT residency 70 % from point 10 (the power cap: no finding);
- mi300x-b GPU 6: two RAS events between two scrapes (a watchdog timeout, AFID 27, then a
  non-fatal HBM error, AFID 22): the gauge shows only the second;
- mi300x-c GPU 7: its series vanish at point 50 while its siblings report (lost);
- h100-b GPU 3: XID 79 at point 45 (the NVIDIA fault beside the AMD ones).

MI300X boards draw ~720 W at 2100 MHz, H100 ~520 W at 1980 MHz: compared with the fleet
instead of their own model, one half would look slow or hungry.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from exporter import catalog as c
from exporter import catalog_amd as dme
from gpuwarden.lab.via_prometheus import backfill, prometheus
from tests.realcomp import require_binary

STEP = 15.0
POINTS = 61
GPUS = 8
AMD_NODES = {"mi300x-a": "amd_", "mi300x-b": "amd_", "mi300x-c": ""}
NATIVE_NODES = ("h100-a", "h100-b")
MODEL = "AMD Instinct MI300X OAM"


def epoch() -> float:
    return (time.time() // 7200 - 2) * 7200


def _lab(**kw: object) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(kw.items())) + "}"


class _Om:
    """OpenMetrics families, each written contiguously (promtool's backfill wants that)."""

    def __init__(self) -> None:
        self.families: dict[str, tuple[str, list[str]]] = {}

    def add(self, name: str, kind: str, labels: str, t: float, v: float) -> None:
        family = name.removesuffix("_total") if kind == "counter" else name
        self.families.setdefault(family, (kind, []))[1].append(f"{name}{labels} {v:g} {t:.3f}")

    def text(self) -> str:
        out = []
        for family, (kind, lines) in self.families.items():
            out.append(f"# TYPE {family} {kind}")
            out += lines
        return "\n".join(out) + "\n# EOF\n"


def _dme_gpu(om: _Om, node: str, prefix: str, g: int, i: int, t: float) -> None:
    def put(field: str, v: float, **extra: object) -> None:
        ident = dict(hostname=node, serial_number=f"SN-{node}-{g}", gpu_id=g,
                     gpu_uuid=f"{g}6ff74a1-0000-1000-80c5-{node[-1]}{g:011d}",
                     card_model=MODEL, gpu_partition_id=0, gpu_compute_partition_type="spx",
                     gpu_memory_partition_type="nps1", deployment_mode="baremetal")  # fmt: skip
        om.add(prefix + field, "gauge", _lab(**ident, **extra), t, v)

    if (node, g) == ("mi300x-c", 7) and i >= 50:
        return  # the lost GPU: every series gone
    put("gpu_junction_temperature", 62.0)
    put("gpu_memory_temperature", 51.0)
    put("gpu_package_power", 720.0)
    put("gpu_power_usage", 720.0)
    put("gpu_health", 0.0 if (node, g) == ("mi300x-a", 1) and i >= 40 else 1.0)
    put("gpu_gfx_activity", 95.0)
    old = node == "mi300x-c"  # DME 1.4.0 put the proto's enum name in clock_type
    put("gpu_clock", 2100.0, clock_index=0, clock_type="GPU_CLOCK_TYPE_SYSTEM" if old else "system")
    put("gpu_clock", 1300.0, clock_index=1, clock_type="GPU_CLOCK_TYPE_MEMORY" if old else "memory")
    put("pcie_speed", 32.0)
    put("pcie_max_speed", 32.0)
    ue = 1.0 if (node, g) == ("mi300x-a", 1) and i >= 40 else 0.0
    ue += 2.0 if (node, g) == ("mi300x-b", 6) and i >= 33 else 0.0
    deferred = 2.0 if (node, g) == ("mi300x-a", 3) and i >= 35 else 0.0
    put(dme.ECC_TOTALS["corrected"], 4.0)
    put(dme.ECC_TOTALS["uncorrected"], ue)
    put(dme.DEFERRED_TOTAL, deferred)
    for block in c.RAS_BLOCKS:
        put(dme.ras_field(block, "uncorrectable"), ue if block == "umc" else 0.0)
        put(dme.ras_field(block, "deferred"), deferred if block == "umc" else 0.0)
    for k in range(GPUS):
        flat = (node, g, k) == ("mi300x-a", 5, 2) and i >= 30
        kb = 0.0 if k == g else 1e9 + 4e6 * (30 if flat else i) * (1 + k / 10)
        put(dme.XGMI[c.GPU_XGMI_TRANSMIT.name], kb, link_index=k)
        put(dme.XGMI[c.GPU_XGMI_RECEIVE.name], kb * 0.9, link_index=k)
    for cause in dme.VIOLATIONS:
        acc, pct = dme.violation_fields(cause)
        share = 0.0
        if cause == "socket_thermal" and (node, g) == ("mi300x-b", 2) and i >= 20:
            share = 80.0
        if cause == "ppt" and (node, g) == ("mi300x-b", 4) and i >= 10:
            share = 70.0
        put(pct, share)
        put(acc, 1000.0 + share * i)
    if (node, g) == ("mi300x-a", 1) and i >= 40:
        put(dme.AFID_ERRORS, 20.0, afid_index=0, severity="fatal")
    if (node, g) == ("mi300x-b", 6) and i >= 33:
        # a watchdog timeout (27) and then an HBM error (22) between two scrapes: the gauge
        # holds the last event's list only
        put(dme.AFID_ERRORS, 22.0, afid_index=0, severity="non_fatal_uncorrected")


def _native_gpu(om: _Om, node: str, g: int, i: int, t: float) -> None:
    ident = dict(node=node, gpu=g, uuid=f"GPU-{node}-{g}")
    om.add(c.GPU_UP.name, "gauge", _lab(**ident, reason=""), t, 1.0)
    om.add(c.GPU_INFO.name, "gauge", _lab(**ident, name="NVIDIA H100 80GB HBM3",
                                          pci_bus_id=f"00000000:{g:02X}:00.0", serial=g,
                                          vbios_version="96.00.74",
                                          driver_version="550.54.15"), t, 1.0)  # fmt: skip
    om.add(c.GPU_UTILIZATION.name, "gauge", _lab(**ident), t, 0.95)
    om.add(c.GPU_SM_CLOCK.name, "gauge", _lab(**ident), t, 1.98e9)
    om.add(c.GPU_POWER.name, "gauge", _lab(**ident), t, 520.0)
    om.add(c.GPU_POWER_LIMIT.name, "gauge", _lab(**ident), t, 700.0)
    om.add(c.GPU_TEMPERATURE.name, "gauge", _lab(**ident), t, 60.0)
    if (node, g) == ("h100-b", 3) and i >= 45:
        om.add(c.GPU_XID_ERRORS.name, "counter", _lab(**ident, xid=79), t, 1.0)


def history(t0: float) -> str:
    om = _Om()
    for i in range(POINTS):
        t = t0 + i * STEP
        for node, prefix in AMD_NODES.items():
            for g in range(GPUS):
                _dme_gpu(om, node, prefix, g, i, t)
        for node in NATIVE_NODES:
            for g in range(GPUS):
                _native_gpu(om, node, g, i, t)
    return om.text()


@contextmanager
def served(tmp: Path, write: Callable[[float], str] = history) -> Iterator[tuple[str, float]]:
    """A real Prometheus serving the history; yields (URL, Unix time of the last point)."""
    require_binary("promtool")
    require_binary("prometheus")
    t0 = epoch()
    om = tmp / "mixed.om"
    om.write_text(write(t0))
    backfill(om, tmp / "tsdb")
    with prometheus(tmp / "tsdb", STEP, tmp) as url:
        yield url, t0 + (POINTS - 1) * STEP
