"""The tree says what depends on what (docs/architecture.md): checked on the installed code."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SIMULATOR_MARKERS = ("simulator", "fleet", "nvml_fake", "FakeNvml")


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_import_contracts_hold_for_the_whole_tree() -> None:
    done = subprocess.run(
        [str(BIN / "lint-imports")], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


PARTS = ("common", "exporter", "simulator", "analyzer", "remediation", "accounting", "dashboards")


def _lint_with_planted(tmp_path: Path, package: str, module: str, line: str) -> str:
    """lint-imports on a copy of the tree where ``package/module`` gains ``line``; its stdout
    when it fails (the real tree is untouched: the package is a private copy)."""
    for name in (*PARTS, "gpuwarden"):
        if name != package:
            os.symlink(ROOT / name, tmp_path / name)
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    subprocess.run(["cp", "-r", str(ROOT / package), str(tmp_path / package)], check=True)
    with (tmp_path / package / module).open("a") as f:
        f.write(f"\n{line}  # planted\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [str(BIN / "lint-imports")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode != 0, done.stdout[-2000:]
    return done.stdout


def test_a_planted_upward_import_breaks_the_contracts(tmp_path: Path) -> None:
    # A copy of the tree with one part importing the umbrella: lint-imports must fail.
    out = _lint_with_planted(tmp_path, "exporter", "counters.py", "import gpuwarden.cli")
    assert "exporter.counters -> gpuwarden.cli" in out


def test_remediation_importing_accounting_breaks_the_contracts(tmp_path: Path) -> None:
    out = _lint_with_planted(tmp_path, "remediation", "engine.py", "import accounting.report")
    assert "remediation.engine -> accounting.report" in out


@pytest.mark.parametrize("module", ["remediation.model", "remediation.history"])
def test_accounting_reading_remediation_beside_its_seam_breaks_the_contracts(
    tmp_path: Path, module: str
) -> None:
    # the seam is remediation.history, and accounting.journal alone imports it
    out = _lint_with_planted(tmp_path, "accounting", "costs.py", f"import {module}")
    assert f"accounting.costs -> {module}" in out


def test_the_node_agent_package_contains_no_simulator_module() -> None:
    files = [p for p in (ROOT / "exporter").rglob("*.py")]
    assert files
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        assert not any(m in rel for m in ("fleet", "nvml_fake")), rel
        for mod in _imported_modules(path):
            assert not mod.startswith("simulator"), f"{rel} imports {mod}"
            assert not mod.startswith("gpuwarden"), f"{rel} imports {mod}"


def test_importing_the_node_agent_loads_no_simulator_code() -> None:
    code = (
        "import sys, exporter.cli, exporter.assemble, exporter.server, exporter.collection;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('simulator', 'gpuwarden', 'analyzer', 'remediation', 'numpy', 'pandas'));"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_the_built_wheel_keeps_the_simulator_out_of_the_exporter_package(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = tmp_path.glob("gpuwarden-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    exporter_files = [n for n in names if n.startswith("exporter/")]
    assert "exporter/catalog.py" in exporter_files
    assert not [n for n in exporter_files if any(m in n for m in SIMULATOR_MARKERS)]
    assert "simulator/fleet.py" in names and "simulator/priors.yaml" in names
    assert "common/settings.py" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[gpuwarden.exporter_sources]" in text
    assert "simulated = simulator.exporter_source:assemble" in text


def test_an_uninstalled_source_plugin_is_a_clear_error() -> None:
    from exporter.assemble import SourceUnavailable, plugin_source

    with pytest.raises(SourceUnavailable, match="no plugin provides --source quantum"):
        plugin_source("quantum")


def test_the_simulated_source_comes_from_the_simulator_plugin() -> None:
    from exporter.assemble import plugin_source
    from simulator.exporter_source import assemble

    assert plugin_source("simulated") is assemble
