"""Gang-scheduled jobs and single pods as the engine follows them through the Kubernetes
backend: one job per gang whatever its members, its state and nodes, the restart it counts
once its members are replaced, what a gang restart sends (a Volcano Command, or deleting every
member), checkpoint requests and requeues. On the in-memory API (tests/remediation/fakekube.py)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from remediation.backends.base import BackendError, EvacuationBlocked
from remediation.backends.kubeapi import Eviction
from remediation.backends.kubernetes import KubernetesBackend
from remediation.checkpoint import ANNOTATION
from remediation.model import Job
from tests.remediation.fakekube import FakeKube, backend, node, pod

N1, N2, N3 = "gpu-node-001", "gpu-node-002", "gpu-node-003"
PG = "scheduling.x-k8s.io/pod-group"


def member(group: str, i: int, on: str | None, phase: str | None = "Running",
           uid: str | None = "", ns: str | None = "ml") -> dict[str, Any]:  # fmt: skip
    """Member ``i`` of coscheduling pod group ``group`` (uid ``<group>-<i>-a`` by default;
    None: a pod that names no uid)."""
    return pod(ns, f"{group}-{i}", on, phase=phase, labels={PG: group},
               uid=f"{group}-{i}-a" if uid == "" else uid)  # fmt: skip


def vc_member(i: int, on: str, uid: str) -> dict[str, Any]:
    p = pod("ml", f"llm-{i}", on, uid=uid, labels={"volcano.sh/job-name": "llm"})
    p["metadata"]["ownerReferences"] = [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                                         "name": "llm", "uid": "vc-1", "controller": True}]  # fmt: skip
    return p


def cluster(*pods: dict[str, Any]) -> tuple[FakeKube, KubernetesBackend]:
    api = FakeKube(node(N1), node(N2), node(N3))
    api.add(*pods)
    return api, backend(api)


# ---------------------------------------------------------------- one job per gang


def test_two_members_of_one_gang_on_the_node_are_one_job() -> None:
    _, b = cluster(member("a", 0, N1), member("a", 1, N1), member("a", 2, N2))
    assert b.jobs_on(N1) == (Job("ml/podgroup/a", "RUNNING", (N1, N2), 0),)


def test_two_gangs_and_a_single_pod_on_the_node_are_three_jobs_in_order() -> None:
    _, b = cluster(member("a", 0, N1), pod("ml", "solo", N1), member("b", 0, N1))
    assert [j.job_id for j in b.jobs_on(N1)] == ["ml/podgroup/a", "ml/solo", "ml/podgroup/b"]


def test_the_cluster_s_pods_are_listed_once_however_many_gangs_the_node_has() -> None:
    api, b = cluster(member("a", 0, N1), member("b", 0, N1), member("c", 0, N1))
    b.jobs_on(N1)
    assert api.list_all_pods == 1


def test_a_gang_is_running_only_while_every_member_runs() -> None:
    api, b = cluster(member("a", 0, N1), member("a", 1, N2, phase="Pending"))
    assert b.jobs_on(N1)[0].state == "PENDING"
    api.pods[1]["status"] = {}
    assert b.job("ml/podgroup/a") == Job("ml/podgroup/a", "PENDING", (N1, N2), 0)
    api.pods[1]["status"] = {"phase": "Running"}
    assert b.job("ml/podgroup/a") == Job("ml/podgroup/a", "RUNNING", (N1, N2), 0)


def test_a_gang_s_unscheduled_member_adds_no_node() -> None:
    _, b = cluster(member("a", 0, N1), member("a", 1, None, phase="Pending"))
    [job] = b.jobs_on(N1)
    assert job.nodes == (N1,)


def test_a_gang_whose_members_all_finished_is_gone() -> None:
    api, b = cluster(member("a", 0, N1), member("a", 1, N2))
    b.jobs_on(N1)
    for p in api.pods:
        p["status"]["phase"] = "Succeeded"
    assert b.job("ml/podgroup/a") is None


# ---------------------------------------------------------------- restarts counted


def restarted_gang(*pods: dict[str, Any]) -> tuple[FakeKube, KubernetesBackend]:
    api, b = cluster(*pods)
    api.add(pod("ml", "solo", N1))
    api.refuse["ml/solo"] = Eviction(201)  # evicted, still terminating
    b.jobs_on(N1)
    b.take_out(N1, "xid", True)
    return api, b


def test_a_gang_counts_one_restart_once_its_members_are_replaced_by_new_uids() -> None:
    api, b = restarted_gang(member("a", 0, N1), member("a", 1, N2))
    assert [d[1] for d in api.deleted] == ["a-0", "a-1"]
    api.add(member("a", 1, N2, phase="Running"))  # one old member still terminating
    assert b.job("ml/podgroup/a") == Job("ml/podgroup/a", "RUNNING", (N2,), 0)
    api.pods = [p for p in api.pods if p["metadata"].get("labels") != {PG: "a"}]
    # the controller recreates the members under the same names, with new uids
    api.add(member("a", 0, N3, uid="a-0-b"), member("a", 1, N2, uid="a-1-b"))
    assert b.job("ml/podgroup/a") == Job("ml/podgroup/a", "RUNNING", (N2, N3), 1)


def test_members_naming_no_uid_are_told_apart_by_name() -> None:
    api, b = restarted_gang(member("a", 0, N1, uid=None), member("a", 1, N2, uid=None))
    api.add(member("a", 0, N1, uid=None))  # the same name again: not a replacement yet
    assert b.job("ml/podgroup/a") == Job("ml/podgroup/a", "RUNNING", (N1,), 0)
    api.pods = [p for p in api.pods if p["metadata"].get("labels") != {PG: "a"}]
    new = member("a", 5, N3, uid=None)
    api.add(new)
    assert b.job("ml/podgroup/a") == Job("ml/podgroup/a", "RUNNING", (N3,), 1)


def test_a_gang_never_restarted_counts_no_restart() -> None:
    _, b = cluster(member("a", 0, N1), member("a", 1, N2))
    b.jobs_on(N1)
    assert b.job("ml/podgroup/a") == Job("ml/podgroup/a", "RUNNING", (N1, N2), 0)


# ---------------------------------------------------------------- what a restart sends


def test_taking_out_a_node_restarts_each_of_its_gangs_whole_and_says_which() -> None:
    api, b = cluster(member("b", 0, N1), member("a", 0, N1), member("a", 1, N2))
    out = b.take_out(N1, "xid", True)
    assert out == (
        "cordoned and tainted; evicted 0 pods; restarted 2 gang(s) whole: "
        "ml/podgroup/a, ml/podgroup/b"
    )
    assert sorted(api.deleted) == [("ml", "a-0"), ("ml", "a-1"), ("ml", "b-0")]
    assert api.evictions == []


def test_a_volcano_gang_is_restarted_by_a_command_saying_why() -> None:
    api, b = cluster(vc_member(0, N1, "u0"), vc_member(1, N2, "u1"))
    b.take_out(N1, "xid", True)
    [(group, version, ns, plural, body)] = api.created
    assert (group, version, ns, plural) == ("bus.volcano.sh", "v1alpha1", "ml", "commands")
    assert body["action"] == "RestartJob"
    assert body["message"] == f"node {N1} taken out of service"
    assert api.deleted == []


def test_a_command_answered_200_is_a_restart() -> None:
    api, b = cluster(vc_member(0, N1, "u0"))
    api.create_status = 200
    assert b.take_out(N1, "xid", True).endswith("restarted 1 gang(s) whole: ml/volcano-job/llm")


def test_a_command_the_server_refuses_fails_the_restart_with_its_status() -> None:
    api, b = cluster(vc_member(0, N1, "u0"))
    api.create_status = 403
    with pytest.raises(BackendError) as e:
        b.take_out(N1, "xid", True)
    assert str(e.value) == "restart of gang ml/volcano-job/llm: Command create HTTP 403"


def test_member_deletes_answered_202_or_404_are_a_restart() -> None:
    api, b = cluster(member("a", 0, N1), member("a", 1, N2))
    api.delete_status = {"ml/a-0": 202, "ml/a-1": 404}
    assert b.take_out(N1, "xid", True).endswith("restarted 1 gang(s) whole: ml/podgroup/a")


def test_member_deletes_that_fail_are_each_named_with_their_status() -> None:
    api, b = cluster(member("a", 0, N1), member("a", 1, N2), member("a", 2, N3))
    api.delete_status = {"ml/a-0": 500, "ml/a-2": 403}
    with pytest.raises(BackendError) as e:
        b.take_out(N1, "xid", True)
    assert str(e.value) == (
        "restart of gang ml/podgroup/a incomplete: ml/a-0: HTTP 500; ml/a-2: HTTP 403"
    )
    assert len(api.deleted) == 3  # every member is tried


def test_requeueing_a_gang_restarts_it_whole_saying_from_where() -> None:
    api, b = cluster(vc_member(0, N1, "u0"), vc_member(1, N2, "u1"))
    [job] = b.jobs_on(N1)
    b.requeue(job, N1)
    assert api.created[0][4]["message"] == f"requeued away from {N1}"
    assert api.evictions == []


# ---------------------------------------------------------------- checkpoints, requeues


def test_a_checkpoint_request_is_a_fresh_unix_time_on_every_gang_member() -> None:
    api, b = cluster(member("a", 0, N1, ns=None), member("a", 1, N2, ns=None))
    [job] = b.jobs_on(N1)
    before = int(time.time())
    b.request_checkpoint(job)
    assert [(ns, name) for ns, name, _ in api.pod_patches] == [("default", "a-0"),
                                                               ("default", "a-1")]  # fmt: skip
    for *_, body in api.pod_patches:
        assert before <= int(body["metadata"]["annotations"][ANNOTATION]) <= time.time()


def test_a_checkpoint_request_of_a_single_pod_annotates_that_pod() -> None:
    api, b = cluster(pod("ml", "solo", N1))
    [job] = b.jobs_on(N1)
    b.request_checkpoint(job)
    [(ns, name, body)] = api.pod_patches
    assert (ns, name) == ("ml", "solo")
    assert int(body["metadata"]["annotations"][ANNOTATION]) >= int(time.time()) - 5


def test_requeueing_a_pod_evicts_it() -> None:
    api, b = cluster(pod("ml", "solo", N1))
    [job] = b.jobs_on(N1)
    b.requeue(job, N1)
    assert api.evictions == [("ml", "solo")]
    assert api.events == []


def test_a_refused_requeue_blocks_with_the_pod_and_a_warning_event_on_the_node_left() -> None:
    api, b = cluster(pod("ml", "solo", N1))
    api.refuse["ml/solo"] = Eviction(429, "TooManyRequests", "budget")
    [job] = b.jobs_on(N1)
    with pytest.raises(EvacuationBlocked) as e:
        b.requeue(job, N1)
    assert e.value.node == N1
    assert [(p.pod, p.status, p.reason) for p in e.value.pods] == [
        ("ml/solo", 429, "TooManyRequests")
    ]
    assert [(ev["involvedObject"]["name"], ev["type"], ev["reason"]) for ev in api.events] == [
        (N1, "Warning", "EvacuationBlocked")
    ]


def test_a_node_is_evacuated_when_only_pods_a_drain_leaves_or_cannot_evict_remain() -> None:
    """What a restarted drain reads as its evictions done (the executor's reconciliation):
    a running pod it evicts one by one is not; a terminating one, a DaemonSet's, a finished
    one and a gang's member (restarted whole, not evicted) are."""
    api = FakeKube(node("n1"))
    b = backend(api)
    assert b.is_evacuated("n1")
    going = pod("ns", "going", "n1")
    going["metadata"]["deletionTimestamp"] = "2026-12-07T02:00:00Z"
    api.add(going, pod("ns", "agent", "n1", owner="DaemonSet"), pod("ns", "old", "n1", "Succeeded"),
            pod("ns", "rank-0", "n1", labels={"volcano.sh/job-name": "train"}),
            pod("ns", "elsewhere", "n2"))  # fmt: skip
    assert b.is_evacuated("n1")
    api.add(pod("ns", "single", "n1"))
    assert not b.is_evacuated("n1")
