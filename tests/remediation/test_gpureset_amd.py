"""The GPU reset rung on AMD Instinct nodes: amd-smi resets and verifies, the same rung and
saga; the verdict reads amd-smi's bad-pages JSON and fails closed on anything else."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.settings import SettingsError
from remediation.clock import FakeClock
from remediation.gpureset import amd, config, job, verdict
from remediation.validation.suite import StepRun
from tests.remediation.helpers import alert, service, topology_file
from tests.remediation.test_gpureset_logic import POLICY

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "gpureset" / "amd"
RESET = StepRun(0, "")


def check(name: str) -> StepRun:
    return StepRun(0, (FIX / name).read_text())


def test_an_amd_node_is_reset_and_verified_with_amd_smi() -> None:
    s = job.suite(config.ResetPolicy(), "3", amd=True)
    assert s.steps[0].command == ("sh", "-c", "amd-smi reset --gpureset -g 3")
    assert s.steps[1].command == ("amd-smi", "bad-pages", "-g", "3", "--json")
    site = config.parse({"amd": {"command": ["/site/amd-reset", "{index}"]}})
    assert job.suite(site, "5", amd=True).steps[0].command[2] == "/site/amd-reset 5"
    with pytest.raises(SettingsError, match=r"reset_gpu\.amd"):
        config.parse({"amd": {"comand": ["x"]}})


@pytest.mark.parametrize(
    ("fixture", "passed", "why"),
    [("bad-pages-clean.json", True, "answers amdsmi, nothing pending"),
     ("bad-pages-retired-only.json", True, "nothing pending"),  # history, newer JSON wrapper
     ("bad-pages-pending.json", False, "pending: 1 (pages wait for retirement"),
     ("bad-pages-unreservable.json", False, "un_res: 1 (pages the GPU cannot retire")],
)  # fmt: skip
def test_the_amd_verdict_reads_pending_and_unreservable_pages(
    fixture: str, passed: bool, why: str
) -> None:
    ok, ev = verdict.judge([RESET, check(fixture)], amd=True)
    assert ok is passed and why in ev["why"]


@pytest.mark.parametrize(
    ("stdout", "why"),
    [("GPU reset failed", "not JSON"), ("[]", "found 0"),
     ('[{"gpu": 3, "pending": "No bad pages found."}]', "un_res: None (unknown"),
     ('[{"gpu": 3, "retired": 7, "pending": "No bad pages found.", "un_res": "N/A"}]',
      "retired: 7 (unknown")],
)  # fmt: skip
def test_an_amd_verification_output_it_cannot_read_fails_the_reset(stdout: str, why: str) -> None:
    ok, ev = verdict.judge([RESET, StepRun(0, stdout)], amd=True)
    assert ok is False and why in ev["why"]


def test_an_amd_gpu_that_does_not_answer_after_reset_fails_naming_amdsmi() -> None:
    ok, ev = verdict.judge([RESET, StepRun(1, "")], amd=True)
    assert ok is False and "does not answer amdsmi" in ev["why"]


def test_a_node_is_amd_by_its_alert_or_its_topology_model() -> None:
    assert amd.is_amd({"vendor": "amd"}, None)
    assert amd.is_amd({}, "AMD Instinct MI300X")
    assert not amd.is_amd({}, "NVIDIA H100 80GB HBM3") and not amd.is_amd({}, None)


def _dry_run(tmp: Path, topology: Path, **labels: str) -> str:
    text = POLICY.replace("dry_run: false", "dry_run: true")
    svc = service(tmp, text, clock=FakeClock(), topology=topology)
    a = alert("gpu-node-001", "memory", "reboot", gpu="3", reset_suffices="true", **labels)
    svc.journal.accept([a], 0.0)
    aid = svc.engine.decide(a)
    [row] = svc.journal.rows("SELECT * FROM actions WHERE id=?", (aid,))
    state, outcome = svc.executor.run(row)
    assert state == "done"
    return outcome


def test_the_rung_on_an_amd_node_would_run_amd_smi_where_nvidia_smi_runs_elsewhere(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "c").mkdir()
    topo = tmp_path / "c" / "topology.yaml"
    topo.write_text("nodes:\n" + "".join(
        f'  gpu-node-00{i}: {{leaf: leaf-00, gpu_model: "AMD Instinct MI300X"}}\n' for i in range(1, 5)
    ))  # fmt: skip
    by_model = _dry_run(tmp_path / "c", topo)
    assert "would reset GPU 3 on gpu-node-001 (amd-smi reset --gpureset -g 3)" in by_model
    by_label = _dry_run(tmp_path / "a", topology_file(tmp_path / "a", 2), vendor="amd")
    assert "(amd-smi reset --gpureset -g 3)" in by_label
    nvidia = _dry_run(tmp_path / "b", topology_file(tmp_path / "b", 2))
    assert "(nvidia-smi -r -i 3)" in nvidia
