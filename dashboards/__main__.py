"""`python -m dashboards` / `gpuwarden dashboards`: render every dashboard to dashboards/json/.

python -m dashboards            # write dashboards/json/<uid>.json
python -m dashboards --check    # exit 1 if a committed file differs (what CI runs)
python -m dashboards --out DIR  # write somewhere else (e.g. a Grafana provisioning dir)

Also writes the dcgm-exporter variants to dashboards/json/dcgm/ and the AMD DME variants to
dashboards/json/amd/ (dashboards/dcgm_variant.py), over the recording rules of alerts/dcgm/ and
alerts/amd/.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from dashboards import catalogue
from dashboards.dcgm_variant import AMD_VARIANT, DCGM_VARIANT, Flavour, variant
from dashboards.render import to_json, to_text

JSON_DIR = Path(__file__).resolve().parent / "json"
DCGM_RULES = Path(__file__).resolve().parent.parent / "alerts" / "dcgm"
AMD_RULES = Path(__file__).resolve().parent.parent / "alerts" / "amd"


def dcgm_records(rules: Path = DCGM_RULES, prefix: str = "gpuwarden_dcgm:") -> set[str]:
    """The record names a rule variant records, as the native ``gpuwarden:...`` (the
    variant's own records, which no native one stands for, under their own names)."""
    names = re.findall(rf"^\s*- record: {prefix}(\S+)$", "\n".join(
        p.read_text() for p in sorted(rules.glob("*.rules.yml"))), re.M)  # fmt: skip
    return {f"gpuwarden:{n}" for n in names}


def _rendered_variant(flavour: Flavour, rules: Path) -> dict[str, str]:
    produced = dcgm_records(rules, flavour.dialect.record_prefix)
    out = {}
    for module in catalogue.MODULES:
        data = variant(to_json(module.build()), produced, flavour)
        out[f"{data['uid']}.json"] = to_text(data)
    return out


def rendered_dcgm() -> dict[str, str]:
    """File name -> JSON text of every dashboard's dcgm-exporter variant."""
    return _rendered_variant(DCGM_VARIANT, DCGM_RULES)


def rendered_amd() -> dict[str, str]:
    """File name -> JSON text of every dashboard's AMD DME variant."""
    return _rendered_variant(AMD_VARIANT, AMD_RULES)


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
    sets = ((ns.out, rendered()), (ns.out / "dcgm", rendered_dcgm()),
            (ns.out / "amd", rendered_amd()))  # fmt: skip
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
