"""OfficialKubeApi, the adapter over the official ``kubernetes`` client, pinned at the wire.

The official client runs for real (CoreV1Api, CustomObjectsApi, BatchV1Api, ApiClient:
the URL, query, headers and body it builds); only its HTTP transport, the
``RESTClientObject`` whose ``request`` sends one exchange, is a hand-written fake that
records what would go out and answers with real ``urllib3`` responses or raises real
``urllib3`` errors. So what is sent (paths, ``dryRun``, ``fieldManager``, content types,
the timeout, the Eviction body) and how each answer is mapped (a refusal is a status or an
``ApiException``, silence is ``Unavailable``) are pinned without an API server. The same
adapter against real HTTP: test_kubernetes.py (kmock), test_kube_service_real.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import kubernetes
import pytest
import urllib3
from kubernetes.client import ApiException
from kubernetes.client.rest import RESTResponse
from urllib3.exceptions import MaxRetryError, NewConnectionError, ProtocolError

from remediation.backends.base import Unavailable
from remediation.backends.kubeapi import OfficialKubeApi

HOST = "https://kube.test:6443"
TOKEN = "Bearer sa-token"
GROUP, PLURAL = "resource.k8s.io", "devicetaintrules"


@dataclass
class Sent:
    """One request as it would leave the client."""

    method: str
    host: str  # scheme://host:port
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # names lower-cased: HTTP header names are case-insensitive
    body: Any
    timeout: Any


@dataclass
class Wire:
    """The official client's HTTP transport (``ApiClient.rest_client``): records each
    request and answers from ``routes`` ((method, path) -> (status, body)), else 200 ``{}``;
    ``failure``: raised instead of answering (a refused connection, a reset)."""

    routes: dict[tuple[str, str], tuple[int, bytes]] = field(default_factory=dict)
    failure: Exception | None = None
    sent: list[Sent] = field(default_factory=list)

    def answer(self, method: str, path: str, status: int, body: Any = b"") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.routes[(method, path)] = (status, data)

    def request(
        self,
        method: str,
        url: str,
        headers: dict[str, str] | None = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> RESTResponse:
        method = method.upper()  # as the real RESTClientObject.request does
        parts = urlsplit(url)
        headers = {k.lower(): v for k, v in (headers or {}).items()}
        where = f"{parts.scheme}://{parts.netloc}"
        query = parse_qs(parts.query)
        self.sent.append(Sent(method, where, parts.path, query, headers, body, _request_timeout))
        if self.failure is not None:
            raise self.failure
        status, data = self.routes.get((method, parts.path), (200, b"{}"))
        resp = urllib3.HTTPResponse(
            body=data, status=status, reason="Reason", preload_content=True,
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        return RESTResponse(resp)

    @property
    def last(self) -> Sent:
        return self.sent[-1]


def adapter(wire: Wire, timeout: float | None = None) -> OfficialKubeApi:
    cfg = kubernetes.client.Configuration(host=HOST)
    cfg.api_key = {"authorization": TOKEN}
    client = kubernetes.client.ApiClient(cfg)
    client.rest_client = wire  # type: ignore[assignment]
    core = kubernetes.client.CoreV1Api(client)
    return OfficialKubeApi(core) if timeout is None else OfficialKubeApi(core, timeout)


def status_body(reason: str, message: str, *causes: str) -> dict[str, Any]:
    return {
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
        "message": message, "details": {"causes": [{"message": c} for c in causes]},
    }  # fmt: skip


# --- what every call sends, and silence -------------------------------------------------


def test_every_call_is_bounded_by_the_timeout_it_was_built_with() -> None:
    wire = Wire()
    api = adapter(wire, timeout=2.5)
    api.list_nodes()
    api.evict("ml", "p")
    api.served_versions(GROUP, PLURAL)
    api.create_job("ml", {"kind": "Job"})
    api.read_pod_log("ml", "p")
    assert [s.timeout for s in wire.sent] == [2.5] * len(wire.sent)


def test_an_adapter_built_without_a_timeout_waits_ten_seconds_per_call() -> None:
    wire = Wire()
    adapter(wire).list_nodes()
    assert wire.last.timeout == 10.0


def test_a_refused_connection_is_unavailable_naming_the_call_the_wait_and_the_cause() -> None:
    wire = Wire()
    refused = NewConnectionError("conn", "Failed to establish a new connection: refused")  # type: ignore[arg-type]
    wire.failure = MaxRetryError(None, "/api/v1/nodes", refused)  # type: ignore[arg-type]
    with pytest.raises(Unavailable) as e:
        adapter(wire, timeout=3).list_nodes()
    assert str(e.value) == (
        "Kubernetes API server did not answer list_node within 3 s: "
        "NewConnectionError: conn: Failed to establish a new connection: refused"
    )


def test_a_reset_connection_without_a_reason_is_unavailable_with_the_error_itself() -> None:
    wire = Wire()
    wire.failure = ConnectionResetError(104, "Connection reset by peer")
    with pytest.raises(Unavailable) as e:
        adapter(wire, timeout=0.5).read_node("gpu-node-001")
    assert str(e.value) == (
        "Kubernetes API server did not answer read_node within 0.5 s: "
        "ConnectionResetError: [Errno 104] Connection reset by peer"
    )


def test_a_write_that_met_a_dropped_connection_is_unavailable_not_a_refusal() -> None:
    wire = Wire()
    wire.failure = ProtocolError("Connection aborted.", ConnectionResetError("reset"))
    with pytest.raises(Unavailable, match="did not answer create_namespaced_pod_eviction"):
        adapter(wire).evict("ml", "train-0")


def test_a_refusal_is_not_unavailable_it_is_the_servers_answer() -> None:
    wire = Wire()
    wire.answer("GET", "/api/v1/nodes", 403, status_body("Forbidden", "nodes is forbidden"))
    with pytest.raises(ApiException) as e:
        adapter(wire).list_nodes()
    assert e.value.status == 403
    assert not isinstance(e.value, Unavailable)


# --- nodes and pods ---------------------------------------------------------------------


def test_nodes_are_listed_as_the_servers_dicts() -> None:
    wire = Wire()
    wire.answer("GET", "/api/v1/nodes", 200, {"items": [{"metadata": {"name": "n1"}}]})
    assert adapter(wire).list_nodes() == [{"metadata": {"name": "n1"}}]
    wire.answer("GET", "/api/v1/nodes", 200, {"items": None})
    assert adapter(wire).list_nodes() == []


def test_a_missing_node_reads_as_none_and_another_refusal_is_raised() -> None:
    wire = Wire()
    wire.answer("GET", "/api/v1/nodes/gone", 404, status_body("NotFound", "not found"))
    wire.answer("GET", "/api/v1/nodes/secret", 403, status_body("Forbidden", "no"))
    api = adapter(wire)
    assert api.read_node("gone") is None
    with pytest.raises(ApiException) as e:
        api.read_node("secret")
    assert e.value.status == 403


def test_a_node_patch_answered_with_an_empty_body_is_accepted() -> None:
    wire = Wire()
    wire.answer("PATCH", "/api/v1/nodes/n1", 200, b"")
    adapter(wire).patch_node("n1", {"spec": {"unschedulable": True}})
    assert (wire.last.method, wire.last.body) == ("PATCH", {"spec": {"unschedulable": True}})


def test_pods_of_one_node_are_asked_for_by_field_selector_and_filtered_again() -> None:
    wire = Wire()
    wire.answer("GET", "/api/v1/pods", 200, {"items": [
        {"metadata": {"name": "a"}, "spec": {"nodeName": "gpu-node-001"}},
        {"metadata": {"name": "b"}, "spec": {"nodeName": "gpu-node-002"}},  # selector ignored
        {"metadata": {"name": "c"}},
    ]})  # fmt: skip
    api = adapter(wire)
    assert [p["metadata"]["name"] for p in api.list_pods("gpu-node-001")] == ["a"]
    assert wire.last.query == {"fieldSelector": ["spec.nodeName=gpu-node-001"]}
    assert [p["metadata"]["name"] for p in api.list_pods(None)] == ["a", "b", "c"]
    assert wire.last.query == {}


def test_a_pod_is_read_by_namespace_and_name_and_reads_as_none_when_gone() -> None:
    wire = Wire()
    api = adapter(wire)
    wire.answer("GET", "/api/v1/namespaces/ml/pods/w-0", 200, {"metadata": {"name": "w-0"}})
    assert api.read_pod("ml", "w-0") == {"metadata": {"name": "w-0"}}
    wire.answer("GET", "/api/v1/namespaces/ml/pods/w-0", 404, status_body("NotFound", "x"))
    assert api.read_pod("ml", "w-0") is None


def test_a_pod_patch_sends_the_body_to_the_pod() -> None:
    wire = Wire()
    body = {"metadata": {"annotations": {"gpuwarden.io/checkpoint": "requested"}}}
    adapter(wire).patch_pod("ml", "w-0", body)
    s = wire.last
    assert (s.method, s.path, s.body) == ("PATCH", "/api/v1/namespaces/ml/pods/w-0", body)


def test_pods_by_label_are_asked_for_with_the_label_selector() -> None:
    wire = Wire()
    wire.answer("GET", "/api/v1/namespaces/gpuwarden/pods", 200, {"items": [{"n": 1}]})
    assert adapter(wire).list_pods_by_label("gpuwarden", "job-name=val-1") == [{"n": 1}]
    assert wire.last.query == {"labelSelector": ["job-name=val-1"]}


def test_a_pod_log_is_text_with_bad_bytes_replaced_and_an_empty_log_is_empty() -> None:
    wire = Wire()
    path = "/api/v1/namespaces/ml/pods/p/log"
    wire.answer("GET", path, 200, b"dcgmi diag \xff passed\n")
    api = adapter(wire)
    assert api.read_pod_log("ml", "p") == "dcgmi diag \ufffd passed\n"
    wire.answer("GET", path, 200, b"")
    assert api.read_pod_log("ml", "p") == ""


def test_a_pod_delete_returns_the_status_404_when_already_gone() -> None:
    wire = Wire()
    api = adapter(wire)
    assert api.delete_pod("ml", "w-0") == 200
    assert (wire.last.method, wire.last.path) == ("DELETE", "/api/v1/namespaces/ml/pods/w-0")
    wire.answer("DELETE", "/api/v1/namespaces/ml/pods/w-0", 404, status_body("NotFound", "x"))
    assert api.delete_pod("ml", "w-0") == 404


# --- eviction ---------------------------------------------------------------------------


def test_an_eviction_posts_a_policy_v1_eviction_naming_the_pod() -> None:
    wire = Wire()
    out = adapter(wire).evict("ml", "train-0")
    assert out.status == 201 and out.done
    assert (wire.last.method, wire.last.path) == (
        "POST", "/api/v1/namespaces/ml/pods/train-0/eviction",
    )  # fmt: skip
    assert wire.last.body == {
        "apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": "train-0", "namespace": "ml"},
    }  # fmt: skip


def test_a_budget_refusal_is_an_eviction_with_the_servers_reason_message_and_causes() -> None:
    wire = Wire()
    wire.answer("POST", "/api/v1/namespaces/ml/pods/train-0/eviction", 429, status_body(
        "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.",
        "The disruption budget train needs 4 healthy pods and has 4 currently",
    ))  # fmt: skip
    out = adapter(wire).evict("ml", "train-0")
    assert (out.status, out.reason, out.done) == (429, "TooManyRequests", False)
    assert out.message == "Cannot evict pod as it would violate the pod's disruption budget."
    assert out.causes == ("The disruption budget train needs 4 healthy pods and has 4 currently",)


# --- discovery --------------------------------------------------------------------------


def discovery(wire: Wire, *versions: tuple[str, list[str]]) -> None:
    wire.answer("GET", f"/apis/{GROUP}", 200,
                {"versions": [{"version": v} for v, _ in versions]})  # fmt: skip
    for v, plurals in versions:
        wire.answer("GET", f"/apis/{GROUP}/{v}", 200,
                    {"resources": [{"name": p} for p in plurals]})  # fmt: skip


def test_served_versions_are_those_whose_resource_list_has_the_plural_in_server_order() -> None:
    wire = Wire()
    discovery(wire, ("v1", ["resourceslices"]), ("v1beta2", [PLURAL]), ("v1alpha3", [PLURAL]))
    assert adapter(wire).served_versions(GROUP, PLURAL) == ["v1beta2", "v1alpha3"]


def test_discovery_gets_carry_the_token_and_ask_for_json() -> None:
    wire = Wire()
    discovery(wire, ("v1", [PLURAL]))
    adapter(wire).served_versions(GROUP, PLURAL)
    assert [(s.method, s.path) for s in wire.sent] == [
        ("GET", f"/apis/{GROUP}"), ("GET", f"/apis/{GROUP}/v1"),
    ]  # fmt: skip
    for s in wire.sent:
        assert s.headers["accept"] == "application/json"
        assert s.headers["authorization"] == TOKEN


def test_a_group_not_served_has_no_versions() -> None:
    wire = Wire()
    wire.answer("GET", f"/apis/{GROUP}", 404, status_body("NotFound", "404 page not found"))
    assert adapter(wire).served_versions(GROUP, PLURAL) == []
    wire.answer("GET", f"/apis/{GROUP}", 200, b"")  # an empty answer: nothing served
    assert adapter(wire).served_versions(GROUP, PLURAL) == []


def test_a_version_the_server_lists_but_does_not_serve_is_skipped() -> None:
    wire = Wire()
    discovery(wire, ("v1", [PLURAL]), ("v1beta2", [PLURAL]))
    wire.answer("GET", f"/apis/{GROUP}/v1beta2", 404, status_body("NotFound", "gone"))
    assert adapter(wire).served_versions(GROUP, PLURAL) == ["v1"]


def test_a_version_entry_without_a_name_is_skipped_without_a_request() -> None:
    wire = Wire()
    wire.answer("GET", f"/apis/{GROUP}", 200, {"versions": [{"groupVersion": "x"}]})
    assert adapter(wire).served_versions(GROUP, PLURAL) == []
    assert [s.path for s in wire.sent] == [f"/apis/{GROUP}"]


@pytest.mark.parametrize("status", [300, 403, 503])
def test_a_discovery_answer_that_is_neither_a_listing_nor_404_is_raised_with_path_and_body(
    status: int,
) -> None:
    wire = Wire()
    wire.answer("GET", f"/apis/{GROUP}", status, b"x" * 300)
    with pytest.raises(ApiException) as e:
        adapter(wire).served_versions(GROUP, PLURAL)
    assert e.value.status == status
    assert e.value.reason == f"GET /apis/{GROUP}: b'{'x' * 200}'"


def test_a_silent_discovery_is_unavailable_naming_the_path() -> None:
    wire = Wire()
    wire.failure = MaxRetryError(None, "/apis", ProtocolError("Connection aborted."))  # type: ignore[arg-type]
    with pytest.raises(Unavailable) as e:
        adapter(wire, timeout=4).served_versions(GROUP, PLURAL)
    assert str(e.value) == (
        f"Kubernetes API server did not answer GET /apis/{GROUP} within 4 s: "
        "ProtocolError: Connection aborted."
    )


# --- node status and events -------------------------------------------------------------


def test_node_status_is_a_strategic_merge_patch_by_the_gpuwarden_field_manager() -> None:
    wire = Wire()
    body = {"status": {"conditions": [{"type": "GpuHealthy", "status": "False"}]}}
    adapter(wire).patch_node_status("n1", body)
    s = wire.last
    assert (s.method, s.path, s.body) == ("PATCH", "/api/v1/nodes/n1/status", body)
    assert s.query == {"fieldManager": ["gpuwarden"]}
    assert s.headers["content-type"] == "application/strategic-merge-patch+json"


def test_an_event_is_created_by_the_gpuwarden_field_manager_and_a_refusal_is_its_status() -> None:
    wire = Wire()
    api = adapter(wire)
    event = {"metadata": {"name": "n1.abc"}, "involvedObject": {"kind": "Node", "name": "n1"},
             "reason": "Cordoned"}  # fmt: skip
    assert api.create_event("default", event) == 201
    assert (wire.last.method, wire.last.path) == ("POST", "/api/v1/namespaces/default/events")
    assert wire.last.query == {"fieldManager": ["gpuwarden"]}
    assert wire.last.body == event
    wire.answer("POST", "/api/v1/namespaces/default/events", 403, status_body("Forbidden", "x"))
    assert api.create_event("default", event) == 403


def test_an_event_is_merge_patched_and_a_404_says_it_expired() -> None:
    wire = Wire()
    api = adapter(wire)
    assert api.patch_event("default", "n1.abc", {"count": 2}) == 200
    s = wire.last
    assert (s.method, s.path, s.body) == ("PATCH", "/api/v1/namespaces/default/events/n1.abc",
                                          {"count": 2})  # fmt: skip
    assert s.query == {"fieldManager": ["gpuwarden"]}
    assert s.headers["content-type"] == "application/merge-patch+json"
    wire.answer("PATCH", "/api/v1/namespaces/default/events/n1.abc", 404,
                status_body("NotFound", "x"))  # fmt: skip
    assert api.patch_event("default", "n1.abc", {"count": 3}) == 404


# --- custom objects ---------------------------------------------------------------------

NR = ("remediation.medik8s.io", "v1alpha1")
NR_PATH = "/apis/remediation.medik8s.io/v1alpha1"


def test_custom_objects_are_listed_in_every_namespace_and_an_absent_api_is_empty() -> None:
    wire = Wire()
    api = adapter(wire)
    wire.answer("GET", f"{NR_PATH}/noderemediations", 200, {"items": [{"n": 1}]})
    assert api.list_custom(*NR, "noderemediations") == [{"n": 1}]
    wire.answer("GET", f"{NR_PATH}/noderemediations", 404, status_body("NotFound", "x"))
    assert api.list_custom(*NR, "noderemediations") == []
    wire.answer("GET", f"{NR_PATH}/noderemediations", 403, status_body("Forbidden", "x"))
    with pytest.raises(ApiException) as e:
        api.list_custom(*NR, "noderemediations")
    assert e.value.status == 403


def test_a_custom_object_create_returns_201_or_the_refusals_status() -> None:
    wire = Wire()
    api = adapter(wire)
    path = f"{NR_PATH}/namespaces/ops/noderemediations"
    assert api.create_custom(*NR, "ops", "noderemediations", {"metadata": {"name": "n1"}}) == 201
    assert (wire.last.method, wire.last.path) == ("POST", path)
    assert wire.last.body == {"metadata": {"name": "n1"}}
    wire.answer("POST", path, 409, status_body("AlreadyExists", "x"))
    assert api.create_custom(*NR, "ops", "noderemediations", {"metadata": {"name": "n1"}}) == 409


def test_a_custom_object_delete_ignores_404_and_raises_any_other_refusal() -> None:
    wire = Wire()
    api = adapter(wire)
    path = f"{NR_PATH}/namespaces/ops/noderemediations/n1"
    api.delete_custom(*NR, "ops", "noderemediations", "n1")
    assert (wire.last.method, wire.last.path) == ("DELETE", path)
    wire.answer("DELETE", path, 404, status_body("NotFound", "x"))
    api.delete_custom(*NR, "ops", "noderemediations", "n1")
    wire.answer("DELETE", path, 403, status_body("Forbidden", "x"))
    with pytest.raises(ApiException) as e:
        api.delete_custom(*NR, "ops", "noderemediations", "n1")
    assert e.value.status == 403


RULES = f"/apis/{GROUP}/v1/{PLURAL}"


def test_a_cluster_object_create_returns_201_or_409_when_it_exists() -> None:
    wire = Wire()
    api = adapter(wire)
    assert api.create_cluster_custom(GROUP, "v1", PLURAL, {"metadata": {"name": "r"}}) == 201
    assert (wire.last.method, wire.last.path, wire.last.body) == (
        "POST", RULES, {"metadata": {"name": "r"}},
    )  # fmt: skip
    wire.answer("POST", RULES, 409, status_body("AlreadyExists", "x"))
    assert api.create_cluster_custom(GROUP, "v1", PLURAL, {"metadata": {"name": "r"}}) == 409


def test_a_cluster_object_reads_as_none_when_absent() -> None:
    wire = Wire()
    api = adapter(wire)
    wire.answer("GET", f"{RULES}/r", 200, {"metadata": {"name": "r"}})
    assert api.read_cluster_custom(GROUP, "v1", PLURAL, "r") == {"metadata": {"name": "r"}}
    wire.answer("GET", f"{RULES}/r", 404, status_body("NotFound", "x"))
    assert api.read_cluster_custom(GROUP, "v1", PLURAL, "r") is None


def test_a_cluster_object_patch_is_a_json_merge_patch_and_a_stale_version_is_409() -> None:
    wire = Wire()
    api = adapter(wire)
    body = {"metadata": {"resourceVersion": "7"}, "spec": {"taint": {"effect": "NoExecute"}}}
    assert api.patch_cluster_custom(GROUP, "v1", PLURAL, "r", body) == 200
    s = wire.last
    assert (s.method, s.path, s.body) == ("PATCH", f"{RULES}/r", body)
    assert s.headers["content-type"] == "application/merge-patch+json"
    wire.answer("PATCH", f"{RULES}/r", 409, status_body("Conflict", "x"))
    assert api.patch_cluster_custom(GROUP, "v1", PLURAL, "r", body) == 409


def test_a_cluster_object_delete_names_the_version_only_when_given_and_ignores_404() -> None:
    wire = Wire()
    api = adapter(wire)
    api.delete_cluster_custom(GROUP, "v1", PLURAL, "r")
    assert (wire.last.method, wire.last.path, wire.last.body) == ("DELETE", f"{RULES}/r", {})
    api.delete_cluster_custom(GROUP, "v1", PLURAL, "r", resource_version="42")
    assert wire.last.body == {"preconditions": {"resourceVersion": "42"}}
    wire.answer("DELETE", f"{RULES}/r", 404, status_body("NotFound", "x"))
    api.delete_cluster_custom(GROUP, "v1", PLURAL, "r")
    wire.answer("DELETE", f"{RULES}/r", 409, status_body("Conflict", "changed"))
    with pytest.raises(ApiException) as e:
        api.delete_cluster_custom(GROUP, "v1", PLURAL, "r", resource_version="42")
    assert e.value.status == 409


# --- jobs -------------------------------------------------------------------------------

JOBS = "/apis/batch/v1/namespaces/gpuwarden/jobs"


def test_a_job_create_returns_201_or_the_refusals_status() -> None:
    wire = Wire()
    api = adapter(wire)
    assert api.create_job("gpuwarden", {"metadata": {"name": "val-1"}}) == 201
    assert (wire.last.method, wire.last.path, wire.last.query) == ("POST", JOBS, {})
    assert wire.last.body == {"metadata": {"name": "val-1"}}
    wire.answer("POST", JOBS, 409, status_body("AlreadyExists", "x"))
    assert api.create_job("gpuwarden", {"metadata": {"name": "val-1"}}) == 409


def test_a_dry_run_job_create_is_sent_with_dry_run_all_and_stores_nothing() -> None:
    wire = Wire()
    body = {"metadata": {"name": "val-1"}}
    assert adapter(wire).dry_run_create_job("gpuwarden", body) == (201, "")
    s = wire.last
    assert (s.method, s.path, s.body) == ("POST", JOBS, body)
    assert s.query == {"dryRun": ["All"]}


def test_a_refused_dry_run_returns_the_status_and_the_servers_message() -> None:
    wire = Wire()
    wire.answer("POST", JOBS, 403, status_body(
        "Forbidden", 'jobs.batch is forbidden: User "system:serviceaccount:x" cannot create',
    ))  # fmt: skip
    assert adapter(wire).dry_run_create_job("gpuwarden", {}) == (
        403, 'jobs.batch is forbidden: User "system:serviceaccount:x" cannot create',
    )  # fmt: skip


def test_a_refused_dry_run_without_a_message_returns_the_http_reason() -> None:
    wire = Wire()
    wire.answer("POST", JOBS, 404, {"kind": "Status"})
    assert adapter(wire).dry_run_create_job("gpuwarden", {}) == (404, "Reason")
    wire.answer("POST", JOBS, 502, b"<html>bad gateway</html>")  # a proxy's page
    assert adapter(wire).dry_run_create_job("gpuwarden", {}) == (502, "Reason")
    wire.answer("POST", JOBS, 500, b"")
    assert adapter(wire).dry_run_create_job("gpuwarden", {}) == (500, "Reason")


def test_a_job_reads_as_none_when_absent() -> None:
    wire = Wire()
    api = adapter(wire)
    wire.answer("GET", f"{JOBS}/val-1", 200, {"status": {"succeeded": 1}})
    assert api.read_job("gpuwarden", "val-1") == {"status": {"succeeded": 1}}
    wire.answer("GET", f"{JOBS}/val-1", 404, status_body("NotFound", "x"))
    assert api.read_job("gpuwarden", "val-1") is None


def test_a_job_is_deleted_with_its_pods_in_the_background_and_404_is_ignored() -> None:
    wire = Wire()
    api = adapter(wire)
    api.delete_job("gpuwarden", "val-1")
    s = wire.last
    assert (s.method, s.path) == ("DELETE", f"{JOBS}/val-1")
    assert s.query == {"propagationPolicy": ["Background"]}
    wire.answer("DELETE", f"{JOBS}/val-1", 404, status_body("NotFound", "x"))
    api.delete_job("gpuwarden", "val-1")
    wire.answer("DELETE", f"{JOBS}/val-1", 403, status_body("Forbidden", "x"))
    with pytest.raises(ApiException) as e:
        api.delete_job("gpuwarden", "val-1")
    assert e.value.status == 403
