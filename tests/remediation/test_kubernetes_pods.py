"""Which pods the Kubernetes backend moves: the pods of a node that count as jobs (DaemonSet,
static and finished pods stay), which of them hold GPUs when DRA cannot say, and how each
becomes a job. On the in-memory API (tests/remediation/fakekube.py)."""

from __future__ import annotations

from typing import Any

from remediation.backends.kubernetes import KubernetesBackend
from remediation.model import Job
from tests.remediation.fakekube import FakeKube, backend, node, pod

N1, N2 = "gpu-node-001", "gpu-node-002"


def cluster(*pods: dict[str, Any]) -> tuple[FakeKube, KubernetesBackend]:
    api = FakeKube(node(N1), node(N2))
    api.add(*pods)
    return api, backend(api)


def ids(jobs: tuple[Job, ...]) -> list[str]:
    return [j.job_id for j in jobs]


def with_resources(p: dict[str, Any], where: str, kind: str, name: str) -> dict[str, Any]:
    """``p`` whose first container (``where``: containers|initContainers) has resource
    ``name`` under ``kind`` (limits|requests) only."""
    c = {"name": "c", "image": "i", "resources": {kind: {name: "1"}}}
    p["spec"] = {**p["spec"], where: [c]}
    if where == "initContainers":
        p["spec"]["containers"] = [{"name": "main", "image": "i"}]
    return p


def gpu_pods_without_dra(*pods: dict[str, Any]) -> list[str]:
    """The jobs a reset of GPU 0 moves where no DRA device says who holds it."""
    _, b = cluster(*pods)
    jobs, scope = b.jobs_on_gpu(N1, "0")
    assert scope.startswith("the node's GPU pods (no DRA device")
    return ids(jobs)


# ---------------------------------------------------------------- the node's pods


def test_daemonset_static_and_finished_pods_stay_and_every_pod_after_them_is_still_moved() -> None:
    _, b = cluster(
        pod("kube-system", "dcgm", N1, owner="DaemonSet"),
        pod("kube-system", "static", N1, annotations={"kubernetes.io/config.mirror": "x"}),
        pod("ml", "done", N1, phase="Succeeded"),
        pod("ml", "crashed", N1, phase="Failed"),
        pod("ml", "train", N1),
        pod("ml", "other-node", N2),
    )
    assert ids(b.jobs_on(N1)) == ["ml/train"]


def test_a_static_pod_listed_first_does_not_hide_the_pods_after_it() -> None:
    _, b = cluster(
        pod("kube-system", "static", N1, annotations={"kubernetes.io/config.mirror": "x"}),
        pod("ml", "train", N1),
    )
    assert ids(b.jobs_on(N1)) == ["ml/train"]


def test_a_finished_pod_listed_first_does_not_hide_the_pods_after_it() -> None:
    _, b = cluster(pod("ml", "done", N1, phase="Succeeded"), pod("ml", "train", N1))
    assert ids(b.jobs_on(N1)) == ["ml/train"]


def test_a_failed_pod_alone_is_no_job_but_a_pending_or_unknown_phase_pod_is() -> None:
    _, b = cluster(
        pod("ml", "failed", N1, phase="Failed"),
        pod("ml", "pending", N1, phase="Pending"),
        pod("ml", "no-status", N1, phase=None),
    )
    assert ids(b.jobs_on(N1)) == ["ml/pending", "ml/no-status"]


def test_a_pod_with_other_annotations_is_moved() -> None:
    _, b = cluster(pod("ml", "train", N1, annotations={"example.com/team": "a"}))
    assert ids(b.jobs_on(N1)) == ["ml/train"]


# ---------------------------------------------------------------- one pod, one job


def test_a_pod_becomes_a_job_named_namespace_slash_name_in_its_phase_on_its_node() -> None:
    _, b = cluster(pod("ml", "train", N1, phase="Running"))
    assert b.jobs_on(N1) == (Job("ml/train", "RUNNING", (N1,), 0),)


def test_a_pod_without_a_namespace_is_in_default_and_one_without_a_phase_is_pending() -> None:
    _, b = cluster(pod(None, "bare", N1, phase=None))
    assert b.jobs_on(N1) == (Job("default/bare", "PENDING", (N1,), 0),)
    assert b.job("default/bare") == Job("default/bare", "PENDING", (N1,), 0)


def test_an_unscheduled_pod_is_a_job_on_no_named_node() -> None:
    _, b = cluster(pod("ml", "waiting", None, phase="Pending"))
    job = b.job("ml/waiting")
    assert job is not None and job.state == "PENDING"
    assert job.nodes == ()  # not ("",): no node named "" enters a blast radius or storage check


