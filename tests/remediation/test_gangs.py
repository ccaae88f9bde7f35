"""Gang-scheduled jobs are recognised from what their controllers write, and move whole."""

from __future__ import annotations

from typing import Any

import pytest

from remediation.backends.gangs import Gang, gang_of, members, restart_plan


def pod(name: str, node: str, labels: dict[str, str] | None = None, ann: dict[str, str] | None = None,
        owners: list[dict[str, Any]] | None = None, ns: str = "train", phase: str = "Running") -> dict[str, Any]:  # fmt: skip
    return {
        "metadata": {"name": name, "namespace": ns, "labels": labels or {},
                     "annotations": ann or {}, "ownerReferences": owners or []},
        "spec": {"nodeName": node},
        "status": {"phase": phase},
    }  # fmt: skip


def vcjob_pod(i: int, node: str) -> dict[str, Any]:
    # As Volcano's job controller writes them (pkg/controllers/job: job-name / task-spec
    # labels, the PodGroup annotation, a controller reference to the vcjob).
    return pod(
        f"llm-worker-{i}",
        node,
        {"volcano.sh/job-name": "llm", "volcano.sh/job-namespace": "train",
         "volcano.sh/task-spec": "worker"},
        {"scheduling.k8s.io/group-name": "llm-9f2c"},
        [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "llm",
          "uid": "uid-llm", "controller": True}],
    )  # fmt: skip


def test_a_volcano_job_restarts_through_a_restartjob_command_never_by_evicting_one_pod() -> None:
    pods = [vcjob_pod(i, f"gpu-node-00{i}") for i in range(4)]
    gang = gang_of(pods[2])
    assert gang == Gang("volcano-job", "train", "llm", "uid-llm")
    plan = restart_plan(gang, pods, "XID 79 on gpu-node-002")
    assert plan.delete_pods == ()
    assert plan.command is not None
    assert plan.command["kind"] == "Command" and plan.command["action"] == "RestartJob"
    assert plan.command["target"] == {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "name": "llm",
        "uid": "uid-llm",
        "controller": True,
    }
    assert plan.command["metadata"]["namespace"] == "train"
    assert len(plan.members) == 4 and plan.nodes == tuple(f"gpu-node-00{i}" for i in range(4))


def test_a_jobset_restarts_by_deleting_every_member_together() -> None:
    lab = {"jobset.sigs.k8s.io/jobset-name": "pretrain",
           "jobset.sigs.k8s.io/replicatedjob-name": "workers"}  # fmt: skip
    owner = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "pretrain-workers-0", "controller": True}
    ]
    pods = [pod(f"pretrain-workers-0-{i}", f"n{i}", lab, owners=owner) for i in range(4)]
    pods.append(pod("other", "n1"))
    plan = restart_plan(gang_of(pods[0]), pods, "r")  # type: ignore[arg-type]
    assert plan.gang.kind == "jobset" and plan.command is None
    assert plan.delete_pods == tuple(f"train/pretrain-workers-0-{i}" for i in range(4))


def test_a_pytorchjob_is_a_gang_by_label_or_by_owner_reference() -> None:
    by_label = pod("ddp-worker-1", "n1", {"training.kubeflow.org/job-name": "ddp",
                                          "training.kubeflow.org/replica-type": "worker"})  # fmt: skip
    by_owner = pod("ddp-master-0", "n0", owners=[{"apiVersion": "kubeflow.org/v1",
                   "kind": "PyTorchJob", "name": "ddp", "uid": "u1", "controller": True}])  # fmt: skip
    old = pod("ddp-worker-2", "n2", {"pytorch-job-name": "ddp"})
    assert {gang_of(p).name for p in (by_label, by_owner, old)} == {"ddp"}  # type: ignore[union-attr]
    assert {gang_of(p).kind for p in (by_label, by_owner, old)} == {"pytorchjob"}  # type: ignore[union-attr]
    plan = restart_plan(gang_of(by_owner), [by_label, by_owner, old], "r")  # type: ignore[arg-type]
    assert len(plan.delete_pods) == 3


def test_a_bare_podgroup_or_coscheduling_group_is_a_gang() -> None:
    a = pod("a", "n0", ann={"scheduling.k8s.io/group-name": "pg1"})
    b = pod("b", "n1", {"scheduling.x-k8s.io/pod-group": "pg2"})
    assert gang_of(a) == Gang("podgroup", "train", "pg1")
    assert gang_of(b) == Gang("podgroup", "train", "pg2")


def test_a_plain_pod_is_no_gang() -> None:
    assert gang_of(pod("web", "n0", {"app": "web"},
                       owners=[{"kind": "ReplicaSet", "name": "web-1"}])) is None  # fmt: skip


def test_finished_pods_and_pods_of_other_gangs_or_namespaces_are_not_members() -> None:
    pods = [vcjob_pod(i, f"n{i}") for i in range(3)]
    pods.append({**vcjob_pod(3, "n3"), "status": {"phase": "Succeeded"}})
    other_ns = vcjob_pod(4, "n4")
    other_ns["metadata"]["namespace"] = "eval"
    pods.append(other_ns)
    gang = gang_of(pods[0])
    assert gang is not None
    assert [p["metadata"]["name"] for p in members(gang, pods)] == [
        "llm-worker-0",
        "llm-worker-1",
        "llm-worker-2",
    ]


@pytest.mark.parametrize("kind", ["volcano-job", "jobset", "pytorchjob", "podgroup"])
def test_the_gang_is_one_job_for_the_budgets(kind: str) -> None:
    g = Gang(kind, "train", "x")
    assert g.job_id == f"train/{kind}/x"
