"""The metric catalogue is the only place metric names are spelled, and they follow conventions."""

from __future__ import annotations

import ast
import os
import re
import subprocess
from pathlib import Path

import pytest

from exporter import catalog
from exporter.exposition import render
from tests.realcomp import promtool

ROOT = Path(__file__).resolve().parents[1]
UNIT_SUFFIX = {
    "celsius": "_celsius",
    "watts": "_watts",
    "joules": "_joules",
    "hertz": "_hertz",
    "bytes": "_bytes",
    "ratio": "_ratio",
    "seconds": "_seconds",
    "bytes_per_second": "_bytes_per_second",
}
METRIC_TOKEN = re.compile(
    r"\b(?:gpuwarden_(?:gpu|nvlink|infiniband|exporter|finding|analyzer|remediation|accounting)\w*"
    r"|DCGM_FI_\w+)"
)


def _python_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [ROOT / p for p in out if (ROOT / p).exists()]


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """String literals in code, without docstrings (prose may name a metric; code may not)."""
    tree = ast.parse(path.read_text(errors="replace"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def test_no_python_file_outside_the_catalogue_spells_a_metric_name() -> None:
    allowed = {ROOT / "exporter" / "catalog.py", Path(__file__).resolve()}
    allowed.add(ROOT / "exporter" / "catalog_dcgm.py")  # the catalogue's dcgm generations
    offenders = [
        f"{p.relative_to(ROOT)}:{n}: {m.group(0)}"
        for p in _python_files()
        if p not in allowed
        for n, text in _code_strings(p)
        for m in METRIC_TOKEN.finditer(text)
    ]
    assert not offenders, "metric names spelled outside exporter/catalog.py:\n" + "\n".join(
        offenders
    )


@pytest.mark.parametrize("metric", list(catalog.all_metrics()), ids=lambda m: m.name)
def test_each_metric_follows_prometheus_naming_conventions(metric: catalog.MetricDef) -> None:
    if metric.name.startswith("DCGM_"):
        assert metric.name in catalog.dcgm_names()
        return
    assert re.fullmatch(r"gpuwarden_[a-z][a-z0-9_]*", metric.name)
    assert (metric.type == "counter") == metric.name.endswith("_total")
    if metric.unit:
        assert UNIT_SUFFIX[metric.unit] in metric.name
    assert metric.help and metric.help.endswith((".", ")"))
    assert len(set(metric.labels)) == len(metric.labels)
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", label) for label in metric.labels)
    assert not {"le", "quantile"} & set(metric.labels)
    for field in metric.dcgm:
        assert {k for k, _ in field.match} <= set(metric.labels)
        assert set(field.sum_over) <= set(metric.labels)
        assert "gpu" in metric.labels


def test_every_exporter_metric_carries_the_node_label() -> None:
    for m in catalog.all_metrics():
        if not m.name.startswith(
            ("gpuwarden_analyzer", "gpuwarden_remediation", "gpuwarden_accounting", "DCGM_")
        ):
            assert "node" in m.labels, m.name


def test_sample_refuses_a_wrong_label_set() -> None:
    with pytest.raises(ValueError, match="labels"):
        catalog.GPU_UP.sample(1, node="n", gpu="0")
    with pytest.raises(ValueError):
        catalog.GPU_UP.make(1, "n", "0")


@pytest.mark.real
def test_one_sample_of_every_metric_passes_promtool_check_metrics() -> None:
    samples = [
        m.make(1, *[f"v{i}" for i in range(len(m.labels))])
        for m in catalog.all_metrics()
        if m.type != "histogram" and not m.name.startswith("DCGM")
    ]
    r = promtool("check", "metrics", stdin=render(samples))
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()


def test_the_metrics_doc_is_generated_from_the_catalogue_and_current() -> None:
    from gpuwarden import metricsdoc

    if os.environ.get("UPDATE_GOLDEN"):
        metricsdoc.main([])
    assert metricsdoc.DOC.read_text() == metricsdoc.render(), (
        "docs/metrics.md is stale: run python -m gpuwarden.metricsdoc"
    )
    every = {m.name for m in catalog.all_metrics()}
    assert all(f"`{name}`" in metricsdoc.DOC.read_text() for name in every)
