"""The Slurm validation runner's commands, exactly as slurmctld receives them, and how it
reads each answer. The real-slurmctld tests (test_validation_slurm, _failclosed_slurm,
_e2e_slurm) show these commands work; this file pins them without a slurmctld (fast enough
for every mutant of `make mutation`) and the reading of every answer that fails closed:
slurmctld's "gone" wording, a reservation that is still there, a drain not read back."""

from __future__ import annotations

import getpass
from collections.abc import Sequence
from pathlib import Path

import pytest

from remediation.backends.base import BackendError
from remediation.backends.runner import Result
from remediation.validation.slurm import (
    SchedulerUnknown,
    SlurmValidation,
    SuiteCancelled,
    ValidationRun,
    batch_script,
    reservation_name,
)
from remediation.validation.suite import Step, StepRun, Suite

NODE = "gpu-node-007"
RES = "gpuwarden-validate-gpu-node-007"
DRAINED = f"NodeName={NODE} State=IDLE+DRAIN Reason=gpuwarden: validation failed"
SUITE = Suite(
    "quick",
    (
        Step("dcgm", ("dcgmi", "diag", "-r", "2"), 600, "dcgmi_diag"),
        Step("nccl", ("all_reduce_perf", "-b", "8", "-e", "8G"), 90.5, "nccl_tests"),
    ),
)


class Scripted:
    """Answers each command by the first matching prefix (rc 0, empty, otherwise)."""

    def __init__(self, answers: dict[tuple[str, ...], Result] | None = None) -> None:
        self.answers = answers or {}
        self.calls: list[list[str]] = []
        self.timeouts: list[float] = []

    def run(self, argv: Sequence[str], timeout: float = 10.0) -> Result:
        self.calls.append(list(argv))
        self.timeouts.append(timeout)
        for prefix, result in self.answers.items():
            if tuple(argv[: len(prefix)]) == prefix:
                return result
        return Result(0, "", "")


def validation(tmp_path: Path, runner: Scripted, user: str | None = "svc") -> SlurmValidation:
    return SlurmValidation(runner, str(tmp_path / "runs"), user)


def test_the_suite_script_runs_each_step_under_timeout_and_keeps_its_output_and_exit_code() -> None:
    out = Path("/shared/runs/r 1")
    assert batch_script(SUITE, out) == (
        "#!/bin/sh\n"
        "# gpuwarden validation suite quick\n"
        "timeout -k 10 600 dcgmi diag -r 2 > '/shared/runs/r 1/0.out' 2>&1;"
        " echo $? > '/shared/runs/r 1/0.rc'\n"
        "timeout -k 10 90.5 all_reduce_perf -b 8 -e 8G > '/shared/runs/r 1/1.out' 2>&1;"
        " echo $? > '/shared/runs/r 1/1.rc'\n"
    )
    assert "# gpuwarden validation suite 'a b'" in batch_script(Suite("a b", ()), out)


def test_start_reserves_the_node_for_gpuwarden_then_lifts_the_drain_then_submits(
    tmp_path: Path,
) -> None:
    r = Scripted({("sbatch",): Result(0, "4242;cluster\n", "")})
    run = validation(tmp_path, r).start(NODE, SUITE, "run-1", "gpuwarden: xid 79")
    out = tmp_path / "runs" / "run-1"
    assert r.calls == [
        ["scontrol", "delete", f"ReservationName={RES}"],
        ["scontrol", "create", "reservation", f"ReservationName={RES}", f"Nodes={NODE}",
         "StartTime=now", "Duration=UNLIMITED", "Users=svc", "Flags=MAINT,IGNORE_JOBS"],
        ["scontrol", "update", f"NodeName={NODE}", "State=RESUME"],
        ["sbatch", "--parsable", f"--reservation={RES}", f"--nodelist={NODE}", "--exclusive",
         f"--job-name=gpuwarden-validate-{NODE}", f"--output={out / 'job.log'}",
         f"--chdir={out}", str(out / "suite.sh")],
    ]  # fmt: skip
    assert r.timeouts[1:] == [15.0, 15.0, 15.0]
    assert run == ValidationRun(NODE, "run-1", "4242", RES, str(out), 2)
    script = out / "suite.sh"
    assert script.read_text() == batch_script(SUITE, out)
    assert script.stat().st_mode & 0o777 == 0o755
    assert reservation_name(NODE) == RES


