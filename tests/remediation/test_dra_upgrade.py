"""The DeviceTaintRule API's version when the server changes under gpuwarden (an upgrade from
the alpha to the beta, a feature gate turned off): discovery is asked once and cached, asked
again only when an answer at the cached version says the rules are not there; a rule made at
the old version is still found, listed and released at the new one, and a server serving
none says why in words an operator can act on. On an in-memory API whose rules answer only
at the versions it serves (as the API server: 404, an empty list). The kmock version of the
isolate path is in test_dra_discovery.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from remediation.backends import dra
from remediation.backends.base import BackendError
from remediation.backends.kubeapi import Eviction

N1 = "gpu-node-001"
Obj = dict[str, Any]


class Upgrading:
    """Rules stored whatever their version (etcd keeps one object), readable only at a
    version the server serves now; every discovery, read, list and create counted."""

    def __init__(self, *served: str) -> None:
        self.served = list(served)
        self.rules: dict[str, Obj] = {}
        self.discoveries = 0
        self.calls: list[tuple[str, str]] = []  # (op, version)
        self.create_404 = 0  # the next creates answered 404 whatever is served
        devs = [{"name": f"gpu-{g}", "attributes": {"index": {"int": g}}} for g in range(4)]
        self.slices = [{"spec": {"nodeName": N1, "driver": dra.DRIVER, "pool": {"name": N1},
                                 "devices": devs}}]  # fmt: skip

    def served_versions(self, group: str, plural: str) -> list[str]:
        self.discoveries += 1
        return list(self.served) if (group, plural) == (dra.GROUP, dra.RULES) else []

    def list_custom(self, group: str, version: str, plural: str) -> list[Obj]:
        if plural == "resourceslices":
            return copy.deepcopy(self.slices)
        if plural == "resourceclaims":
            return []
        assert (group, plural) == (dra.GROUP, dra.RULES)
        self.calls.append(("list", version))
        return [copy.deepcopy(r) for r in self.rules.values()] if version in self.served else []

    def create_cluster_custom(self, group: str, version: str, plural: str, body: Obj) -> int:
        assert (group, plural) == (dra.GROUP, dra.RULES)
        self.calls.append(("create", version))
        if self.create_404 or version not in self.served:
            self.create_404 = max(0, self.create_404 - 1)
            return 404
        name = body["metadata"]["name"]
        if name in self.rules:
            return 409
        self.rules[name] = {**copy.deepcopy(body), "metadata": {**body["metadata"],
                                                                "resourceVersion": "1"}}  # fmt: skip
        return 201

    def read_cluster_custom(self, group: str, version: str, plural: str, name: str) -> Obj | None:
        assert (group, plural) == (dra.GROUP, dra.RULES)
        self.calls.append(("read", version))
        return copy.deepcopy(self.rules.get(name)) if version in self.served else None

    def delete_cluster_custom(self, group: str, version: str, plural: str, name: str,
                              resource_version: str = "") -> None:  # fmt: skip
        self.calls.append(("delete", version))
        if version in self.served:
            self.rules.pop(name, None)

    def evict(self, namespace: str, name: str) -> Eviction:
        return Eviction(201)


def isolation(api: Upgrading) -> dra.DraIsolation:
    return dra.DraIsolation(api)  # type: ignore[arg-type]


def upgraded(before: str, after: str) -> tuple[Upgrading, dra.DraIsolation]:
    """A rule for GPU 1 made at ``before``; the server then serves only ``after``."""
    api = Upgrading(before)
    iso = isolation(api)
    iso.isolate(N1, "1", "xid 79", "NoExecute")
    api.served = [after]
    api.calls.clear()
    return api, iso


def test_discovery_is_asked_once_and_the_version_cached() -> None:
    api = Upgrading("v1beta2", "v1alpha3")
    iso = isolation(api)
    iso.isolate(N1, "0", "xid", "NoExecute")
    iso.isolate(N1, "1", "xid", "NoExecute")
    iso.release(N1, "0")
    assert api.discoveries == 1
    assert {v for _, v in api.calls} == {"v1beta2"}


def test_a_rule_made_before_an_upgrade_is_released_at_the_new_version() -> None:
    api, iso = upgraded("v1alpha3", "v1beta2")
    assert iso.release(N1, "1") == f"DeviceTaintRule gpuwarden-{N1}-gpu1 deleted"
    assert api.rules == {}
    # the list: the rules of the GPU's MIG devices, released with it (none here)
    assert api.calls == [("read", "v1alpha3"), ("read", "v1beta2"), ("list", "v1beta2"),
                         ("delete", "v1beta2")]  # fmt: skip


def test_the_rules_made_before_an_upgrade_are_listed_and_released_with_their_node() -> None:
    api, iso = upgraded("v1alpha3", "v1")
    assert [r["metadata"]["name"] for r in iso.active()] == [f"gpuwarden-{N1}-gpu1"]
    assert iso.release_node(N1) == ["1"]
    assert api.rules == {}


def test_a_rule_absent_at_a_version_still_served_is_read_once() -> None:
    api = Upgrading("v1")
    iso = isolation(api)
    assert iso.release(N1, "2") == f"DeviceTaintRule gpuwarden-{N1}-gpu2 already gone"
    assert api.calls == [("read", "v1"), ("list", "v1")]  # read once; the list: MIG rules


def test_no_rules_at_a_version_still_served_are_listed_once() -> None:
    api = Upgrading("v1")
    iso = isolation(api)
    assert iso.release_node(N1) == []
    assert api.calls == [("list", "v1")]


def test_rules_listed_at_the_cached_version_are_not_listed_again() -> None:
    api = Upgrading("v1")
    iso = isolation(api)
    iso.isolate(N1, "1", "xid", "NoExecute")
    api.calls.clear()
    assert iso.release_node(N1) == ["1"]
    assert api.calls == [("list", "v1"), ("delete", "v1")]


def test_a_create_met_by_404_after_an_upgrade_is_made_at_the_new_version_with_the_reason() -> None:
    api = Upgrading("v1alpha3")
    iso = isolation(api)
    assert iso.version() == "v1alpha3"
    api.served = ["v1beta2"]
    out = iso.isolate(N1, "2", "row remap failed", "NoExecute")
    assert out == "gpu-2 tainted NoExecute; the control plane evicts 0 pod(s)"
    rule = api.rules[f"gpuwarden-{N1}-gpu2"]
    assert rule["apiVersion"] == "resource.k8s.io/v1beta2"
    assert rule["metadata"]["annotations"]["gpuwarden.io/reason"] == "row remap failed"
    assert rule["spec"]["deviceSelector"] == {"driver": dra.DRIVER, "pool": N1, "device": "gpu-2"}
    assert api.calls[:2] == [("create", "v1alpha3"), ("create", "v1beta2")]


def test_a_create_met_by_404_twice_at_a_version_still_served_fails_with_the_status() -> None:
    api = Upgrading("v1")
    api.create_404 = 2
    with pytest.raises(BackendError, match="create answered HTTP 404"):
        isolation(api).isolate(N1, "2", "xid", "NoExecute")
    assert api.calls == [("create", "v1"), ("create", "v1")]


def test_a_server_serving_no_rule_version_says_so_and_sends_the_gpu_down_the_node_path() -> None:
    api = Upgrading()
    with pytest.raises(dra.RulesNotServed) as e:
        isolation(api).isolate(N1, "0", "xid", "NoExecute")
    assert str(e.value) == (
        "DeviceTaintRules are not served by this API server (resource.k8s.io serves none of "
        "v1, v1beta2, v1alpha3: GA in Kubernetes 1.37, beta behind the DRADeviceTaintRules "
        "feature gate in 1.36): one GPU cannot be taken out alone, node path"
    )
    assert api.calls == []


def test_a_server_that_serves_no_rules_is_asked_again_on_the_next_isolation() -> None:
    api = Upgrading()
    iso = isolation(api)
    with pytest.raises(dra.RulesNotServed):
        iso.isolate(N1, "0", "xid", "NoExecute")
    api.served = ["v1"]  # the gate turned on
    assert iso.isolate(N1, "0", "xid", "NoExecute").startswith("gpu-0 tainted NoExecute")
