"""A validation suite runs on a drained node through a real slurmctld, inside our reservation."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from remediation.backends.base import BackendError
from remediation.backends.runner import SubprocessRunner
from remediation.validation.slurm import SlurmValidation, reservation_name
from remediation.validation.suite import judge_suite, load_suites
from tests.slurmcluster import SlurmCluster

pytestmark = pytest.mark.real
FIX = Path(__file__).resolve().parents[2] / "fixtures" / "validation"


def suite_for(stub_dir: Path, nccl_fixture: str):  # type: ignore[no-untyped-def]
    # Stub tools: the suite runs what a real node would, with recorded outputs.
    for name in ("dcgmi-diag-r3-pass.json", nccl_fixture):
        shutil.copy(FIX / name, stub_dir / name)
        (stub_dir / name).chmod(0o644)
    return load_suites({"pre-release": [
        {"name": "diag", "command": ["cat", str(stub_dir / "dcgmi-diag-r3-pass.json")],
         "timeout_s": 30, "parser": "dcgmi-diag"},
        {"name": "nccl", "command": ["cat", str(stub_dir / nccl_fixture)], "timeout_s": 30,
         "parser": "nccl-tests", "min": {"busbw_at_max_size_gbps": 400}},
    ]})["pre-release"]  # fmt: skip


def wait_result(v: SlurmValidation, run, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = v.poll(run)
        if got is not None:
            return got
        time.sleep(0.5)
    raise AssertionError("validation job did not end")


@pytest.mark.parametrize(
    ("fixture", "passes"), [("all_reduce_perf-8gpu.txt", True), ("all_reduce_perf-slow.txt", False)]
)
def test_a_suite_runs_pinned_to_the_drained_node_and_the_node_is_drained_again(
    clean_slurm: SlurmCluster, readable_dir: Path, fixture: str, passes: bool
) -> None:
    sc, node = clean_slurm, clean_slurm.live[0]
    sc.run(
        "scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=gpuwarden: drain nvlink d7"
    )
    suite = suite_for(readable_dir, fixture)
    v = SlurmValidation(SubprocessRunner(sc.env), str(readable_dir / "runs"))
    run = v.start(node, suite, "r1", "gpuwarden: drain nvlink d7")
    # Inside the reservation the node is resumed but still reads out of service (MAINT),
    # and a job of anyone else cannot land there.
    other = sc.sbatch("--nodelist", node, "--wrap", "sleep 1", as_user="nobody")
    runs = wait_result(v, run)
    verdict = judge_suite(suite, runs)
    assert verdict.passed is passes
    assert sc.job_nodes(other) in ("", node)
    assert sc.job_state(other) in ("PENDING", "")  # never ran on the reserved node
    v.finish(run, "passed" if verdict.passed else "failed")
    st = sc.node_state(node)
    assert "DRAIN" in st["flags"]
    assert st["reason"] == f"gpuwarden: validation {'passed' if passes else 'failed'}"
    assert reservation_name(node) not in sc.run("scontrol", "show", "reservation")
    sc.run("scancel", other, check=False)


def test_a_node_drained_by_someone_else_is_not_validated(
    clean_slurm: SlurmCluster, readable_dir: Path
) -> None:
    sc, node = clean_slurm, clean_slurm.live[1]
    sc.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=admin: bad fan")
    v = SlurmValidation(SubprocessRunner(sc.env), str(readable_dir / "runs"))
    with pytest.raises(BackendError, match="not drained by gpuwarden"):
        v.start(node, suite_for(readable_dir, "all_reduce_perf-8gpu.txt"), "r2", "admin: bad fan")
    assert sc.node_state(node)["reason"] == "admin: bad fan"


def test_a_suite_that_cannot_be_submitted_leaves_the_node_drained(
    clean_slurm: SlurmCluster, readable_dir: Path
) -> None:
    sc, node = clean_slurm, clean_slurm.live[0]
    sc.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=gpuwarden: drain x")
    v = SlurmValidation(SubprocessRunner(sc.env), "/proc/no-such-dir")
    with pytest.raises(BackendError, match="not started"):
        v.start(node, suite_for(readable_dir, "all_reduce_perf-8gpu.txt"), "r3", "gpuwarden: x")
    st = sc.node_state(node)
    assert "DRAIN" in st["flags"] and st["reason"].startswith("gpuwarden: validation could not")
    assert reservation_name(node) not in sc.run("scontrol", "show", "reservation")