def test_the_reservation_is_for_the_services_own_user_unless_told_otherwise(
    tmp_path: Path,
) -> None:
    r = Scripted({("sbatch",): Result(0, "1", "")})
    validation(tmp_path, r, user=None).start(NODE, SUITE, "r", "gpuwarden: x")
    assert f"Users={getpass.getuser()}" in r.calls[1]


def test_a_node_not_drained_by_gpuwarden_is_never_resumed(tmp_path: Path) -> None:
    r = Scripted()
    with pytest.raises(
        BackendError, match=r"^node gpu-node-007 is not drained by gpuwarden \('admin: bios'\)$"
    ):
        validation(tmp_path, r).start(NODE, SUITE, "r", "admin: bios")
    assert r.calls == []


def test_a_reservation_slurmctld_refuses_resumes_nothing(tmp_path: Path) -> None:
    r = Scripted({("scontrol", "create"): Result(1, "", "Requested nodes are busy")})
    with pytest.raises(BackendError, match="Requested nodes are busy"):
        validation(tmp_path, r).start(NODE, SUITE, "r", "gpuwarden: x")
    assert not any("State=RESUME" in c for c in r.calls)
    assert not any(c[0] == "sbatch" for c in r.calls)


@pytest.mark.parametrize(
    "fails", [("sbatch",), ("scontrol", "update", f"NodeName={NODE}", "State=RESUME")]
)
def test_a_submission_that_fails_drains_the_node_again_and_drops_the_reservation(
    tmp_path: Path, fails: tuple[str, ...]
) -> None:
    r = Scripted({fails: Result(1, "", "slurmctld says no")})
    with pytest.raises(
        BackendError, match=r"^validation of gpu-node-007 not started: .*slurmctld says no"
    ):
        validation(tmp_path, r).start(NODE, SUITE, "r", "gpuwarden: x")
    redrain, delete = r.calls[-2:]
    assert redrain[:4] == ["scontrol", "update", f"NodeName={NODE}", "State=DRAIN"]
    assert redrain[4].startswith("Reason=gpuwarden: validation could not start: ")
    assert "slurmctld says no" in redrain[4]
    assert delete == ["scontrol", "delete", f"ReservationName={RES}"]


def test_an_output_directory_that_cannot_be_made_drains_the_node_again(tmp_path: Path) -> None:
    (tmp_path / "runs").write_text("a file, not a directory")
    r = Scripted()
    with pytest.raises(BackendError, match="not started"):
        validation(tmp_path, r).start(NODE, SUITE, "r", "gpuwarden: x")
    assert not any("State=RESUME" in c for c in r.calls)
    assert any("State=DRAIN" in c for c in r.calls)


def test_the_jobs_state_is_slurmctlds_answer_and_no_answer_is_unknown(tmp_path: Path) -> None:
    r = Scripted({("squeue",): Result(0, " RUNNING \nPENDING\n", "")})
    v = validation(tmp_path, r)
    assert v.job_state("42") == "RUNNING"
    assert r.calls[-1] == ["squeue", "-h", "-j", "42", "-o", "%T"] and r.timeouts[-1] == 15.0
    r.answers[("squeue",)] = Result(0, "", "")
    assert v.job_state("42") == ""
    for gone in (
        "slurm_load_jobs error: Invalid job id specified",
        "already completing or completed",
    ):
        r.answers[("squeue",)] = Result(1, "", gone)
        assert v.job_state("42") == ""
    r.answers[("squeue",)] = Result(1, "", "  Socket timed out on send/recv operation \n")
    with pytest.raises(
        SchedulerUnknown, match=r"^squeue -j 42: rc 1: Socket timed out on send/recv operation$"
    ):
        v.job_state("42")


def run_in(tmp_path: Path, steps: int = 2) -> ValidationRun:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    return ValidationRun(NODE, "r", "42", RES, str(out), steps)


