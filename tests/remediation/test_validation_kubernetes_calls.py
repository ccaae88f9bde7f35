"""The Kubernetes validation runner against a hand-written API fake: the Job it creates,
field by field, each answer of the API server it reads (a failed read, a deleted Job, a
Job with no pod), and the stop that keeps the node out until the API server confirms.
test_validation_kubernetes runs the same runner over real HTTP (kmock); this file is the
fast one `make mutation` runs per mutant."""

from __future__ import annotations

from typing import Any

import pytest

from remediation.backends.base import BackendError
from remediation.backends.kubernetes import TAINT_KEY
from remediation.validation.kubernetes import (
    KubernetesValidation,
    KubeValidationRun,
    TaintedCordon,
    job_manifest,
    script,
    split_log,
)
from remediation.validation.slurm import SchedulerUnknown, SuiteCancelled
from remediation.validation.suite import Step, StepRun, Suite

NODE = "gpu-node-003"
SUITE = Suite(
    "quick",
    (
        Step("diag", ("dcgmi", "diag", "-r", "2"), 1800, "dcgmi_diag"),
        Step("nccl", ("all_reduce_perf", "-e", "8G"), 600.5, "nccl_tests"),
    ),
)


class Api:
    """The Job, pod and node calls the runner makes, over dicts; statuses settable."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, list[str]] = {}  # job -> pod names
        self.logs: dict[str, str] = {}
        self.create_status, self.delete_pod_status = 201, 200
        self.read_error: Exception | None = None
        self.sticky_job = self.sticky_pods = False
        self.calls: list[tuple[str, ...]] = []
        self.nodes: dict[str, dict[str, Any]] = {}

    def create_job(self, ns: str, body: dict[str, Any]) -> int:
        self.calls.append(("create_job", ns, body["metadata"]["name"]))
        self.jobs[body["metadata"]["name"]] = body
        return self.create_status

    def read_job(self, ns: str, name: str) -> dict[str, Any] | None:
        self.calls.append(("read_job", ns, name))
        if self.read_error is not None:
            raise self.read_error
        return self.jobs.get(name)

    def delete_job(self, ns: str, name: str) -> int:
        self.calls.append(("delete_job", ns, name))
        if not self.sticky_job:
            self.jobs.pop(name, None)
        if not self.sticky_pods:  # the garbage collector deletes the Job's pods
            self.pods.pop(name, None)
        return 200

    def list_pods_by_label(self, ns: str, selector: str) -> list[dict[str, Any]]:
        self.calls.append(("list_pods", ns, selector))
        job = selector.removeprefix("job-name=")
        return [{"metadata": {"name": p}} for p in self.pods.get(job, [])]

    def delete_pod(self, ns: str, name: str) -> int:
        self.calls.append(("delete_pod", ns, name))
        if not self.sticky_pods:
            for pods in self.pods.values():
                if name in pods:
                    pods.remove(name)
        return self.delete_pod_status

    def read_pod_log(self, ns: str, name: str) -> str:
        self.calls.append(("read_pod_log", ns, name))
        return self.logs[name]

    def read_node(self, name: str) -> dict[str, Any] | None:
        return self.nodes.get(name)


class Cordon:
    def __init__(self, ours: bool) -> None:
        self.ours = ours
        self.took: list[tuple[str, str, bool]] = []

    def take_out(self, node: str, reason: str, evict: bool) -> str:
        self.took.append((node, reason, evict))
        self.ours = True
        return "cordoned"

    def is_taken_out(self, node: str) -> bool:
        return self.ours and node == NODE


def runner(api: Api, cordon: Cordon | None = None, gpus: int = 8) -> KubernetesValidation:
    return KubernetesValidation(api, "gpuwarden", "registry.local/validate:1", gpus, cordon)


def test_the_job_is_bound_to_the_node_tolerates_our_taint_and_asks_for_the_gpus() -> None:
    m = job_manifest(NODE, SUITE, "gpuwarden-validate-r1", "ns", "img:1", 4)
    labels = {"app.kubernetes.io/name": "gpuwarden-validation", "gpuwarden.io/node": NODE,
              "app.kubernetes.io/managed-by": "gpuwarden"}  # fmt: skip
    assert m["apiVersion"] == "batch/v1" and m["kind"] == "Job"
    assert m["metadata"] == {"name": "gpuwarden-validate-r1", "namespace": "ns", "labels": labels}
    spec = m["spec"]
    assert spec["backoffLimit"] == 0 and spec["ttlSecondsAfterFinished"] == 3600
    assert spec["activeDeadlineSeconds"] == int(1800 + 15 + 600.5 + 15) + 60
    pod = spec["template"]
    assert pod["metadata"] == {"labels": labels}
    assert pod["spec"]["nodeName"] == NODE and pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["tolerations"] == [{"key": TAINT_KEY, "operator": "Exists"}]
    assert pod["spec"]["containers"] == [
        {
            "name": "suite",
            "image": "img:1",
            "command": ["/bin/sh", "-c", script(SUITE)],
            "resources": {"limits": {"nvidia.com/gpu": "4"}},
        }
    ]


def test_the_script_frames_each_step_with_its_exit_code() -> None:
    assert script(SUITE) == (
        "echo '===gpuwarden-step 0 begin==='\n"
        "timeout -k 10 1800 dcgmi diag -r 2 2>&1; rc=$?\n"
        'echo; echo "===gpuwarden-step 0 rc=$rc==="\n'
        "echo '===gpuwarden-step 1 begin==='\n"
        "timeout -k 10 600.5 all_reduce_perf -e 8G 2>&1; rc=$?\n"
        'echo; echo "===gpuwarden-step 1 rc=$rc==="\n'
    )


def test_the_log_is_cut_back_into_steps_and_lines_outside_a_step_are_dropped() -> None:
    log = (
        "pulling image\n===gpuwarden-step 0 begin===\nall good\nreally\n"
        "===gpuwarden-step 0 rc=0===\nbetween\n===gpuwarden-step 1 begin===\nslow\n"
        "===gpuwarden-step 1 rc=124===\n===gpuwarden-step 2 begin===\nhalf\n"
    )
    assert split_log(log, 4) == [
        StepRun(0, "all good\nreally\n"),
        StepRun(None, "slow\n"),  # timeout's 124: no result to judge
        StepRun(None, "half\n"),  # began, never ended
        StepRun.no_result(),  # never began
    ]
    assert split_log("===gpuwarden-step 0 rc=3===\n", 1) == [StepRun(3, "\n")]


def test_start_names_the_job_within_63_characters_and_creates_it() -> None:
    api = Api()
    run = runner(api, gpus=2).start(NODE, SUITE, "r1")
    assert run == KubeValidationRun(NODE, "gpuwarden", "gpuwarden-validate-r1", 2)
    body = api.jobs["gpuwarden-validate-r1"]
    assert body["metadata"]["namespace"] == "gpuwarden"
    container = body["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.local/validate:1"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    long = runner(Api()).start(NODE, SUITE, "x" * 43 + "-" + "y" * 30)
    assert long.job_name == "gpuwarden-validate-" + "x" * 43  # cut at 63, no trailing '-'
    assert runner(Api()).start(NODE, SUITE, "r").steps == 2


@pytest.mark.parametrize("status", [200, 201])
def test_a_created_job_is_started(status: int) -> None:
    api = Api()
    api.create_status = status
    assert runner(api).start(NODE, SUITE, "r").job_name == "gpuwarden-validate-r"


@pytest.mark.parametrize("status", [409, 403, 500, 202])
def test_a_job_the_api_server_refuses_is_an_error(status: int) -> None:
    api = Api()
    api.create_status = status
    with pytest.raises(BackendError, match=rf"^validation Job for {NODE}: HTTP {status}$"):
        runner(api).start(NODE, SUITE, "r")


def started(api: Api) -> KubeValidationRun:
    return runner(api).start(NODE, SUITE, "r")


def test_a_running_job_is_polled_again_and_a_finished_one_is_read_from_its_pod_log() -> None:
    api = Api()
    run = started(api)
    assert runner(api).poll(run) is None
    api.jobs[run.job_name]["status"] = {"active": 1}
    assert runner(api).poll(run) is None
    for st in ({"succeeded": 1}, {"failed": 1}):
        api.jobs[run.job_name]["status"] = st
        api.pods[run.job_name] = ["pod-a", "pod-b"]
        api.logs["pod-a"] = "===gpuwarden-step 0 begin===\nok\n===gpuwarden-step 0 rc=0===\n"
        assert runner(api).poll(run) == [StepRun(0, "ok\n"), StepRun.no_result()]
        assert api.calls[-2:] == [
            ("list_pods", "gpuwarden", "job-name=gpuwarden-validate-r"),
            ("read_pod_log", "gpuwarden", "pod-a"),
        ]


def test_a_finished_job_without_a_pod_has_no_result_for_any_step() -> None:
    api = Api()
    run = started(api)
    api.jobs[run.job_name]["status"] = {"failed": 1}
    assert runner(api).poll(run) == [StepRun.no_result(), StepRun.no_result()]


def test_a_read_that_fails_is_unknown_and_a_deleted_job_is_cancelled() -> None:
    api = Api()
    run = started(api)
    api.read_error = TimeoutError("read timed out")
    with pytest.raises(
        SchedulerUnknown, match=r"^reading Job gpuwarden-validate-r: TimeoutError: read timed out$"
    ):
        runner(api).poll(run)
    api.read_error = None
    api.jobs.clear()
    with pytest.raises(
        SuiteCancelled, match=r"^validation Job gpuwarden-validate-r was deleted outside gpuwarden$"
    ):
        runner(api).poll(run)


def test_the_stop_deletes_the_job_leaves_its_pods_to_the_garbage_collector_and_reads_back() -> None:
    api, cordon = Api(), Cordon(ours=True)
    run = started(api)
    runner(api, cordon).finish(run, "failed")
    assert cordon.took == []
    assert api.calls[1:] == [
        ("delete_job", "gpuwarden", "gpuwarden-validate-r"),
        ("read_job", "gpuwarden", "gpuwarden-validate-r"),
        ("list_pods", "gpuwarden", "job-name=gpuwarden-validate-r"),
    ]
    assert not any(c[0] == "delete_pod" for c in api.calls)


def test_a_node_uncordoned_meanwhile_is_taken_out_again_first_without_eviction() -> None:
    api, cordon = Api(), Cordon(ours=False)
    run = started(api)
    runner(api, cordon).finish(run, "timed out")
    assert cordon.took == [(NODE, "gpuwarden: validation timed out", False)]
    cordon.ours, cordon.took = False, []
    runner(api, cordon).finish(run, "x" * 300)
    assert len(cordon.took[0][1]) == 200


def test_a_released_node_or_a_runner_without_a_cordon_is_left_alone() -> None:
    api, cordon = Api(), Cordon(ours=False)
    run = started(api)
    runner(api, cordon).finish(run, None)
    runner(api, None).finish(run, "failed")
    assert cordon.took == []


def test_a_stop_the_api_server_does_not_confirm_raises_so_the_caller_retries() -> None:
    api = Api()
    run = started(api)
    api.pods[run.job_name] = ["pod-a", "pod-b"]
    api.sticky_pods = True
    with pytest.raises(
        BackendError,
        match=r"^pods of Job gpuwarden-validate-r still there \(the garbage collector deletes "
        r"them\): pod-a, pod-b$",
    ):
        runner(api).finish(run)
    api.sticky_pods, api.sticky_job = False, True
    api.jobs[run.job_name] = {"metadata": {"name": run.job_name}}
    with pytest.raises(BackendError, match=r"^validation Job gpuwarden-validate-r still there$"):
        runner(api).finish(run)


def test_a_node_that_will_not_stay_cordoned_is_an_error_after_the_stop() -> None:
    class Slippery(Cordon):
        def is_taken_out(self, node: str) -> bool:
            return False

    api, cordon = Api(), Slippery(ours=False)
    run = started(api)
    with pytest.raises(
        BackendError, match=rf"^node {NODE} not cordoned by gpuwarden after the validation$"
    ):
        runner(api, cordon).finish(run, "failed")
    assert cordon.took  # it did try


class Backend:
    def __init__(self, out: bool, api: Api) -> None:
        self.out, self.api = out, api
        self.took: list[tuple[str, str, bool]] = []

    def take_out(self, node: str, reason: str, evict: bool) -> str:
        self.took.append((node, reason, evict))
        return "done"

    def is_taken_out(self, node: str) -> bool:
        return self.out


@pytest.mark.parametrize(
    ("out", "taints", "expected"),
    [
        (True, [{"key": TAINT_KEY, "effect": "NoSchedule"}], True),
        (True, [{"key": "other"}, {"key": TAINT_KEY, "effect": "NoExecute"}], True),
        (True, [{"key": "other"}], False),
        (True, None, False),
        (False, [{"key": TAINT_KEY}], False),
    ],
)
def test_out_by_gpuwarden_means_cordoned_and_tainted_by_gpuwarden(
    out: bool, taints: list[dict[str, str]] | None, expected: bool
) -> None:
    api = Api()
    api.nodes[NODE] = {"spec": {"unschedulable": True, "taints": taints}}
    assert TaintedCordon(Backend(out, api)).is_taken_out(NODE) is expected
    assert TaintedCordon(Backend(True, Api())).is_taken_out(NODE) is False  # node unreadable
    backend = Backend(out, api)
    assert TaintedCordon(backend).take_out(NODE, "gpuwarden: v", False) == "done"
    assert backend.took == [(NODE, "gpuwarden: v", False)]
