"""The on-call scenarios use the labels a real scrape has, not hand-typed ones (issue 17).

``fixtures/alerts/scrape-labels.json`` is recorded by ``python -m tests.alerts.record_scrape_labels``
from the real services behind the shipped Prometheus config. Every input series of
``alerts/tests/scenarios_*_test.yml`` must carry every label that all recorded series of its
metric carry, and nothing that none of them carry, except the target labels a deployment adds:
the Prometheus Operator's for the shipped ServiceMonitor (namespace, service, endpoint, pod,
container), or a site label of the shipped file_sd targets (partition).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from exporter import catalog
from tests.alerts.ruleset import ALERTS, ROOT

RECORDED = json.loads((ROOT / "fixtures" / "alerts" / "scrape-labels.json").read_text())["metrics"]
SCENARIOS = sorted((ALERTS / "tests").glob("scenarios_*_test.yml"))
KUBERNETES = {"namespace", "service", "endpoint", "pod", "container"}
FILE_SD_SITE = {"partition"}
_SERIES = re.compile(r"^(?P<name>[A-Za-z_:][\w:]*)\{(?P<labels>.*)\}$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse(series: str) -> tuple[str, dict[str, str]]:
    m = _SERIES.match(series.strip())
    assert m, f"cannot parse series {series!r}"
    return m.group("name"), dict(_LABEL.findall(m.group("labels")))


def _inputs() -> list[tuple[str, str]]:
    out = []
    for f in SCENARIOS:
        for test in yaml.safe_load(f.read_text())["tests"]:
            out += [(f"{f.name}: {test['name']}", s["series"]) for s in test["input_series"]]
    return out


def expected(name: str) -> dict[str, Any]:
    """Recorded label names of ``name``; for a metric the recording did not see (no job map
    in the simulated fleet), the catalogue's labels plus the target's instance and job."""
    if name in RECORDED:
        return dict(RECORDED[name])
    labels = set(catalog.by_name(name).labels) | {"instance", "job"}
    return {"always": sorted(labels), "sometimes": sorted(labels)}


def test_there_are_at_least_thirty_scenarios() -> None:
    count = sum(len(yaml.safe_load(f.read_text())["tests"]) for f in SCENARIOS)
    assert count >= 30, count


def test_the_recording_names_its_origin_and_saw_findings_xids_and_up() -> None:
    data = json.loads((ROOT / "fixtures" / "alerts" / "scrape-labels.json").read_text())
    assert "shipped deploy/prometheus/prometheus.yml" in data["origin"]
    assert {catalog.FINDING.name, catalog.GPU_XID_ERRORS.name, "up"} <= set(data["metrics"])
    assert "node" in data["metrics"]["up"]["sometimes"]  # the shipped config names the node


@pytest.mark.parametrize(("where", "series"), _inputs())
def test_every_scenario_series_has_the_labels_of_a_real_scrape(where: str, series: str) -> None:
    name, labels = parse(series)
    want = expected(name)
    names = set(labels)
    added = KUBERNETES if "pod" in names else FILE_SD_SITE
    if "pod" in names:
        assert names >= KUBERNETES, f"{where}: a Kubernetes target has all of {KUBERNETES}"
    own = names - (added & names)
    assert set(want["always"]) <= own, f"{where}: {name} lacks {set(want['always']) - own}"
    assert own <= set(want["sometimes"]), f"{where}: {name} has {own - set(want['sometimes'])}"


def test_the_label_check_rejects_a_hand_typed_label() -> None:
    name, labels = parse(catalog.GPU_UP.name + '{node="n",gpu="0",uuid="u",hostname="n"}')
    assert not set(labels) <= set(expected(name)["sometimes"]) | FILE_SD_SITE


def test_a_series_of_a_metric_not_recorded_falls_back_to_its_catalogue_labels() -> None:
    want = expected(catalog.GPU_ALLOCATION_INFO.name)
    assert {"job_id", "scheduler", "node", "gpu", "instance", "job"} <= set(want["always"])
