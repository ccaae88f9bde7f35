"""Failure accounting: a simulated year of a 512-GPU fleet (about 1,000 incidents) reported.

`gpuwarden report --incidents F --exposure F --format json --html PAGE` runs in its own
process on the year's interchange lines (simulator/reliability_year.py, failure rates scaled
up to ~1,000 incidents); its wall time and peak RSS are measured, against a baseline process
that only imports the same modules and parses the same JSON lines. Targets: <= 60 s and
<= 2 GiB on 2 cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from simulator import reliability_year as ry

FLEET = (("H100", 32), ("A100", 32))  # 64 nodes x 8 GPUs
RATE_SCALE = 8.0  # the published rates give ~125 incidents a year on 512 GPUs
BASELINE = (
    "import json, sys; import remediation.accounting.cli; "
    "[json.loads(l) for p in sys.argv[1:] for l in open(p)]"
)


def _measured(argv: list[str]) -> tuple[float, float]:
    wrapper = [
        sys.executable, "-c",
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)",
        *argv,
    ]  # fmt: skip
    out = subprocess.run(wrapper, capture_output=True, check=True, text=True).stdout.split()
    return float(out[0]), float(out[1]) / 1024.0


def run(quick: bool = False) -> list[dict[str, Any]]:
    setup = ry.Setup(fleet=FLEET, rate_scale=RATE_SCALE / (4 if quick else 1), lemons=2)
    year = ry.simulate(2026, setup)
    with tempfile.TemporaryDirectory() as d:
        inc, exp, page = Path(d) / "incidents.jsonl", Path(d) / "exposure.jsonl", Path(d) / "r.html"
        inc.write_text("".join(json.dumps(o) + "\n" for o in year.incidents))
        exp.write_text("".join(json.dumps(o) + "\n" for o in year.exposure))
        report = [sys.executable, "-m", "gpuwarden", "report", "--incidents", str(inc),
                  "--exposure", str(exp), "--format", "json", "--html", str(page)]  # fmt: skip
        wall, rss = _measured(report)
        base_wall, base_rss = _measured([sys.executable, "-c", BASELINE, str(inc), str(exp)])
        page_kib = page.stat().st_size / 1024.0
    gpus = sum(n for _, n in FLEET) * ry.GPUS_PER_NODE
    return [
        {"name": "fleet", "value": gpus, "unit": "GPUs", "note": "64 nodes, H100 + A100, 1 year"},
        {"name": "incidents", "value": len(year.incidents), "unit": "", "note": ""},
        {"name": "exposure lines", "value": len(year.exposure), "unit": "", "note": ""},
        {"name": "report wall time", "value": wall, "unit": "s",
         "note": f"text+json+html; target <= 60 s; baseline (import + parse) {base_wall:.2f} s"},
        {"name": "report peak RSS", "value": rss, "unit": "MiB",
         "note": f"target <= 2048 MiB; baseline {base_rss:.0f} MiB"},
        {"name": "html page", "value": page_kib, "unit": "KiB", "note": "self-contained"},
    ]  # fmt: skip
