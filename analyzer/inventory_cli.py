"""``gpuwarden inventory``: what the fleet is made of, as the analyzer sees it.

Reads one window through the analyzer's own read path (``--prometheus URL`` or the embedded
scrape of ``--targets FILE_SD``), folds in ``--inventory FILE``, and prints per node the GPU
model, its power limit (current, and the model's default from the catalogue's spec table),
max SM clock and NVLinks per GPU (spec), IB ports and their rate, fabric, rack and leaf:
a table, or ``--json``. Exit 2 with one line on bad settings, 1 when the read fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from analyzer.detectors.series import last_valid
from analyzer.inventory import Inventory, load_inventory
from analyzer.settings import AnalyzerSettings
from analyzer.sources import SourceError
from analyzer.window import Window
from common.settings import SettingsError, load
from exporter import catalog, catalog_specs

COLUMNS = ("node", "model", "gpus", "power_limit_w", "default_limit_w", "sm_clock_max_mhz",
           "nvlinks", "ib_ports", "ib_rate_gbps", "hca", "rack", "leaf", "nvlink_domain")  # fmt: skip


def rows(w: Window) -> list[dict[str, Any]]:
    """One row per node of ``w`` (after the inventory was applied)."""
    lim = w.get(catalog.GPU_POWER_LIMIT)
    up = w.get(catalog.GPU_UP)
    rate = w.get(catalog.IB_PORT_RATE)
    lim_last = last_valid(lim) if lim is not None and lim.ndim == 3 else None
    up_last = last_valid(up) if up is not None and up.ndim == 3 else None
    rate_last = last_valid(rate) if rate is not None and rate.ndim == 3 else None
    per_port: dict[int, set[str]] = {}
    for (n, _), lf in w.port_leaf.items():  # rail-optimized: the leaves its ports reach
        per_port.setdefault(n, set()).add(lf)
    out = []
    for n, node in enumerate(w.nodes):
        model = w.sku_of(n)
        spec = catalog_specs.spec(model) if model else None
        ports = rate_last[n][np.isfinite(rate_last[n])] if rate_last is not None else np.zeros(0)
        out.append({
            "node": node,
            "model": model or "?",
            "gpus": int(np.isfinite(up_last[n]).sum()) if up_last is not None else 0,
            "power_limit_w": _median(lim_last[n]) if lim_last is not None else None,
            "default_limit_w": spec.power_limit_w if spec else None,
            "sm_clock_max_mhz": spec.sm_clock_max_hz / 1e6 if spec else None,
            "nvlinks": spec.nvlinks if spec else None,
            "ib_ports": int(ports.size),
            "ib_rate_gbps": float(np.median(ports)) * 8 / 1e9 if ports.size else None,
            "hca": (w.hca[n] if n < len(w.hca) else "") or (spec.hca if spec else "") or "",
            "rack": w.rack_of.get(n, ""),
            "leaf": ",".join(sorted(per_port[n])) if n in per_port else w.leaf_of.get(n, ""),
            "nvlink_domain": w.nvlink_domain_of.get(n, ""),
        })  # fmt: skip
    return out


def _median(a: np.ndarray) -> float | None:
    a = a[np.isfinite(a)]
    return float(np.median(a)) if a.size else None


def render(table: list[dict[str, Any]]) -> str:
    def cell(v: Any) -> str:
        if v is None:
            return "-"
        return f"{v:g}" if isinstance(v, float) else str(v)

    cells = [list(COLUMNS)] + [[cell(r[c]) for c in COLUMNS] for r in table]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(v.ljust(wd) for v, wd in zip(row, widths, strict=True)).rstrip()
                     for row in cells)  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpuwarden inventory", description=__doc__)
    p.add_argument("--prometheus", help="Prometheus-compatible API URL")
    p.add_argument("--targets", help="file_sd targets to scrape when no Prometheus is given")
    p.add_argument("--inventory", help="YAML inventory file (model, hca, rack, leaf, caps)")
    p.add_argument("--config", help="the analyzer's YAML settings file")
    p.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from analyzer.cli import build_source

    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    flags = {k: getattr(args, k) for k in ("prometheus", "targets", "inventory")}
    try:
        settings = load(AnalyzerSettings, flags, config_file=args.config)
        inv = load_inventory(settings.inventory) if settings.inventory else Inventory()
        source = build_source(settings)
    except (SettingsError, SourceError, ValueError) as e:
        print(f"gpuwarden inventory: {e}", file=sys.stderr)
        return 2

    async def read() -> Window:
        try:
            return await source.read(time.time())
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                await close()

    try:
        w = inv.apply(asyncio.run(read()))
    except SourceError as e:
        print(f"gpuwarden inventory: {e}", file=sys.stderr)
        return 1
    table = rows(w)
    print(json.dumps(table, indent=1) if args.json else render(table))
    return 0
