"""A validation suite on a cordoned Kubernetes node: a Job bound to the node, tolerating only
our taint, judged from its pod log; over real HTTP against the kmock emulator."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kmock
import pytest

from remediation.backends.base import BackendError
from remediation.backends.kubeapi import OfficialKubeApi
from remediation.backends.kubernetes import TAINT_KEY
from remediation.validation.kubernetes import KubernetesValidation, script, split_log
from remediation.validation.slurm import SuiteCancelled
from remediation.validation.suite import judge_suite, load_suites
from tests.remediation.kgc import collect_garbage
from tests.remediation.test_kubernetes import writes

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "validation"
JOBS = kmock.resource("batch/v1/jobs")
PODS = kmock.resource("v1/pods")

SUITE = load_suites({"pre-release": [
    {"name": "diag", "command": ["dcgmi", "diag", "-r", "2", "-j"], "timeout_s": 1800,
     "parser": "dcgmi-diag"},
    {"name": "nccl", "command": ["all_reduce_perf", "-b", "1G", "-e", "8G", "-g", "8"],
     "timeout_s": 600, "parser": "nccl-tests", "min": {"busbw_at_max_size_gbps": 400}},
]})["pre-release"]  # fmt: skip


def log_of(diag: str, nccl: str, nccl_rc: int | None = 0) -> str:
    parts = [
        "===gpuwarden-step 0 begin===",
        (FIX / diag).read_text(),
        "===gpuwarden-step 0 rc=0===",
    ]
    parts += ["===gpuwarden-step 1 begin===", (FIX / nccl).read_text()]
    if nccl_rc is not None:
        parts.append(f"===gpuwarden-step 1 rc={nccl_rc}===")
    return "\n".join(parts) + "\n"


@pytest.fixture
async def emu() -> AsyncIterator[kmock.KubernetesEmulator]:
    async with kmock.KubernetesEmulator() as e, kmock.Server(e):
        e.resources["v1/pods"] = kmock.ResourceInfo()
        e.resources["batch/v1/jobs"] = kmock.ResourceInfo(namespaced=True)
        yield e


def runner(e: kmock.KubernetesEmulator) -> KubernetesValidation:
    api = OfficialKubeApi.from_config(str(e.url).rstrip("/"))
    return KubernetesValidation(api, "gpuwarden", "registry.local/gpu-validate:1")


def complete(e: kmock.KubernetesEmulator, name: str, log: str, ok: bool) -> None:
    """The Job controller and the kubelet, in a few lines: one pod ran, the Job finished."""
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": name, "namespace": "gpuwarden"},
           "status": {"succeeded": 1} if ok else {"failed": 1}}  # fmt: skip
    del e.objects[JOBS, "gpuwarden", name]
    e.objects[JOBS, "gpuwarden", name] = job
    e.objects[PODS, "gpuwarden", name + "-x7k2p"] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name + "-x7k2p", "namespace": "gpuwarden",
                     "labels": {"job-name": name}},
        "spec": {"nodeName": "gpu-node-003", "containers": []}, "status": {"phase": "Succeeded"},
    }  # fmt: skip
    e["get", kmock.subresource("log")] << (lambda req: log.encode())  # plain text, as kubelet


async def test_the_job_is_bound_to_the_node_and_tolerates_only_our_taint(
    emu: kmock.KubernetesEmulator,
) -> None:
    v = runner(emu)
    run = await asyncio.to_thread(v.start, "gpu-node-003", SUITE, "gpu-node-003-d41")
    job: dict[str, Any] = emu.objects[JOBS, "gpuwarden", run.job_name]
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeName"] == "gpu-node-003"
    assert pod["tolerations"] == [{"key": TAINT_KEY, "operator": "Exists"}]
    assert pod["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert "timeout -k 10 1800 dcgmi diag -r 2 -j" in pod["containers"][0]["command"][2]
    assert await asyncio.to_thread(v.poll, run) is None  # still running


@pytest.mark.parametrize(
    ("nccl", "passes"), [("all_reduce_perf-8gpu.txt", True), ("all_reduce_perf-slow.txt", False)]
)
async def test_the_suite_is_judged_from_the_pod_log_and_the_job_removed(
    emu: kmock.KubernetesEmulator, nccl: str, passes: bool
) -> None:
    v = runner(emu)
    run = await asyncio.to_thread(v.start, "gpu-node-003", SUITE, "r1")
    complete(emu, run.job_name, log_of("dcgmi-diag-r3-pass.json", nccl), ok=True)
    runs = await asyncio.to_thread(v.poll, run)
    assert runs is not None
    assert judge_suite(SUITE, runs).passed is passes
    # the pod is the garbage collector's: until it has gone, the stop is not confirmed
    with pytest.raises(BackendError, match=r"still there \(the garbage collector deletes them\)"):
        await asyncio.to_thread(v.finish, run)
    assert collect_garbage(emu) == [f"{run.job_name}-x7k2p"]
    await asyncio.to_thread(v.finish, run)
    deletes = [p for m, p, _ in writes(emu) if m == "DELETE"]
    # the Job (twice: each try deletes it), never a pod: the Role grants no pod delete there
    assert set(deletes) == {f"/apis/batch/v1/namespaces/gpuwarden/jobs/{run.job_name}"}
    assert await asyncio.to_thread(gone, v, run.job_name)  # read back through the API server


def gone(v: KubernetesValidation, job: str) -> bool:
    api = v.api
    return api.read_job("gpuwarden", job) is None and not api.list_pods_by_label(
        "gpuwarden", f"job-name={job}"
    )


def test_a_step_cut_off_without_its_end_marker_has_no_result() -> None:
    runs = split_log(log_of("dcgmi-diag-r3-pass.json", "all_reduce_perf-8gpu.txt", None), 2)
    assert runs[0].exit_code == 0 and runs[1].exit_code is None
    assert not judge_suite(SUITE, runs).passed


def test_a_timed_out_step_reads_as_a_timeout() -> None:
    runs = split_log(log_of("dcgmi-diag-r3-pass.json", "all_reduce_perf-8gpu.txt", 124), 2)
    verdict = judge_suite(SUITE, runs)
    assert verdict.steps[1].reasons == ("timed out after 600 s",)


def test_the_script_runs_each_step_under_its_timeout_with_markers() -> None:
    text = script(SUITE)
    assert text.count("===gpuwarden-step") == 4
    assert "timeout -k 10 600 all_reduce_perf -b 1G -e 8G -g 8" in text


async def test_a_job_deleted_by_someone_else_is_cancelled_never_timed_out(
    emu: kmock.KubernetesEmulator,
) -> None:
    v = runner(emu)
    run = await asyncio.to_thread(v.start, "gpu-node-003", SUITE, "r1")
    del emu.objects[JOBS, "gpuwarden", run.job_name]  # kubectl delete job, by an admin
    with pytest.raises(SuiteCancelled, match="deleted outside gpuwarden"):
        await asyncio.to_thread(v.poll, run)


def test_a_step_that_never_began_has_no_result_and_is_not_read_as_a_timeout() -> None:
    log = log_of("dcgmi-diag-r3-pass.json", "all_reduce_perf-8gpu.txt")
    runs = split_log(log.split("===gpuwarden-step 1 begin===")[0], 2)
    assert runs[1].missing
    reasons = judge_suite(SUITE, runs).steps[1].reasons
    assert reasons == ("no result (the step did not run to its end)",)


class Cordon:
    """The backend's cordon, as the stop sees it: lifted by someone until taken out again."""

    def __init__(self, ours: bool) -> None:
        self.ours, self.reasons = ours, []  # type: list[str]

    def take_out(self, node: str, reason: str, evict: bool) -> str:
        self.ours = True
        self.reasons.append(reason)
        return "cordoned and tainted"

    def is_taken_out(self, node: str) -> bool:
        return self.ours


