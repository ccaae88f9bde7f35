"""`python -m dashboards` / `gpuwarden dashboards`: render every dashboard to dashboards/json/.

python -m dashboards            # write dashboards/json/<uid>.json
python -m dashboards --check    # exit 1 if a committed file differs (what CI runs)
python -m dashboards --out DIR  # write somewhere else (e.g. a Grafana provisioning dir)

Also writes the dcgm-exporter variants to dashboards/json/dcgm/ (dashboards/dcgm_variant.py),
over the recording rules of alerts/dcgm/.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from dashboards import catalogue
from dashboards.dcgm_variant import variant
from dashboards.render import to_json, to_text

JSON_DIR = Path(__file__).resolve().parent / "json"
DCGM_RULES = Path(__file__).resolve().parent.parent / "alerts" / "dcgm"


def dcgm_records(rules: Path = DCGM_RULES) -> set[str]:
    """The native record names the dcgm rule variant records (as ``gpuwarden:...``)."""
    names = re.findall(r"^\s*- record: gpuwarden_dcgm:(\S+)$", "\n".join(
        p.read_text() for p in sorted(rules.glob("*.rules.yml"))), re.M)  # fmt: skip
    return {f"gpuwarden:{n}" for n in names}


def rendered_dcgm() -> dict[str, str]:
    """File name -> JSON text of every dashboard's dcgm-exporter variant."""
    produced = dcgm_records()
    out = {}
    for module in catalogue.MODULES:
        data = variant(to_json(module.build()), produced)
        out[f"{data['uid']}.json"] = to_text(data)
    return out


def rendered() -> dict[str, str]:
    """File name -> JSON text, for every dashboard."""
    out = {}
    for module in catalogue.MODULES:
        data = to_json(module.build())
        out[f"{data['uid']}.json"] = to_text(data)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpuwarden dashboards", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=JSON_DIR, help="directory (default: %(default)s)")
    p.add_argument("--check", action="store_true", help="fail if the files on disk differ")
    ns = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    sets = ((ns.out, rendered()), (ns.out / "dcgm", rendered_dcgm()))
    if ns.check:
        bad = 0
        for out, files in sets:
            stale = [f for f, text in files.items() if _read(out / f) != text]
            extra = sorted({f.name for f in out.glob("*.json")} - set(files))
            for f in stale + extra:
                print(f"{out / f} is stale: run python -m dashboards", file=sys.stderr)
            bad += len(stale) + len(extra)
        return 1 if bad else 0
    for out, files in sets:
        out.mkdir(parents=True, exist_ok=True)
        for f, text in files.items():
            (out / f).write_text(text)
        print(f"wrote {len(files)} dashboards to {out}")
    return 0


def _read(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


if __name__ == "__main__":
    raise SystemExit(main())
