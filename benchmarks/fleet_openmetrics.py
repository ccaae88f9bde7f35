"""OpenMetrics history of a simulated fleet, for ``promtool tsdb create-blocks-from openmetrics``.

Steps :class:`simulator.fleet.Fleet` through virtual time and writes, per catalogue family
the analyzer reads, every series with the exporter's label set (``node``, ``gpu``, ``uuid``,
``link``, ``device``/``port``, ``counter``, ...) and one sample per step. XID counters come
from the fleet's kernel-log events (a series is born at its first XID), allocation info from
the fleet's jobs (as the Slurm prolog map would). Families the analyzer never reads are left
out to keep the backfill small; the series it reads are all there, at full fleet size.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import IO

import numpy as np

from analyzer.sources.queries import QUERIES
from exporter import catalog as c
from simulator.fleet import Fleet
from simulator.state import IB_COUNTERS, IB_HW_COUNTERS
from simulator.topology import gpu_uuid

FAMILY_AXES = {
    c.GPU_THROTTLE.name: ("reason", tuple(c.THROTTLE_REASONS)),
    c.GPU_ECC_ERRORS.name: None,  # two axes, handled below
    c.NVLINK_ERRORS.name: ("error_type", tuple(c.NVLINK_ERROR_TYPES)),
}


def _labels(d: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in d.items()) + "}"


def _series_of(name: str, nodes: tuple[str, ...], shape: tuple[int, ...]) -> list[str]:
    """Label strings for every cell of a frame array of ``shape`` (nodes, ...), row-major."""
    m = c.by_name(name)
    out = []
    for idx in np.ndindex(*shape):
        n = nodes[idx[0]]
        d: dict[str, str] = {"node": n}
        if "device" in m.labels:
            d |= {"device": f"mlx5_{idx[1]}", "port": "1"}
        else:
            d |= {"gpu": str(idx[1]), "uuid": gpu_uuid(n, idx[1])}
            rest = list(idx[2:])
            if "link" in m.labels:
                d["link"] = str(rest.pop(0))
            if name == c.GPU_UP.name:
                d["reason"] = ""
            if name == c.GPU_ECC_ERRORS.name:
                d["error_type"] = ("corrected", "uncorrected")[rest.pop(0)]
                d["counter_type"] = ("volatile", "aggregate")[rest.pop(0)]
            elif name in FAMILY_AXES:
                label, values = FAMILY_AXES[name]  # type: ignore[misc]
                d[label] = values[rest.pop(0)]
        out.append(name + _labels(d))
    return out


def write(
    path: Path, nodes: int, t0: float, steps: int, step: float = 15.0, seed: int = 0
) -> dict[str, int]:
    """History of ``steps`` samples ending at ``t0 + step * (steps - 1)``; returns counts."""
    fleet = Fleet(nodes, seed=seed, start=t0 - step)
    late = t0 + step * (steps - 12)  # a few faults that start inside the analysed span
    fleet.schedule([
        {"kind": "nvlink_errors", "node": fleet.nodes[1], "target": "gpu2/5", "onset": late},
        {"kind": "xid", "node": fleet.nodes[2], "target": "gpu3", "onset": late},
        {"kind": "ib_symbol_errors", "node": fleet.nodes[3], "target": "mlx5_1/1", "onset": late},
        {"kind": "straggler", "node": fleet.nodes[4], "target": "gpu5", "onset": late},
    ])  # fmt: skip
    names = tuple(fleet.nodes)
    wanted = [q.name for q in QUERIES if q.metric not in (c.GPU_XID_ERRORS, c.GPU_ALLOCATION_INFO,
              c.IB_COUNTER, c.IB_HW_COUNTER)]  # fmt: skip
    hist: dict[str, list[np.ndarray]] = defaultdict(list)
    xid: dict[tuple[int, int, int], list[tuple[int, int]]] = defaultdict(list)
    alloc: list[dict[int, list[int]]] = []
    times = []
    for i, frame in enumerate(fleet.run(t0 + step * (steps - 1), step)):
        times.append(frame.t)
        for name in wanted:
            hist[name].append(frame.metrics[name].reshape(-1))
        for counter in IB_COUNTERS + IB_HW_COUNTERS:
            hist["ib:" + counter].append(frame.ib_counters[counter].reshape(-1))
        for n, g, x in frame.xids:
            xid[(n, g, x)].append((i, 1))
        alloc.append(fleet.jobs_at(frame.t))
    ts = [f" {t:.3f}\n" for t in times]
    counts = {"series": 0, "samples": 0}
    with path.open("w") as f:
        for name in wanted:
            shape = fleet.last.metrics[name].shape if fleet.last else ()
            _family(
                f, c.by_name(name), _series_of(name, names, shape), np.array(hist[name]), ts, counts
            )
        for fam, files in ((c.IB_COUNTER, IB_COUNTERS), (c.IB_HW_COUNTER, IB_HW_COUNTERS)):
            _type(f, fam)
            for counter in files:
                lab = [f'{fam.name}{{node="{n}",device="mlx5_{p}",port="1",counter="{counter}"}}'
                       for n in names for p in range(8)]  # fmt: skip
                _rows(f, lab, np.array(hist["ib:" + counter]), ts, counts)
        _type(f, c.GPU_XID_ERRORS)
        for (n, g, x), hits in sorted(xid.items()):
            row = np.full(len(times), np.nan)
            for i, k in hits:
                row[i:] = np.nan_to_num(row[i:], nan=0.0) + k
            lab = _labels(
                {"node": names[n], "gpu": str(g), "uuid": gpu_uuid(names[n], g), "xid": str(x)}
            )
            _rows(f, [c.GPU_XID_ERRORS.name + lab], row[:, None], ts, counts)
        _type(f, c.GPU_ALLOCATION_INFO)
        per_gpu: dict[tuple[str, int, str], np.ndarray] = {}
        for i, jobs in enumerate(alloc):
            for job, members in jobs.items():
                for n in members:
                    for g in range(8):
                        per_gpu.setdefault((names[n], g, str(job)), np.full(len(times), np.nan))[
                            i
                        ] = 1.0
        for (n, g, job), row in sorted(per_gpu.items()):
            lab = _labels(
                {
                    "node": n,
                    "gpu": str(g),
                    "uuid": gpu_uuid(n, g),
                    "job_id": job,
                    "scheduler": "slurm",
                }
            )
            _rows(f, [c.GPU_ALLOCATION_INFO.name + lab], row[:, None], ts, counts)
        f.write("# EOF\n")
    return counts


def _type(f: IO[str], m: c.MetricDef) -> None:
    base = m.name.removesuffix("_total") if m.type == "counter" else m.name
    f.write(f"# TYPE {base} {m.type}\n")


def _family(f: IO[str], m: c.MetricDef, labels: list[str], vals: np.ndarray, ts: list[str],
            counts: dict[str, int]) -> None:  # fmt: skip
    _type(f, m)
    _rows(f, labels, vals, ts, counts)


def _rows(
    f: IO[str], labels: list[str], vals: np.ndarray, ts: list[str], counts: dict[str, int]
) -> None:
    """``vals``: (T, series); NaN = no sample (a gap, as after a missed scrape)."""
    text = np.char.mod("%.10g", np.nan_to_num(vals, nan=0.0))
    ok = ~np.isnan(vals)
    for s, lab in enumerate(labels):
        col, good = text[:, s], ok[:, s]
        f.write("".join(f"{lab} {col[i]}{ts[i]}" for i in np.flatnonzero(good)))
        counts["samples"] += int(good.sum())
    counts["series"] += len(labels)
