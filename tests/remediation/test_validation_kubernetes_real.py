"""Validation suites and GPU resets as batch/v1 Jobs on the real API server (tests/kubelab.py): the real Job
controller makes the pod (bound to the cordoned node, tolerating only gpuwarden's taint), the
kubelet stand-in runs it with a scripted log and exit code, the real garbage collector
deletes the pods when gpuwarden deletes the Job. Run as the remediation ServiceAccount of
the shipped manifests, in the base's namespace, so a verb its Role lacks fails (403).

Issue 32: these had only met the kmock emulator, which has neither a Job controller nor a
garbage collector (tests/remediation/kgc.py stood in for the latter)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

from gpuwarden.processes import wait_until
from remediation.backends.base import BackendError
from remediation.backends.kubernetes import TAINT_KEY, KubernetesBackend
from remediation.gpureset.config import ResetPolicy
from remediation.gpureset.job import suite as reset_suite
from remediation.gpureset.kubernetes import KubernetesReset
from remediation.validation.kubernetes import KubernetesValidation, TaintedCordon
from remediation.validation.suite import StepRun, Suite, judge_suite
from tests.kube.shipped import NAMESPACE, apply_remediation_rbac
from tests.kubelab import KubeLab, Obj, Run, Script
from tests.remediation.test_validation_kubernetes import SUITE, log_of

pytestmark = pytest.mark.real

IMAGE = "registry.example/gpuwarden-validation:1"


class Setup:
    def __init__(self, lab: KubeLab) -> None:
        self.lab = lab
        self.ns = NAMESPACE  # validation.kubernetes.namespace's default: the base's own
        token = apply_remediation_rbac(lab, [])
        api = lab.kube_api(token)
        self.backend = KubernetesBackend(api)
        self.validation = KubernetesValidation(
            api, self.ns, IMAGE, cordon=TaintedCordon(self.backend)
        )

    def cordoned_node(self) -> str:
        node = self.lab.add_node()
        self.backend.take_out(node, "gpuwarden: validation test", False)
        return node


@pytest.fixture(scope="module")
def setup(kube_lab: KubeLab) -> Setup:
    return Setup(kube_lab)


def for_node(node: str, run: Run) -> Script:
    def script(pod: Obj) -> Run | None:
        return run if (pod.get("spec") or {}).get("nodeName") == node else None

    return script


def poll_until_done(v: KubernetesValidation, run: object, timeout: float = 60) -> list[StepRun]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = v.poll(run)
        if got is not None:
            return got
        time.sleep(0.3)
    raise AssertionError("the validation Job never finished")


def confirmed(stop: Callable[[], None]) -> int:
    """A stop (finish or cancel) tried until the API server confirms, as the release loop
    retries it each tick; returns how many tries it took."""
    for attempt in range(1, 200):
        try:
            stop()
            return attempt
        except BackendError as e:
            assert "still there" in str(e), e
            time.sleep(0.2)
    raise AssertionError("the Job and its pods never went")


def finish_confirmed(v: KubernetesValidation, run: object, verdict: str | None) -> int:
    return confirmed(lambda: v.finish(run, verdict))  # type: ignore[arg-type]


def pods_of(lab: KubeLab, ns: str, job: str) -> list[Obj]:
    items = lab.http.get(f"/api/v1/namespaces/{ns}/pods?labelSelector=job-name%3D{job}")
    return list(items.get("items") or [])


def test_a_passing_suite_runs_as_a_job_pod_bound_to_the_cordoned_node_and_is_judged_passed(
    setup: Setup,
) -> None:
    lab, v = setup.lab, setup.validation
    node = setup.cordoned_node()
    script_run = Run()
    script_run.log = log_of("dcgmi-diag-r3-pass.json", "all_reduce_perf-8gpu.txt")
    script_run.exit_code, script_run.after_s = 0, 0.5
    with lab.kubelet.scripted(for_node(node, script_run)):
        run = v.start(node, SUITE, f"{node}-{uuid.uuid4().hex[:4]}")
        runs = poll_until_done(v, run)
        [pod] = pods_of(lab, setup.ns, run.job_name)
        assert pod["spec"]["nodeName"] == node, "the pod must be bound to the cordoned node"
        assert pod["spec"]["tolerations"][0]["key"] == TAINT_KEY
        owner = pod["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("Job", run.job_name), "made by the Job controller"
        verdict = judge_suite(SUITE, runs)
        assert verdict.passed, verdict.evidence()
        tries = finish_confirmed(v, run, "passed")
    assert lab.http.get_or_none(f"/apis/batch/v1/namespaces/{setup.ns}/jobs/{run.job_name}") is None
    assert pods_of(lab, setup.ns, run.job_name) == [], "the garbage collector deleted the pod"
    assert tries >= 1
    assert setup.backend.node(node).out_of_service  # type: ignore[union-attr]


def test_a_failing_step_fails_the_suite_with_the_real_controllers(setup: Setup) -> None:
    lab, v = setup.lab, setup.validation
    node = setup.cordoned_node()
    bad = Run()
    bad.log = log_of("dcgmi-diag-r3-pass.json", "all_reduce_perf-slow.txt")
    bad.exit_code, bad.after_s = 0, 0.3
    with lab.kubelet.scripted(for_node(node, bad)):
        run = v.start(node, SUITE, f"{node}-{uuid.uuid4().hex[:4]}")
        verdict = judge_suite(SUITE, poll_until_done(v, run))
        finish_confirmed(v, run, "failed")
    assert not verdict.passed
    assert any("busbw" in r for s in verdict.steps for r in s.reasons), verdict.evidence()


def test_a_pod_killed_mid_step_is_no_result_never_a_pass(setup: Setup) -> None:
    lab, v = setup.lab, setup.validation
    node = setup.cordoned_node()
    killed = Run()
    # the diag passed, the NCCL step began and the container was killed (OOM, SIGKILL: 137)
    killed.log = log_of("dcgmi-diag-r3-pass.json", "all_reduce_perf-8gpu.txt", nccl_rc=None)
    killed.exit_code, killed.after_s = 137, 0.3
    with lab.kubelet.scripted(for_node(node, killed)):
        run = v.start(node, SUITE, f"{node}-{uuid.uuid4().hex[:4]}")
        runs = poll_until_done(v, run)
        job = lab.http.get(f"/apis/batch/v1/namespaces/{setup.ns}/jobs/{run.job_name}")
        assert job["status"].get("failed") == 1, "backoffLimit 0: the Job failed, not retried"
        assert len(pods_of(lab, setup.ns, run.job_name)) == 1, "no second pod was started"
        finish_confirmed(v, run, "failed")
    assert runs[0].exit_code == 0
    assert runs[1].exit_code is None, "a step with no end marker has no result"
    assert not judge_suite(SUITE, runs).passed


def test_a_cordon_lifted_during_validation_is_put_back_when_the_run_stops(setup: Setup) -> None:
    lab, v = setup.lab, setup.validation
    node = setup.cordoned_node()
    with lab.kubelet.scripted(for_node(node, Run())):  # runs on
        run = v.start(node, SUITE, f"{node}-{uuid.uuid4().hex[:4]}")
        running = wait_until(
            lambda: [p for p in pods_of(lab, setup.ns, run.job_name)
                     if (p.get("status") or {}).get("phase") == "Running"],
            30, 0.2, "the validation pod running",
        )  # fmt: skip
        assert running
        lab.kubectl("uncordon", node)  # an operator, meanwhile
        assert not setup.backend.node(node).out_of_service  # type: ignore[union-attr]
        finish_confirmed(v, run, "stopped")
    view = setup.backend.node(node)
    assert view is not None and view.out_of_service and view.ours
    assert pods_of(lab, setup.ns, run.job_name) == []


# ---------------------------------------------------------------- the GPU-reset Job
def reset_setup(setup: Setup) -> tuple[KubernetesReset, Suite]:
    return KubernetesReset(setup.validation.api, setup.ns, IMAGE), reset_suite(ResetPolicy(), "3")


def test_a_gpu_reset_runs_as_a_privileged_job_admitted_in_the_shipped_namespace_and_passes(
    setup: Setup,
) -> None:
    lab = setup.lab
    node = setup.cordoned_node()
    resetter, suite = reset_setup(setup)
    ok = Run()
    ok.log = "\n".join(["===gpuwarden-step 0 begin===", "GPU 00000000:3B:00.0 was reset.",
                        "===gpuwarden-step 0 rc=0===", "===gpuwarden-step 1 begin===",
                        "NVIDIA-SMI answers", "===gpuwarden-step 1 rc=0==="]) + "\n"  # fmt: skip
    ok.exit_code, ok.after_s = 0, 0.5
    with lab.kubelet.scripted(for_node(node, ok)):
        run = resetter.start(node, suite, f"reset-{uuid.uuid4().hex[:6]}", "xid 79")
        again = resetter.start(node, suite, run.job_name.removeprefix("gpuwarden-"), "xid 79")
        assert again == run, "a second create under the action's name adopts the Job (409)"
        runs = poll_until_done(setup.validation, run)
        [pod] = pods_of(lab, setup.ns, run.job_name)
        [c] = pod["spec"]["containers"]
        assert c["securityContext"]["privileged"] is True, "PodSecurity admitted it as is"
        assert "nvidia.com/gpu" not in (c.get("resources") or {}).get("limits", {})
        confirmed(lambda: resetter.finish(run, "passed"))
    assert [r.exit_code for r in runs] == [0, 0]
    jobs = lab.http.get(f"/apis/batch/v1/namespaces/{setup.ns}/jobs").get("items") or []
    assert run.job_name not in {j["metadata"]["name"] for j in jobs}
    assert pods_of(lab, setup.ns, run.job_name) == []


def test_a_hung_gpu_reset_is_cancelled_its_job_and_pod_deleted_and_the_node_stays_out(
    setup: Setup,
) -> None:
    lab = setup.lab
    node = setup.cordoned_node()
    resetter, suite = reset_setup(setup)
    with lab.kubelet.scripted(for_node(node, Run())):  # nvidia-smi -r never returns
        run = resetter.start(node, suite, f"reset-{uuid.uuid4().hex[:6]}", "xid 79")
        wait_until(
            lambda: [p for p in pods_of(lab, setup.ns, run.job_name)
                     if (p.get("status") or {}).get("phase") == "Running"],
            30, 0.2, "the reset pod running",
        )  # fmt: skip
        assert resetter.poll(run) is None, "a running reset has no result yet"
        confirmed(lambda: resetter.cancel(run))
    assert pods_of(lab, setup.ns, run.job_name) == []
    view = setup.backend.node(node)
    assert view is not None and view.out_of_service and view.ours