def test_a_pod_that_still_exists_is_its_own_job_not_a_replacement() -> None:
    _, b = cluster(pod("ml", "train", N1))
    b.jobs_on(N1)  # remembers its controller
    assert b.job("ml/train") == Job("ml/train", "RUNNING", (N1,), 0)


def test_an_evicted_pod_is_followed_to_its_controllers_replacement_as_one_restart() -> None:
    api, b = cluster(pod("ml", "train-abc", N1))
    b.jobs_on(N1)
    api.pods.clear()
    replacement = pod("ml", "train-xyz", N2, phase="Pending")
    replacement["metadata"]["ownerReferences"][0]["uid"] = "ctrl-train-abc"
    api.add(pod("ml", "unrelated", N2), replacement)
    assert b.job("ml/train-abc") == Job("ml/train-abc", "PENDING", (N2,), 1)


def test_an_evicted_pod_without_a_replacement_or_controller_is_gone() -> None:
    api, b = cluster(pod("ml", "train", N1))
    b.jobs_on(N1)
    api.pods.clear()
    assert b.job("ml/train") is None
    assert b.job("ml/never-seen") is None


# ---------------------------------------------------------------- GPU pods without DRA


def test_without_dra_a_gpu_reset_moves_the_node_s_gpu_pods_and_leaves_the_others() -> None:
    moved = gpu_pods_without_dra(
        pod("ml", "cpu-only", N1),
        pod("ml", "one-gpu", N1, gpus=1),
        pod("ml", "gpu-elsewhere", N2, gpus=1),
    )
    assert moved == ["ml/one-gpu"]


def test_a_gpu_in_the_limits_or_only_in_the_requests_counts() -> None:
    moved = gpu_pods_without_dra(
        with_resources(pod("ml", "limits", N1), "containers", "limits", "nvidia.com/gpu"),
        with_resources(pod("ml", "requests", N1), "containers", "requests", "nvidia.com/gpu"),
        with_resources(pod("ml", "cpu", N1), "containers", "requests", "cpu"),
    )
    assert moved == ["ml/limits", "ml/requests"]


def test_a_mig_slice_counts_and_another_vendor_s_device_does_not() -> None:
    moved = gpu_pods_without_dra(
        with_resources(pod("ml", "mig", N1), "containers", "limits", "nvidia.com/mig-1g.5gb"),
        with_resources(pod("ml", "amd", N1), "containers", "limits", "amd.com/gpu"),
    )
    assert moved == ["ml/mig"]


def test_a_gpu_held_by_an_init_container_counts() -> None:
    moved = gpu_pods_without_dra(
        with_resources(pod("ml", "init", N1), "initContainers", "limits", "nvidia.com/gpu"),
        with_resources(pod("ml", "init-req", N1), "initContainers", "requests", "nvidia.com/gpu"),
        pod("ml", "plain", N1),
    )
    assert moved == ["ml/init", "ml/init-req"]


def test_a_gpu_in_a_later_container_counts() -> None:
    p = pod("ml", "sidecar-first", N1)
    p["spec"]["containers"] = [
        {"name": "sidecar", "image": "i"},
        {"name": "main", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "8"}}},
    ]
    assert gpu_pods_without_dra(p) == ["ml/sidecar-first"]


def test_a_pod_with_resource_claims_counts_as_a_gpu_pod() -> None:
    p = pod("ml", "dra", N1)
    p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "c"}]
    assert gpu_pods_without_dra(p, pod("ml", "plain", N1)) == ["ml/dra"]


def test_a_pod_with_no_spec_is_no_gpu_pod() -> None:
    p = pod("ml", "odd", N1)
    _, b = cluster(p)
    p["spec"] = {"nodeName": N1}
    assert ids(b.jobs_on_gpu(N1, "0")[0]) == []


# ---------------------------------------------------------------- GPU pods with DRA


def test_with_dra_a_gpu_reset_moves_only_the_pods_holding_that_gpu() -> None:
    api, b = cluster(
        pod("ml", "on-gpu0", N1, gpus=1),
        pod("ml", "on-gpu1", N1, gpus=1),
        pod(None, "default-ns", N1, gpus=1),
    )
    api.gpus(N1)
    api.claim("ml", "on-gpu0", N1, 0)
    api.claim("default", "default-ns", N1, 0)
    api.claim("ml", "on-gpu1", N1, 1)
    jobs, scope = b.jobs_on_gpu(N1, "0")
    assert ids(jobs) == ["ml/on-gpu0", "default/default-ns"]
    assert scope == "the pods holding GPU 0 (DRA)"
