"""Real-world XID lines (fixtures/kmsg/xid_corpus.yaml) parse without loss: every line, every
driver branch from 470 to 570, MIG instance attribution, domainless legacy addresses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.sources.xid_lines import XidLineStream

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "kmsg" / "xid_corpus.yaml"
ENTRIES: list[dict[str, Any]] = yaml.safe_load(CORPUS.read_text())["entries"]


def _parse(lines: list[str]) -> list[dict[str, Any]]:
    stream = XidLineStream()
    out = []
    for line in lines:
        result = stream.feed(line)
        assert result.malformed == 0, line
        for e in result.events:
            d: dict[str, Any] = {"pci": e.pci_key, "xid": e.xid}
            if e.gpu_instance is not None:
                d["gi"] = e.gpu_instance
            if e.compute_instance is not None:
                d["ci"] = e.compute_instance
            out.append(d)
    return out


def test_the_corpus_has_at_least_a_hundred_lines_each_with_an_origin() -> None:
    assert sum(len(e["lines"]) for e in ENTRIES) >= 100
    assert all(e["origin"].strip() for e in ENTRIES)
    real = [e for e in ENTRIES if not e["origin"].startswith("constructed")]
    assert len(real) >= 40


def test_the_corpus_covers_every_driver_branch_from_470_to_570_and_the_legacy_shapes() -> None:
    branches = {e["driver"] for e in ENTRIES}
    assert {"470", "510", "515", "525", "535", "545", "550", "555", "560", "565", "570"} <= branches
    events = [ev for e in ENTRIES for ev in e["events"]]
    assert any("gi" in ev and "ci" in ev for ev in events)  # GPU-I and GPU-CI
    assert any("gi" in ev and "ci" not in ev for ev in events)  # GPU-I only
    assert any("Xid (000" in line for e in ENTRIES for line in e["lines"])  # domainless


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["lines"][0][:60])
def test_each_corpus_line_parses_to_exactly_its_events(entry: dict[str, Any]) -> None:
    assert _parse(entry["lines"]) == entry["events"]


def test_a_mig_line_names_the_parent_gpu_and_the_instance() -> None:
    line = "NVRM: Xid (PCI:0000:3b:00 GPU-I:05 GPU-CI:01): 43, pid=99, name=a, Ch 00000008"
    [e] = XidLineStream().feed(line).events
    assert (e.pci_key, e.xid, e.gpu_instance, e.compute_instance, e.pid) == (
        "0000:3b:00",
        43,
        5,
        1,
        99,
    )


def test_a_domainless_legacy_address_lands_on_domain_zero() -> None:
    [e] = XidLineStream().feed("NVRM: Xid (0003:00): 8, Channel 00000002").events
    assert (e.pci_key, e.xid, e.text) == ("0000:03:00", 8, "Channel 00000002")


def test_a_truncated_line_that_still_names_its_code_and_gpu_counts_that_xid() -> None:
    result = XidLineStream().feed("NVRM: Xid (PCI:0000:01:00): 154 (")
    assert [(e.pci_key, e.xid) for e in result.events] == [("0000:01:00", 154)]
    assert result.malformed == 0
    # cut inside the address, the line names no GPU: nothing is counted for a guessed one
    assert not XidLineStream().feed("NVRM: Xid (PCI:0000:5d:0").events