@pytest.mark.parametrize(
    "state", ["PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "X"]
)
def test_a_job_not_ended_is_polled_again(tmp_path: Path, state: str) -> None:
    r = Scripted({("squeue",): Result(0, state, "")})
    assert validation(tmp_path, r).poll(run_in(tmp_path)) is None


@pytest.mark.parametrize(
    "state", ["COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", ""]
)
def test_an_ended_job_gives_each_steps_result_and_a_missing_one_is_no_result(
    tmp_path: Path, state: str
) -> None:
    run = run_in(tmp_path, 4)
    out = Path(run.out_dir)
    (out / "0.rc").write_text("0\n")
    (out / "0.out").write_text("ok")
    (out / "1.rc").write_text("124")  # coreutils timeout: no result
    (out / "1.out").write_text("")
    (out / "2.rc").write_text("not a number")
    (out / "2.out").write_text("x")
    r = Scripted({("squeue",): Result(0, state, "")})
    steps = validation(tmp_path, r).poll(run)
    assert steps is not None and len(steps) == 4
    assert steps[0] == StepRun(0, "ok")
    assert steps[1] == StepRun(None, "") and not steps[1].missing
    assert steps[2].missing and steps[3].missing


def test_a_job_cancelled_before_its_results_is_cancelled_and_one_after_them_is_judged(
    tmp_path: Path,
) -> None:
    run = run_in(tmp_path, 1)
    r = Scripted({("squeue",): Result(0, "CANCELLED", "")})
    v = validation(tmp_path, r)
    with pytest.raises(SuiteCancelled, match=r"^suite job 42 was cancelled outside gpuwarden$"):
        v.poll(run)
    (Path(run.out_dir) / "0.rc").write_text("1")
    (Path(run.out_dir) / "0.out").write_text("fail")
    assert v.poll(run) == [StepRun(1, "fail")]


def test_a_job_gone_from_the_queue_without_results_is_cancelled_only_for_the_validator(
    tmp_path: Path,
) -> None:
    run = run_in(tmp_path, 1)
    r = Scripted({("squeue",): Result(1, "", "Invalid job id specified")})
    v = validation(tmp_path, r)
    [missing] = v.poll(run) or [StepRun(0, "")]
    assert missing.missing  # the GPU-reset saga: no result
    with pytest.raises(SuiteCancelled, match="left the queue without a result outside gpuwarden"):
        v.poll(run, gone_is_cancel=True)
    r.answers[("squeue",)] = Result(0, "COMPLETED", "")
    [judged] = v.poll(run, gone_is_cancel=True) or []
    assert judged.missing  # a completed job with no result is judged (no pass), not cancelled


def test_a_poll_while_slurmctld_is_silent_is_unknown(tmp_path: Path) -> None:
    r = Scripted({("squeue",): Result(1, "", "Unable to contact slurm controller")})
    with pytest.raises(SchedulerUnknown):
        validation(tmp_path, r).poll(run_in(tmp_path))


def stopped(drained: str = DRAINED) -> Scripted:
    return Scripted({
        ("scontrol", "show", "reservation"): Result(1, "", f"Reservation {RES} not found"),
        ("scontrol", "show", "-o", "node"): Result(0, drained, ""),
    })  # fmt: skip


def test_finishing_drains_first_then_cancels_then_deletes_and_reads_all_back(
    tmp_path: Path,
) -> None:
    r = stopped()
    validation(tmp_path, r).finish(run_in(tmp_path), "failed: nccl 252 GB/s")
    assert r.calls == [
        ["scontrol", "update", f"NodeName={NODE}", "State=DRAIN",
         "Reason=gpuwarden: validation failed: nccl 252 GB/s"],
        ["scancel", "42"],
        ["scontrol", "delete", f"ReservationName={RES}"],
        ["scontrol", "show", "reservation", RES],
        ["scontrol", "show", "-o", "node", NODE],
    ]  # fmt: skip
    assert set(r.timeouts) == {15.0}


def test_a_released_node_is_not_drained_again_by_the_finish(tmp_path: Path) -> None:
    r = stopped(drained=f"NodeName={NODE} State=IDLE Reason=(null)")
    validation(tmp_path, r).finish(run_in(tmp_path), None)
    assert [c[:2] for c in r.calls] == [["scancel", "42"], ["scontrol", "delete"],
                                        ["scontrol", "show"]]  # fmt: skip


def test_a_long_verdict_is_cut_to_slurms_reason_length(tmp_path: Path) -> None:
    r = stopped()
    validation(tmp_path, r).finish(run_in(tmp_path), "x" * 500)
    reason = r.calls[0][4]
    assert reason.startswith("Reason=gpuwarden: validation xxx") and len(reason) == 7 + 200


def test_a_lost_run_is_found_by_name_and_stopped_the_same_way(tmp_path: Path) -> None:
    r = stopped()
    validation(tmp_path, r).finish_lost(NODE, "lost")
    assert ["scancel", "-u", "svc", f"--name=gpuwarden-validate-{NODE}"] in r.calls
    assert ["scontrol", "delete", f"ReservationName={RES}"] in r.calls
    assert r.calls[0][4] == "Reason=gpuwarden: validation lost"


@pytest.mark.parametrize(
    ("answers", "why"),
    [
        ({("scancel",): Result(1, "", "Unable to contact slurm controller")},
         r"^scancel 42: rc 1: Unable to contact slurm controller$"),
        ({("scontrol", "delete"): Result(1, "", "Socket timed out")},
         rf"^reservation {RES} not deleted: rc 1: Socket timed out$"),
        ({("scontrol", "show", "reservation"): Result(0, f"ReservationName={RES}", "")},
         rf"^reservation {RES} still there \(or unknown\): $"),
        ({("scontrol", "show", "reservation"): Result(1, "", "Unable to contact")},
         rf"^reservation {RES} still there \(or unknown\): Unable to contact$"),
        ({("scontrol", "show", "reservation"): Result(0, "not found", "")},
         rf"^reservation {RES} still there"),
        ({("scontrol", "show", "-o", "node"): Result(0, f"NodeName={NODE} State=IDLE Reason=gpuwarden: x", "")},
         rf"^node {NODE} not drained by gpuwarden after the validation$"),
        ({("scontrol", "show", "-o", "node"): Result(0, f"NodeName={NODE} State=IDLE+DRAIN Reason=admin", "")},
         rf"^node {NODE} not drained by gpuwarden"),
        ({("scontrol", "show", "-o", "node"): Result(0, f"NodeName={NODE} State=IDLE+DRAINING Reason=gpuwarden: x", "")},
         rf"^node {NODE} not drained by gpuwarden"),
        ({("scontrol", "show", "-o", "node"): Result(1, "", "down")}, r"^scontrol show -o: rc 1: down$"),
        ({("scontrol", "update"): Result(1, "", "Invalid node state")}, r"^scontrol update NodeName=gpu-node-007: rc 1"),
    ],
)  # fmt: skip
def test_a_stop_slurmctld_does_not_confirm_raises_so_the_caller_retries(
    tmp_path: Path, answers: dict[tuple[str, ...], Result], why: str
) -> None:
    r = stopped()
    r.answers = {**r.answers, **answers}
    with pytest.raises(BackendError, match=why):
        validation(tmp_path, r).finish(run_in(tmp_path), "failed")


@pytest.mark.parametrize(
    "answers",
    [
        {("scancel",): Result(1, "", "scancel: error: Kill job error on job id 42: Invalid job id specified")},
        {("scancel",): Result(1, "", "Job/step already completing or completed")},
        {("scontrol", "delete"): Result(1, "", "Invalid reservation name specified")},
        {("scontrol", "show", "-o", "node"): Result(0, f"NodeName={NODE} State=DOWN+DRAIN Reason=gpuwarden: v", "")},
    ],
)  # fmt: skip
def test_what_is_already_gone_or_already_drained_is_a_confirmed_stop(
    tmp_path: Path, answers: dict[tuple[str, ...], Result]
) -> None:
    r = stopped()
    r.answers = {**r.answers, **answers}
    validation(tmp_path, r).finish(run_in(tmp_path), "failed")


def test_a_cancel_is_one_scancel_of_the_job(tmp_path: Path) -> None:
    r = Scripted()
    validation(tmp_path, r).cancel(run_in(tmp_path))
    assert r.calls == [["scancel", "42"]]
    r.answers[("scancel",)] = Result(1, "", "Unable to contact slurm controller")
    with pytest.raises(BackendError):
        validation(tmp_path, r).cancel(run_in(tmp_path))


def test_a_failed_submission_whose_redrain_fails_too_keeps_the_reservation_around_the_node(
    tmp_path: Path,
) -> None:
    # slurmctld went away between RESUME and sbatch: the node is resumed, so the reservation
    # is all that keeps jobs off it; it stays until a later stop confirms the drain
    r = Scripted({("sbatch",): Result(1, "", "gone"), ("scontrol", "update", f"NodeName={NODE}",
                  "State=DRAIN"): Result(1, "", "gone")})  # fmt: skip
    with pytest.raises(BackendError):
        validation(tmp_path, r).start(NODE, SUITE, "r", "gpuwarden: x")
    assert r.calls[-1][:3] == ["scontrol", "update", f"NodeName={NODE}"]
    assert r.calls.count(["scontrol", "delete", f"ReservationName={RES}"]) == 1  # the stale one


def test_a_run_started_again_under_the_same_id_reuses_its_directory(tmp_path: Path) -> None:
    r = Scripted({("sbatch",): Result(0, "7", "")})
    v = validation(tmp_path, r)
    v.start(NODE, SUITE, "same", "gpuwarden: x")
    assert v.start(NODE, SUITE, "same", "gpuwarden: x").job_id == "7"


def test_a_poll_reads_its_own_jobs_state_and_output_that_is_not_utf8(tmp_path: Path) -> None:
    run = run_in(tmp_path, 1)
    (Path(run.out_dir) / "0.rc").write_text("0")
    (Path(run.out_dir) / "0.out").write_bytes(b"bus bandwidth \xff ok")
    r = Scripted({("squeue",): Result(0, "COMPLETED", "")})
    assert validation(tmp_path, r).poll(run) == [StepRun(0, "bus bandwidth \ufffd ok")]
    assert r.calls == [["squeue", "-h", "-j", "42", "-o", "%T"]]


def test_a_lost_runs_node_is_the_one_drained_again(tmp_path: Path) -> None:
    r = stopped()
    validation(tmp_path, r).finish_lost(NODE, "lost")
    assert r.calls[0] == ["scontrol", "update", f"NodeName={NODE}", "State=DRAIN",
                          "Reason=gpuwarden: validation lost"]  # fmt: skip
    assert r.calls[-1] == ["scontrol", "show", "-o", "node", NODE]


@pytest.mark.parametrize(
    "shown",
    [f"NodeName={NODE} State=DRAIN Reason=gpuwarden: v", f"NodeName={NODE} Reason=gpuwarden: v"],
)
def test_a_drain_is_read_from_the_state_field_alone(tmp_path: Path, shown: str) -> None:
    r = stopped(drained=shown)
    if "State=" in shown:
        validation(tmp_path, r).finish(run_in(tmp_path), "failed")
    else:
        with pytest.raises(BackendError, match="not drained by gpuwarden"):
            validation(tmp_path, r).finish(run_in(tmp_path), "failed")


@pytest.mark.parametrize(
    "answers",
    [
        {("squeue",): Result(1, "", "e" * 300)},
        {("scancel",): Result(1, "", "e" * 300)},
        {("scontrol", "delete"): Result(1, "", "e" * 300)},
        {("scontrol", "show", "reservation"): Result(1, "", "e" * 300)},
        {("sbatch",): Result(1, "", "e" * 300)},
    ],
)
def test_slurmctlds_words_are_quoted_to_200_characters(
    tmp_path: Path, answers: dict[tuple[str, ...], Result]
) -> None:
    r = stopped()
    r.answers = {**r.answers, **answers}
    v = validation(tmp_path, r)
    with pytest.raises(BackendError) as e:
        if ("squeue",) in answers:
            v.job_state("42")
        elif ("sbatch",) in answers:
            v.start(NODE, SUITE, "r", "gpuwarden: x")
        else:
            v.finish(run_in(tmp_path), "failed")
    assert "e" * 200 in str(e.value) and "e" * 201 not in str(e.value)
    if ("sbatch",) in answers:  # and the drain reason to Slurm's 200
        [reason] = [c[4] for c in r.calls if "State=DRAIN" in c]
        assert len(reason) == len("Reason=") + 200
