"""Each Prometheus generation the tests name is the one its binaries are (tests/realcomp.py):
`current` Debian unstable's Prometheus 3.5 LTS / Alertmanager 0.33 / node_exporter 1.11,
`stable` Debian stable's 2.42 / 0.25 / 1.5. Version lines are the binaries' own --version."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.realcomp import GENERATION_BINARIES

pytestmark = pytest.mark.real

EXPECTED = {
    "current": {
        "prometheus": "3.5.",
        "promtool": "3.5.",
        "prometheus-alertmanager": "0.33.",
        "amtool": "0.33.",
        "prometheus-node-exporter": "1.11.",
    },
    "stable": {
        "prometheus": "2.42.",
        "promtool": "2.42.",
        "prometheus-alertmanager": "0.25.",
        "amtool": "0.25.",
        "prometheus-node-exporter": "1.5.",
    },
}


def test_every_binary_of_each_generation_reports_that_generations_version(
    prom_generation: str,
) -> None:
    seen = {}
    for b in GENERATION_BINARIES:
        # the generation's link directory is first on PATH, so the bare name resolves to it
        r = subprocess.run([b, "--version"], capture_output=True, text=True, timeout=30)
        m = re.search(r"version (\S+)", r.stdout + r.stderr)
        assert m, f"{b} --version: {r.stdout}{r.stderr}"
        seen[b] = m.group(1)
    assert {b: v[: len(EXPECTED[prom_generation][b])] for b, v in seen.items()} == EXPECTED[
        prom_generation
    ], seen
