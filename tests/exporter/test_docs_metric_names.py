"""Every metric name the README and docs/ mention exists in the catalogue (a renamed or
misspelled metric in prose sends an operator to a query that returns nothing)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter import catalog, catalog_dcgm

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
TOKEN = re.compile(
    r"(?<![\w:])(?:gpuwarden_(?:gpu|nvlink|infiniband|exporter|finding|analyzer|remediation|accounting)\w*"
    r"|DCGM_FI_\w+)"
)
# dcgm-exporter's later naming generations are names an operator's Prometheus holds too
_LATER = {r.name for gen in catalog_dcgm.RENAMES.values() for r in gen.values()}
KNOWN = (
    catalog.names()
    | catalog.dcgm_names()
    | catalog.dcgm_read_names()
    | _LATER
    | {*catalog_dcgm.DRIVER_LABEL.values()}
    | {n for gen in catalog_dcgm.OMITTED.values() for n in gen.values()}
)


def _mentions(path: Path) -> list[str]:
    # a name cut short by a glob or a brace ("gpuwarden_gpu_*", "DCGM_FI_DEV_{...}") is a
    # pattern, not a name
    return [
        m[0]
        for m in TOKEN.finditer(path.read_text())
        if not m[0].endswith("_") and path.read_text()[m.end() : m.end() + 1] not in "*{"
    ]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_metric_name_in_the_docs_is_in_the_catalogue(doc: Path) -> None:
    unknown = sorted({n for n in _mentions(doc) if n not in KNOWN})
    assert not unknown, f"{doc.relative_to(ROOT)} names metrics the catalogue lacks: {unknown}"


def test_the_check_would_catch_the_old_readme_misspelling() -> None:
    misspelt = catalog.IB_COUNTER_RESETS.name.replace("counters_", "counter_")
    assert misspelt not in KNOWN
    assert catalog.IB_COUNTER_RESETS.name in KNOWN
