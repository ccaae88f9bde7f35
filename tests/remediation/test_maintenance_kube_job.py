"""Rolling maintenance's ``kube_job`` operation on the in-memory Kubernetes API (fakekube):
the operator's Job manifest becomes one Job per node and attempt, bound to the node, named
within 63 characters, marked as gpuwarden's; its conditions are the outcome (Complete: ok,
Failed: its reason), a deleted one is lost, a silent server is no outcome, a 409 adopts;
the plan refuses a manifest the API server would refuse, and any backend but a live
Kubernetes one. The real API server's Job controller runs it in test_maintenance_kube_real.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from remediation.backends import kubejob
from remediation.backends.base import BackendError
from remediation.backends.kubernetes import TAINT_KEY
from remediation.maintenance import cli, store
from remediation.maintenance.model import Operation, SpecError, kube_job
from remediation.maintenance.operations import KubeJob, make
from remediation.service import Service, build
from remediation.settings import Settings
from tests.remediation.fakekube import FakeKube, backend, node
from tests.remediation.helpers import LIVE_POLICY, TOKEN, FakeClock

MANIFEST: dict[str, Any] = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "driver-upgrade", "labels": {"team": "infra"}},
    "spec": {
        "template": {
            "spec": {
                "hostPID": True,
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                "containers": [{
                    "name": "upgrade", "image": "registry.local/driver-upgrade:570",
                    "command": ["nsenter", "-t", "1", "-m", "--", "/opt/upgrade.sh", "{node}"],
                    "env": [{"name": "NODE", "value": "{node}"}],
                    "securityContext": {"privileged": True},
                }],
            }
        }
    },
}  # fmt: skip


def op(api: FakeKube, manifest: dict[str, Any] = MANIFEST, timeout_s: float = 600.0) -> KubeJob:
    return KubeJob(api, manifest, "gpuwarden", timeout_s)


def test_the_job_is_bound_to_the_node_tolerates_our_taint_and_is_marked_as_gpuwardens() -> None:
    job = op(FakeKube()).body(7, "gpu-node-001", 2)
    assert job["metadata"]["name"] == "gpuwarden-maint-7-gpu-node-001-2"
    assert job["metadata"]["namespace"] == "gpuwarden"
    labels = {"team": "infra", "app.kubernetes.io/managed-by": "gpuwarden",
              "app.kubernetes.io/name": "gpuwarden-maintenance", "gpuwarden.io/node": "gpu-node-001",
              "gpuwarden.io/maintenance-run": "7"}  # fmt: skip
    assert job["metadata"]["labels"] == labels
    pod = job["spec"]["template"]
    assert pod["metadata"]["labels"] == {k: v for k, v in labels.items() if k != "team"}
    assert pod["spec"]["nodeName"] == "gpu-node-001"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists"},  # the manifest's, kept
        {"key": TAINT_KEY, "operator": "Exists"},  # gpuwarden's taint, any effect
    ]
    (c,) = pod["spec"]["containers"]
    assert c["command"][-1] == "gpu-node-001" and c["env"] == [
        {"name": "NODE", "value": "gpu-node-001"}
    ]
    assert job["spec"]["backoffLimit"] == 0  # none in the manifest: one try
    assert job["spec"]["activeDeadlineSeconds"] == 600  # the operation's timeout
    assert job["spec"]["ttlSecondsAfterFinished"] == 86400
    assert MANIFEST["spec"]["template"]["spec"].get("nodeName") is None  # not changed in place


def test_the_manifests_own_namespace_backoff_limit_and_deadline_win() -> None:
    mine = {**MANIFEST, "metadata": {"namespace": "ops"},
            "spec": {**MANIFEST["spec"], "backoffLimit": 2, "activeDeadlineSeconds": 60}}  # fmt: skip
    job = op(FakeKube(), mine).body(1, "a", 0)
    assert job["metadata"]["namespace"] == "ops"
    assert (job["spec"]["backoffLimit"], job["spec"]["activeDeadlineSeconds"]) == (2, 60)


def test_a_long_or_odd_node_name_gives_a_dns_name_within_63_characters_unique_by_hash() -> None:
    long1, long2 = "gpu-" + "x" * 70 + "-a", "gpu-" + "x" * 70 + "-b"
    n1, n2 = (
        kubejob.job_name("gpuwarden-maint", 3, long1, 0),
        kubejob.job_name("gpuwarden-maint", 3, long2, 0),
    )
    assert len(n1) == len(n2) == 63 and n1 != n2
    assert kubejob.job_name("gpuwarden-maint", 3, long1, 0) == n1  # deterministic
    assert (
        kubejob.job_name("gpuwarden-maint", 1, "GPU_Node.01", 0)
        == "gpuwarden-maint-1-gpu-node.01-0"
    )
    import re

    assert re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", n1)


def test_the_jobs_conditions_are_the_outcome_and_a_deleted_job_is_lost() -> None:
    api = FakeKube()
    k = op(api)
    h = k.start(1, "a", 0)
    assert h == {
        "kind": "kube_job",
        "namespace": "gpuwarden",
        "name": "gpuwarden-maint-1-a-0",
        "node": "a",
    }
    assert k.poll(h) == "running"
    api.job_condition("gpuwarden", h["name"], "Complete", "CompletionsReached")
    assert k.poll(h) == "ok"
    api.job_condition("gpuwarden", h["name"], "Failed", "BackoffLimitExceeded",
                      "Job has reached the specified backoff limit")  # fmt: skip
    assert k.poll(h) == "failed: BackoffLimitExceeded: Job has reached the specified backoff limit"
    api.delete_job("gpuwarden", h["name"])
    assert k.poll(h) == "lost"


def test_a_silent_api_server_is_no_outcome_a_refusal_is_and_a_server_error_waits() -> None:
    api = FakeKube()
    k = op(api)
    h = k.start(1, "a", 0)
    api.silent.add("read_job")
    assert k.poll(h) == "running"
    api.silent.clear()

    class ApiException(Exception):
        def __init__(self, status: int) -> None:
            self.status = status

    api.job_read_error = ApiException(403)
    assert k.poll(h) == "failed: reading Job gpuwarden-maint-1-a-0: HTTP 403"
    api.job_read_error = ApiException(503)
    assert k.poll(h) == "running"


def test_a_create_answering_409_adopts_the_job_and_one_of_another_node_is_refused() -> None:
    api = FakeKube()
    k = op(api)
    first = k.start(1, "a", 0)
    assert k.start(1, "a", 0) == first  # a restart before the handle was committed
    assert len(api.jobs) == 1 and len(api.job_creates) == 2
    api.jobs[("gpuwarden", "gpuwarden-maint-1-b-0")] = {"metadata": {"labels": {}}}
    with pytest.raises(BackendError, match="exists for another node"):
        k.start(1, "b", 0)


def test_a_create_the_server_did_not_answer_is_found_by_the_poll_or_started_again() -> None:
    api = FakeKube()
    k = op(api)
    api.silent.add("create_job")
    h = k.start(1, "a", 0)  # no exception: the poll decides
    api.silent.clear()
    assert k.poll(h) == "lost"  # it never arrived: the machine starts it again
    assert k.start(1, "a", 0) == h and k.poll(h) == "running"


def test_any_other_refused_create_fails_the_start() -> None:
    class Refusing(FakeKube):
        def create_job(self, namespace: str, body: dict[str, Any]) -> int:
            return 403

    with pytest.raises(BackendError, match=r"gpuwarden/gpuwarden-maint-1-a-0 for a: HTTP 403"):
        op(Refusing()).start(1, "a", 0)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (None, "needs a batch/v1 Job manifest"),
        (
            {**MANIFEST, "kind": "Pod"},
            "expected apiVersion batch/v1, kind Job; got 'batch/v1', 'Pod'",
        ),
        ({**MANIFEST, "apiVersion": "v1"}, "got 'v1', 'Job'"),
        ({**MANIFEST, "spec": {"template": {"spec": {}}}}, "at least one container"),
        ({**MANIFEST, "spec": "x"}, "at least one container"),
        ({**MANIFEST, "metadata": {"namespace": "Not_A_Namespace"}}, "is not a namespace name"),
        ("kind: Job\n  bad: [indent", "operation.job: not YAML"),
        (
            {
                **MANIFEST,
                "metadata": {"annotations": {"since": __import__("datetime").date(2026, 1, 1)}},
            },
            "not JSON-representable",
        ),
    ],
)
def test_a_manifest_that_is_not_one_batch_v1_job_is_refused_clearly(raw: Any, why: str) -> None:
    with pytest.raises(SpecError, match=r"^operation\.job: ") as e:
        kube_job(raw)
    assert why in str(e.value)


def test_a_manifest_may_come_as_yaml_text() -> None:
    import yaml

    assert kube_job(yaml.safe_dump(MANIFEST)) == MANIFEST


def test_make_refuses_a_kube_job_without_the_kubernetes_api(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs the Kubernetes backend"):
        make(Operation("kube_job", job=MANIFEST), tmp_path, None, "r")


# ------------------------------------------------------------------ the whole run, in memory
def kube_service(tmp_path: Path, api: FakeKube) -> Service:
    pol = tmp_path / "policy.yaml"
    pol.write_text(LIVE_POLICY)
    s = Settings(policy=pol, state_db=tmp_path / "state.db", webhook_token=TOKEN, tick_s=0.2,
                 backend="kubernetes")  # fmt: skip
    return build(s, clock=FakeClock(), backend=backend(api))


BODY = {"select": {"nodes": ["n1", "n2"]}, "wave_size": 2, "max_failures": 1,
        "operation": {"kind": "kube_job", "job": MANIFEST}}  # fmt: skip


def test_a_wave_runs_a_job_per_node_releases_the_done_one_and_keeps_the_failed_one_out(
    tmp_path: Path,
) -> None:
    api = FakeKube(*(node(f"n{i}") for i in range(1, 5)))  # a fleet budget of 2
    svc = kube_service(tmp_path, api)
    m = svc.maintenance
    assert m is not None
    spec, _waves, _ = m.plan(BODY)
    assert spec.operation.job["metadata"]["namespace"] == "gpuwarden"  # the policy's, written in
    assert api.dry_runs[0]["spec"]["template"]["spec"]["nodeName"] == "n1"
    run = m.start(BODY, "test")
    for _ in range(3):
        m.tick()
    names = {n for _, n in api.jobs}
    assert names == {"gpuwarden-maint-1-n1-1", "gpuwarden-maint-1-n2-1"}, names
    for name in names:  # bound to its node while the node is cordoned
        body = api.jobs[("gpuwarden", name)]
        assert api.nodes[body["spec"]["template"]["spec"]["nodeName"]]["spec"]["unschedulable"]
    api.job_condition("gpuwarden", "gpuwarden-maint-1-n1-1", "Complete")
    api.job_condition("gpuwarden", "gpuwarden-maint-1-n2-1", "Failed", "DeadlineExceeded",
                      "Job was active longer than specified deadline")  # fmt: skip
    for _ in range(3):
        m.tick()
    done = store.load(svc.journal, run.id)
    assert done is not None
    states = {n.node: (n.state, n.reason) for n in done.nodes}
    assert done.spec.operation == spec.operation  # the manifest as stored, read back
    assert states["n1"][0] == "done" and not api.nodes["n1"]["spec"].get("unschedulable")
    assert states["n2"][0] == "failed" and "DeadlineExceeded" in states["n2"][1]
    assert api.nodes["n2"]["spec"]["unschedulable"]  # kept out, in the fault path
    assert "n2" in svc.journal.held_nodes()
    assert len(api.job_creates) == 2  # one Job per node, polled, never made twice


def test_a_manifest_the_api_server_refuses_stops_the_plan_and_nothing_is_recorded(
    tmp_path: Path,
) -> None:
    api = FakeKube(node("n1"), node("n2"))
    api.dry_run = (
        422,
        'Job.batch "x" is invalid: spec.template.spec.containers[0].image: Required value',
    )
    svc = kube_service(tmp_path, api)
    assert svc.maintenance is not None
    with pytest.raises(SpecError, match=r"HTTP 422: .*image: Required value"):
        svc.maintenance.start(BODY, "test")
    api.dry_run = (201, "")
    api.silent.add("dry_run_create_job")
    with pytest.raises(SpecError, match="did not answer a dry-run create"):
        svc.maintenance.start(BODY, "test")
    assert store.ids(svc.journal) == [] and api.jobs == {}


async def test_a_kube_job_on_the_dry_run_backend_gets_a_400_and_records_nothing(
    svc_client: Any,
) -> None:
    from tests.remediation.helpers import AUTH

    svc, client = svc_client
    body = {**BODY, "select": {"nodes": "gpu-node-[001-002]"}}
    r = await client.post("/api/v1/maintenance", json=body, headers=AUTH)
    assert r.status == 400
    assert "kube_job: only with --backend kubernetes" in (await r.json())["error"]
    bad = {**body, "operation": {"kind": "kube_job", "job": {"apiVersion": "v1", "kind": "Pod"}}}
    r = await client.post("/api/v1/maintenance", json=bad, headers=AUTH)
    assert r.status == 400 and "expected apiVersion batch/v1" in (await r.json())["error"]
    assert store.ids(svc.journal) == []


def test_the_cli_sends_the_manifest_file_and_refuses_one_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    f = tmp_path / "upgrade.yaml"
    f.write_text(yaml.safe_dump(MANIFEST))
    args = cli.parser().parse_args(["start", "--nodes", "n[1-2]", "--kube-job", str(f)])
    req = cli.request_body(args)
    assert req["operation"] == {"kind": "kube_job", "job": MANIFEST, "timeout_s": 3600.0}
    unreachable = ["--url", "http://127.0.0.1:9", "plan", "--nodes", "n1", "--kube-job"]
    assert cli.main([*unreachable, str(tmp_path / "missing.yaml")]) == 2
    err = capsys.readouterr().err
    assert "missing.yaml: No such file or directory" in err and "cannot reach" not in err
    f.write_text("kind: Job\n  bad: [indent")
    assert cli.main([*unreachable, str(f)]) == 2
    err = capsys.readouterr().err
    assert f"--kube-job {f}: not YAML" in err and "cannot reach" not in err
    f.write_text(yaml.safe_dump({**MANIFEST, "metadata": {"annotations": {"since": "x"}}}).replace(
        "since: x", "since: 2026-01-01"))  # fmt: skip
    assert cli.main([*unreachable, str(f)]) == 2
    assert "not JSON serializable (quote it in the YAML)" in capsys.readouterr().err


def test_a_manifests_own_namespace_is_kept_in_the_plan_and_the_dry_run(tmp_path: Path) -> None:
    api = FakeKube(node("n1"), node("n2"))
    svc = kube_service(tmp_path, api)
    assert svc.maintenance is not None
    own = {**MANIFEST, "metadata": {**MANIFEST["metadata"], "namespace": "infra-jobs"}}
    spec, _, _ = svc.maintenance.plan({**BODY, "operation": {"kind": "kube_job", "job": own}})
    assert spec.operation.job["metadata"]["namespace"] == "infra-jobs"
    assert api.dry_runs[-1]["metadata"]["namespace"] == "infra-jobs"
    bare = {k: v for k, v in MANIFEST.items() if k != "metadata"}
    spec, _, _ = svc.maintenance.plan({**BODY, "operation": {"kind": "kube_job", "job": bare}})
    assert spec.operation.job["metadata"] == {"namespace": "gpuwarden"}
