"""Render the metric catalogue as Markdown (docs/metrics.md), so the docs cannot drift.

`python -m gpuwarden.metricsdoc` rewrites docs/metrics.md; a test fails when it is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

from exporter import catalog

DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
_P = catalog.PREFIX
SECTIONS = (  # title, name prefixes after catalog.PREFIX
    ("GPU (NVML)", (_P + "gpu_",)),
    ("NVLink", (_P + "nvlink_", _P + "fabric_")),
    ("InfiniBand (sysfs)", (_P + "infiniband_",)),
    ("Checkpoint storage", (_P + "storage_", _P + "nfs_client_", _P + "lustre_client_")),
    ("Training jobs (published by the job)", (_P + "job_",)),
    ("Exporter self-metrics", (_P + "exporter_",)),
    ("Analyzer", (_P + "finding", _P + "analyzer_")),
    ("Remediation", (_P + "remediation_",)),
    ("Failure accounting (remediation)", (_P + "accounting_",)),
)


def _row(m: catalog.MetricDef) -> str:
    dcgm = ", ".join(f"`{f.name}`" for f in m.dcgm) or "-"
    labels = ", ".join(f"`{label}`" for label in m.labels) or "-"
    return f"| `{m.name}` | {m.type} | {m.unit or '-'} | {labels} | {dcgm} | {m.help} |"


def render() -> str:
    out = [
        "# Metric catalogue",
        "",
        "Generated from `exporter/catalog.py` by `python -m gpuwarden.metricsdoc`; do not edit.",
        "The dcgm column names the dcgm-exporter field rendered in `--compat dcgm` mode.",
        "",
    ]
    metrics = list(catalog.all_metrics())
    for title, prefixes in SECTIONS:
        rows = [_row(m) for m in metrics if m.name.startswith(prefixes)]
        out += [
            f"## {title}",
            "",
            "| name | type | unit | labels | dcgm | help |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
        ]
    compat = [m for m in metrics if m.name.startswith("DCGM_")]
    out += ["## Compatibility only", "", *(f"- `{m.name}`: {m.help}" for m in compat), ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    DOC.write_text(render())
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
