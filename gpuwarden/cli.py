"""`gpuwarden <command>`: one entry point that dispatches to each part's own CLI."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence

# command -> (module, function, one-line help). Each function takes argv (list[str]) and
# returns an exit code.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "exporter": ("exporter.cli", "main", "run the per-node exporter (= gpuwarden-exporter)"),
    "simulate": ("simulator.cli", "main", "serve a simulated GPU fleet with fault injection"),
    "analyzer": ("analyzer.cli", "main", "run the analyzer (= gpuwarden-analyzer)"),
    "inventory": (
        "analyzer.inventory_cli",
        "main",
        "what the fleet is made of (models, limits, fabric)",
    ),
    "evaluate": ("gpuwarden.lab.evaluate", "main", "score the analyzer on the simulator, offline"),
    "evaluate-roce": ("gpuwarden.lab.roce_eval", "main", "score the analyzer on a RoCE fleet"),
    "evaluate-partitions": (
        "gpuwarden.lab.partition_eval",
        "main",
        "score the analyzer on partitioned GPUs (MIG, CPX/DPX)",
    ),
    "remediation": (
        "gpuwarden.remediation_service",
        "main",
        "run the remediation webhook (= gpuwarden-remediation)",
    ),
    "quarantine": ("remediation.quarantine_cli", "main", "list/show/release/pause/resume/history"),
    "maintenance": (
        "remediation.maintenance.cli",
        "main",
        "rolling maintenance in waves: plan/start/status/pause/resume/abort",
    ),
    "report": (
        "accounting.cli",
        "main",
        "what failures cost: MTBF, lemons, GPU-hours lost, ETTR",
    ),
    "placement": (
        "remediation.placement.backtest",
        "main",
        "backtest: which nodes the placement tiers would have de-preferred",
    ),
    "dashboards": ("dashboards.__main__", "main", "render the Grafana dashboards to JSON"),
    "demo": ("gpuwarden.demo", "main", "run the whole stack on a simulated fleet"),
}


def _usage() -> str:
    rows = "\n".join(f"  {name:<12} {help_}" for name, (_, _, help_) in COMMANDS.items())
    return f"usage: gpuwarden <command> [options]\n\ncommands:\n{rows}\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(_usage())
        return 0
    if args[0] in ("--version", "version"):
        from exporter import __version__

        print(f"gpuwarden {__version__}")
        return 0
    entry = COMMANDS.get(args[0])
    if entry is None:
        sys.stderr.write(f"gpuwarden: unknown command {args[0]!r}\n{_usage()}")
        return 2
    module, func, _ = entry
    fn: Callable[[list[str]], int] = getattr(importlib.import_module(module), func)
    return int(fn(args[1:]) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
