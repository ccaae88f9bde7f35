"""The lab itself: the control plane is the real one, and the kubelet stand-in does the
kubelet's part (so other tests can trust what they see)."""

from __future__ import annotations

import pytest

from tests.kubelab import ApiError, KubeLab, Run, versions

pytestmark = pytest.mark.real


def test_each_lab_serves_the_version_it_was_built_as(any_kube_lab: KubeLab) -> None:
    assert any_kube_lab.http.get("/version")["gitVersion"] == any_kube_lab.version
    assert {any_kube_lab.version} <= {versions()["KUBE_VERSION"], versions()["OLDEST_KUBE_VERSION"]}


def test_a_pod_bound_to_a_lab_node_runs_and_its_deletion_completes(kube_lab: KubeLab) -> None:
    ns, node = kube_lab.namespace(), kube_lab.add_node()
    pod = kube_lab.run_pod(ns, node)
    assert pod["status"]["containerStatuses"][0]["state"]["running"]
    kube_lab.http.delete(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}")
    from gpuwarden.processes import wait_until

    wait_until(
        lambda: (
            kube_lab.http.get_or_none(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}")
            is None
        ),
        30,
        0.1,
        "pod gone",
    )


def test_a_scripted_pod_ends_with_its_exit_code_and_its_log_is_served(kube_lab: KubeLab) -> None:
    ns, node = kube_lab.namespace(), kube_lab.add_node()
    with kube_lab.kubelet.scripted(lambda pod: Run(log="all good\n", exit_code=3)):
        kube_lab.run_pod(
            ns, node, name="job", wait_running=False, extra_spec={"restartPolicy": "Never"}
        )
        pod = kube_lab.wait_phase(ns, "job", "Failed")
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    assert kube_lab.kube_api().read_pod_log(ns, "job") == "all good\n"


def test_a_pdb_the_disruption_controller_computed_blocks_an_eviction_with_the_server_s_reason(
    any_kube_lab: KubeLab,
) -> None:
    kube_lab = any_kube_lab
    ns, node = kube_lab.namespace(), kube_lab.add_node()
    kube_lab.run_pod(ns, node, name="a", labels={"app": "x"})
    kube_lab.pdb(ns, {"app": "x"}, minAvailable=1)
    with pytest.raises(ApiError) as e:
        kube_lab.http.post(
            f"/api/v1/namespaces/{ns}/pods/a/eviction",
            {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": "a", "namespace": ns},
            },
        )
    assert e.value.status == 429
    assert "disruption budget" in str(e.value.body)


def test_a_service_account_is_only_allowed_what_its_role_grants(kube_lab: KubeLab) -> None:
    ns = kube_lab.namespace()
    token = kube_lab.service_account_token(
        ns, "reader", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    )
    as_reader = kube_lab.as_user(token)
    mark = kube_lab.audit_mark()
    as_reader.get(f"/api/v1/namespaces/{ns}/pods")
    with pytest.raises(ApiError) as e:
        as_reader.get(f"/api/v1/namespaces/{ns}/secrets")
    assert e.value.status == 403
    events = kube_lab.audit_since(mark, user=f"system:serviceaccount:{ns}:reader")
    seen = {
        (ev["verb"], ev["objectRef"]["resource"], ev["responseStatus"]["code"]) for ev in events
    }
    assert seen == {("list", "pods", 200), ("list", "secrets", 403)}
