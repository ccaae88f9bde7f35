"""The GPU reset rung's pure parts: the verdict over the job's two steps, the reset shell
(persistence mode handled), its settings, and the engine's choice of reset_gpu over reboot
only where the alert says a reset suffices, names the GPU and the policy allows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.settings import SettingsError
from remediation.clock import FakeClock
from remediation.gpureset import config, job, verdict
from remediation.validation.suite import StepRun
from tests.remediation.helpers import LIVE_POLICY, alert, service, topology_file

OK = StepRun(0, "GPU 00000000:3B:00.0 was successfully reset.")
FIX = Path(__file__).resolve().parents[2] / "fixtures" / "gpureset"
ANSWERS = StepRun(0, (FIX / "smi-q-r535.161-h100.txt").read_text())


def test_a_reset_passes_only_when_both_steps_exit_zero_and_the_gpu_answers_cleanly() -> None:
    assert verdict.judge([OK, ANSWERS])[0] is True
    assert verdict.judge([StepRun(None, "")]) == (False, {"reset": {"exit_code": None,
                                                  "output": ""}, "why": "the reset job left no result"})  # fmt: skip
    assert verdict.judge([StepRun(124, ""), ANSWERS])[1]["why"] == "the reset command timed out"
    assert verdict.judge([StepRun(3, "in use"), ANSWERS])[1]["why"].endswith("(exit 3)")
    assert "NVML" in verdict.judge([OK, StepRun(9, "")])[1]["why"]
    still = StepRun(0, (FIX / "smi-q-r555.42-a100-remap-pending.txt").read_text())
    assert verdict.judge([OK, still])[0] is False
    assert verdict.judge([OK, StepRun(0, "Unable to determine: GPU requires reset")])[0] is False


def test_the_reset_turns_persistence_mode_off_around_it_and_keeps_the_exit_code() -> None:
    sh = job.reset_shell(config.ResetPolicy(), "3")
    assert "nvidia-smi -i 3 -pm 0" in sh and "nvidia-smi -r -i 3; rc=$?" in sh
    assert sh.endswith("exit $rc")
    assert job.reset_shell(config.ResetPolicy(persistence_mode=False), "3") == "nvidia-smi -r -i 3"
    s = job.suite(config.ResetPolicy(command=("/site/reset-gpu", "{index}")), "5")
    assert "/site/reset-gpu 5" in s.steps[0].command[2]
    assert s.steps[1].command == ("nvidia-smi", "-q", "-i", "5")


def test_reset_settings_are_validated_at_start_up() -> None:
    assert config.parse({"timeout_s": 10, "deadline_s": 60}).timeout_s == 10
    for bad in ({"command": "nvidia-smi -r"}, {"timeout_s": 0}, {"deadline_s": 5}, {"x": 1}):
        with pytest.raises(SettingsError, match="reset_gpu"):
            config.parse(bad)


ALLOW = "checkpoint_restart, reboot, inspect]"
POLICY = LIVE_POLICY.replace(ALLOW, ALLOW.replace("reboot,", "reboot, reset_gpu,"), 1)


def action_of(tmp: Path, policy: str, **labels: str) -> str:
    svc = service(tmp, policy, clock=FakeClock(), topology=topology_file(tmp, 4))
    a = alert("gpu-node-001", "xid_fatal", "reboot", **labels)
    svc.journal.accept([a], 0.0)
    svc.engine.decide(a)
    [d] = svc.journal.rows("SELECT action FROM decisions WHERE action NOT IN ('notify')")
    return str(d["action"])


def test_reboot_becomes_reset_gpu_only_where_a_reset_suffices_and_the_policy_allows_it(
    tmp_path: Path,
) -> None:
    for i, (policy, labels, want) in enumerate([
        (POLICY, {"gpu": "3", "reset_suffices": "true"}, "reset_gpu"),
        (POLICY, {"gpu": "3"}, "reboot"),  # the XID's resolution is not a reset
        (POLICY, {"reset_suffices": "true"}, "reboot"),  # no GPU named
        (LIVE_POLICY, {"gpu": "3", "reset_suffices": "true"}, "reboot"),  # not allowed
    ]):  # fmt: skip
        (tmp_path / str(i)).mkdir()
        assert action_of(tmp_path / str(i), policy, **labels) == want, (labels, want)


def test_a_dry_run_reset_is_recorded_not_run(tmp_path: Path) -> None:
    text = POLICY.replace("dry_run: false", "dry_run: true")
    svc = service(tmp_path, text, clock=FakeClock(), topology=topology_file(tmp_path, 4))
    a = alert("gpu-node-001", "xid_fatal", "reboot", gpu="3", reset_suffices="true")
    svc.journal.accept([a], 0.0)
    aid = svc.engine.decide(a)
    [row] = svc.journal.rows("SELECT * FROM actions WHERE id=?", (aid,))
    state, outcome = svc.executor.run(row)
    assert state == "done" and "dry-run: would reset GPU 3 on gpu-node-001" in outcome


def test_the_reset_saga_never_imports_the_executor_that_drives_it() -> None:
    """No import circle: the executor imports the saga, the saga only the small modules both
    share (``remediation.interrupts``) and its own Protocol of the executor."""
    import grimp

    graph = grimp.build_graph("remediation")
    assert graph.chain_exists("remediation.executor", "remediation.gpureset.saga")
    assert not graph.chain_exists("remediation.gpureset.saga", "remediation.executor")
    assert not graph.find_modules_that_directly_import("remediation.executor") & {
        m for m in graph.modules if m.startswith("remediation.gpureset")
    }
