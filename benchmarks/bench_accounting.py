"""Failure accounting: a simulated year of a 512-GPU fleet (about 1,000 incidents) reported.

`gpuwarden report --incidents F --exposure F` runs in its own process on the year's
interchange lines (simulator/reliability_year.py, failure rates scaled up to ~1,000
incidents), once for the text report with the HTML page (``--html PAGE``) and once for JSON
(``--format json``); each run's wall time and peak RSS are measured, against a baseline
process that only imports the same modules and parses the same JSON lines, and checked
against the targets (issue 27): <= 60 s and <= 2 GiB on 2 cores.
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
TARGET_S, TARGET_MIB = 60.0, 2048.0
BASELINE = (
    "import json, sys; import accounting.cli; "
    "[json.loads(l) for p in sys.argv[1:] for l in open(p)]"
)


def _measured(argv: list[str], out: Path | None = None) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of ``argv`` in a child process; stdout to ``out``."""
    wrapper = [
        sys.executable, "-c",
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "sink = open(sys.argv[1], 'wb') if sys.argv[1] else subprocess.DEVNULL; "
        "subprocess.run(sys.argv[2:], check=True, stdout=sink); "
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)",
        str(out or ""), *argv,
    ]  # fmt: skip
    got = subprocess.run(wrapper, capture_output=True, check=True, text=True).stdout.split()
    return float(got[0]), float(got[1]) / 1024.0


def _verdict(wall: float, rss: float) -> str:
    ok = wall <= TARGET_S and rss <= TARGET_MIB
    return "met" if ok else "MISSED"


def run(quick: bool = False) -> list[dict[str, Any]]:
    setup = ry.Setup(fleet=FLEET, rate_scale=RATE_SCALE / (4 if quick else 1), lemons=2)
    year = ry.simulate(2026, setup)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        inc, exp, page = tmp / "incidents.jsonl", tmp / "exposure.jsonl", tmp / "r.html"
        inc.write_text("".join(json.dumps(o) + "\n" for o in year.incidents))
        exp.write_text("".join(json.dumps(o) + "\n" for o in year.exposure))
        report = [sys.executable, "-m", "gpuwarden", "report", "--incidents", str(inc),
                  "--exposure", str(exp)]  # fmt: skip
        text_wall, text_rss = _measured([*report, "--html", str(page)], tmp / "report.txt")
        json_wall, json_rss = _measured([*report, "--format", "json"], tmp / "report.json")
        base_wall, base_rss = _measured([sys.executable, "-c", BASELINE, str(inc), str(exp)])
        page_kib = page.stat().st_size / 1024.0
        text_lines = len((tmp / "report.txt").read_text().splitlines())
        doc = json.loads((tmp / "report.json").read_text())
    if len(doc["incidents"]) != len(year.incidents) or not text_lines:
        raise RuntimeError("the report did not account for every incident")
    gpus = sum(n for _, n in FLEET) * ry.GPUS_PER_NODE
    wall, rss = max(text_wall, json_wall), max(text_rss, json_rss)
    return [
        {"name": "fleet", "value": gpus, "unit": "GPUs", "note": "64 nodes, H100 + A100, 1 year"},
        {"name": "incidents", "value": len(year.incidents), "unit": "", "note": ""},
        {"name": "exposure lines", "value": len(year.exposure), "unit": "", "note": ""},
        {"name": "text + html wall time", "value": text_wall, "unit": "s",
         "note": f"{text_lines} text lines; baseline (import + parse) {base_wall:.2f} s"},
        {"name": "text + html peak RSS", "value": text_rss, "unit": "MiB",
         "note": f"baseline {base_rss:.0f} MiB"},
        {"name": "json wall time", "value": json_wall, "unit": "s",
         "note": f"{len(doc['incidents'])} incidents in the JSON"},
        {"name": "json peak RSS", "value": json_rss, "unit": "MiB", "note": ""},
        {"name": "html page", "value": page_kib, "unit": "KiB", "note": "self-contained"},
        {"name": "target wall <= 60 s", "value": _verdict(wall, 0.0), "unit": "",
         "note": f"slowest run {wall:.2f} s"},
        {"name": "target RSS <= 2 GiB", "value": _verdict(0.0, rss), "unit": "",
         "note": f"largest run {rss:.0f} MiB"},
    ]  # fmt: skip
