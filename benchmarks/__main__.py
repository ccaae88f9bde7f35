"""Run every benchmark module and print one table per module (plus JSON with --json)."""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

# a name that stands for several modules: issue 33's item 3, (a) the feature groups on
# sharded Prometheus, (b) the fleet pass over replicas, (c) the events path at 500 events/s
# (``--only bench_scale`` runs the replicas' module alone)
GROUPS = {"scale": ("bench_distributed", "bench_scale", "bench_eventpath")}


def _modules(only: list[str]) -> list[str]:
    here = Path(__file__).parent
    names = sorted(m.name for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("bench_"))
    wanted = [o.replace("-", "_") for o in only]  # --only analyzer-prometheus
    grouped = {n for o in wanted for n in GROUPS.get(o, ())}
    return [n for n in names
            if not wanted or n in grouped or any(o in n for o in wanted if o not in GROUPS)]  # fmt: skip


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _table(rows: list[dict[str, Any]]) -> str:
    cols = ["name", "value", "unit", "note"]
    cells = [[_fmt(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    line = "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    p.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    p.add_argument("--only", nargs="*", default=[], help="run modules whose name contains this")
    p.add_argument("--json", help="also write all rows to this file")
    ns = p.parse_args(argv)
    results: dict[str, list[dict[str, Any]]] = {}
    failed = False
    for name in _modules(ns.only):
        print(f"\n== {name} ==", flush=True)
        t0 = time.perf_counter()
        try:
            rows = importlib.import_module(f"benchmarks.{name}").run(quick=ns.quick)
        except Exception:
            traceback.print_exc()
            failed = True
            continue
        results[name] = rows
        print(_table(rows))
        print(f"({time.perf_counter() - t0:.1f} s)", flush=True)
    if ns.json:
        Path(ns.json).write_text(json.dumps(results, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