async def test_the_stop_cordons_again_a_node_uncordoned_meanwhile_and_reads_it_back(
    emu: kmock.KubernetesEmulator,
) -> None:
    v, cordon = runner(emu), Cordon(ours=False)
    v.cordon = cordon
    run = await asyncio.to_thread(v.start, "gpu-node-003", SUITE, "r1")
    await asyncio.to_thread(v.finish, run, "failed")
    assert cordon.reasons == ["gpuwarden: validation failed"]
    assert await asyncio.to_thread(gone, v, run.job_name)


async def test_a_released_nodes_stop_leaves_the_cordon_alone(
    emu: kmock.KubernetesEmulator,
) -> None:
    v, cordon = runner(emu), Cordon(ours=False)
    v.cordon = cordon
    run = await asyncio.to_thread(v.start, "gpu-node-003", SUITE, "r1")
    await asyncio.to_thread(v.finish, run, None)
    assert cordon.reasons == [] and await asyncio.to_thread(gone, v, run.job_name)


async def test_a_stop_the_api_server_refuses_raises_with_its_status_until_it_is_confirmed(
    emu: kmock.KubernetesEmulator,
) -> None:
    v = runner(emu)
    run = await asyncio.to_thread(v.start, "gpu-node-003", SUITE, "r1")
    complete(emu, run.job_name, "", ok=False)
    emu["delete", JOBS][:1] << 500  # the API server refuses the Job's delete, once
    with pytest.raises(BackendError, match=f"Job {run.job_name} not deleted: HTTP 500"):
        await asyncio.to_thread(v.finish, run, None)
    with pytest.raises(BackendError, match="still there"):  # deleted; its pod not yet collected
        await asyncio.to_thread(v.finish, run, None)
    collect_garbage(emu)
    await asyncio.to_thread(v.finish, run, None)
    assert await asyncio.to_thread(gone, v, run.job_name)
