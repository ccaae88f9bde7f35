"""`python -m dashboards` / `gpuwarden dashboards`: render every dashboard to dashboards/json/.

python -m dashboards            # write dashboards/json/<uid>.json
python -m dashboards --check    # exit 1 if a committed file differs (what CI runs)
python -m dashboards --out DIR  # write somewhere else (e.g. a Grafana provisioning dir)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from dashboards import catalogue
from dashboards.render import to_json, to_text

JSON_DIR = Path(__file__).resolve().parent / "json"


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
    files = rendered()
    if ns.check:
        stale = [f for f, text in files.items() if _read(ns.out / f) != text]
        extra = sorted({f.name for f in ns.out.glob("*.json")} - set(files))
        for f in stale + extra:
            print(f"{ns.out / f} is stale: run python -m dashboards", file=sys.stderr)
        return 1 if stale or extra else 0
    ns.out.mkdir(parents=True, exist_ok=True)
    for f, text in files.items():
        (ns.out / f).write_text(text)
    print(f"wrote {len(files)} dashboards to {ns.out}")
    return 0


def _read(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


if __name__ == "__main__":
    raise SystemExit(main())
