"""The shapes dra.py reads and writes, on the in-memory API of the DRA state machine: the
DeviceTaintRule body, rule names of nodes whose names contain ``-gpu``, ResourceSlices in
the v1 and v1beta1 (``basic``) device shapes and pools not named after their node,
ResourceClaims shared by two pods, another driver, the listing row, and the answers the
API may give (200 or 201 to a create, 200 or 404 to an eviction, a rule gone between the
create's 409 and its read)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from remediation.backends import dra
from remediation.backends.base import BackendError, EvacuationBlocked
from tests.remediation.test_dra_stateful import FakeDraApi

NODE = "gpu-node-1"


def iso(api: FakeDraApi, driver: str = dra.DRIVER) -> dra.DraIsolation:
    return dra.DraIsolation(api, driver)  # type: ignore[arg-type]


def device(i: int, shape: str = "v1") -> dict[str, Any]:
    attrs = {"index": {"int": i}}
    return {"name": f"gpu-{i}", **({"attributes": attrs} if shape == "v1" else
                                   {"basic": {"attributes": attrs}})}  # fmt: skip


def a_slice(node: str, driver: str = dra.DRIVER, pool: str | None = None,
            devices: list[dict[str, Any]] | None = None) -> dict[str, Any]:  # fmt: skip
    spec: dict[str, Any] = {"nodeName": node, "driver": driver,
                            "devices": devices or [device(i) for i in range(4)]}  # fmt: skip
    if pool is not None:
        spec["pool"] = {"name": pool}
    return {"spec": spec}


@pytest.mark.parametrize("version", ["v1", "v1beta2", "v1alpha3"])
def test_the_rule_is_a_device_taint_rule_at_the_served_version_labelled_ours_with_a_200_char_reason(
    version: str,
) -> None:
    rule = dra.taint_rule("n", "3", "pool-a", "gpu-3", "NoSchedule", "x" * 300, version=version)
    assert rule == {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "gpuwarden-n-gpu3", "labels": {dra.MANAGED_BY: "gpuwarden"},
                     "annotations": {"gpuwarden.io/reason": "x" * 200}},
        "spec": {"deviceSelector": {"driver": dra.DRIVER, "pool": "pool-a", "device": "gpu-3"},
                 "taint": {"key": dra.TAINT_KEY, "value": "true", "effect": "NoSchedule"}},
    }  # fmt: skip
    with pytest.raises(ValueError, match="effect 'PreferNoSchedule': one of"):
        dra.taint_rule("n", "3", "p", "gpu-3", "PreferNoSchedule", "x")
    with pytest.raises(ValueError, match="version 'v1beta1': one of"):
        dra.taint_rule("n", "3", "p", "gpu-3", "NoSchedule", "x", version="v1beta1")


def test_rule_names_of_nodes_named_with_gpu_in_them_read_back_to_their_node() -> None:
    assert dra.parse_name(dra.rule_name("a-gpu2", "3")) == ("a-gpu2", "3")
    assert dra.parse_name("admin-a-gpu3") is None
    assert dra.parse_name("gpuwarden-a-gpux") is None
    assert dra.parse_name("gpuwarden--gpu3") is None


def test_the_device_is_found_in_either_slice_shape_behind_other_nodes_and_in_its_pool() -> None:
    slices = [
        a_slice("other"),
        a_slice(NODE, "x.example.com"),
        a_slice(NODE, pool="pool-a", devices=[{"name": "nic"}, device(3, "v1beta1")]),
    ]
    assert dra.find_device(slices, NODE, "3") == ("pool-a", "gpu-3")  # fmt: skip
    assert dra.find_device([a_slice(NODE)], NODE, "2") == (NODE, "gpu-2")  # no pool: the node
    with pytest.raises(BackendError, match="no DRA device for GPU 5 on gpu-node-1"):
        dra.find_device(slices, NODE, "5")


def test_every_pod_sharing_the_device_holds_it_in_its_claims_namespace() -> None:
    def claim(ns: str | None, pods: list[str], dev: str = "gpu-3") -> dict[str, Any]:
        res = {"driver": dra.DRIVER, "pool": NODE, "device": dev}
        return {"metadata": {"namespace": ns} if ns else {},
                "status": {"allocation": {"devices": {"results": [res]}},
                           "reservedFor": [{"resource": "pods", "name": p} for p in pods]
                           + [{"resource": "other", "name": "x"}]}}  # fmt: skip

    claims = [claim("ml", ["a", "b"]), claim(None, ["c"]), claim("ml", ["d"], "gpu-4")]
    assert dra.holders(claims, dra.DRIVER, NODE, "gpu-3") == [
        ("default", "c"), ("ml", "a"), ("ml", "b")]  # fmt: skip


def test_the_nodes_are_those_whose_slices_this_driver_publishes() -> None:
    api = FakeDraApi()
    api.slices = [a_slice("a"), a_slice("b"), a_slice("c", "x.example.com")]
    assert iso(api).nodes() == {"a", "b"}
    assert iso(api, "x.example.com").nodes() == {"c"}


def test_another_driver_is_isolated_and_asked_for_its_own_devices() -> None:
    api = FakeDraApi()
    api.slices = [a_slice(NODE, "x.example.com", NODE)]
    api.claims = [{"metadata": {"namespace": "ml"}, "status": {
        "allocation": {"devices": {"results": [
            {"driver": "x.example.com", "pool": NODE, "device": "gpu-1"}]}},
        "reservedFor": [{"resource": "pods", "name": "p"}]}}]  # fmt: skip
    x = iso(api, "x.example.com")
    assert x.pods_on(NODE, "1") == {("ml", "p")}
    assert x.isolate(NODE, "1", "r", "NoExecute") == (
        "gpu-1 tainted NoExecute; the control plane evicts 1 pod(s)")  # fmt: skip
    rule = api.rules[dra.rule_name(NODE, "1")]
    assert rule["spec"]["deviceSelector"]["driver"] == "x.example.com"
    with pytest.raises(BackendError, match="node path"):
        iso(api).isolate(NODE, "1", "r")


class Created200(FakeDraApi):
    def create_cluster_custom(self, group: str, version: str, plural: str,
                              body: dict[str, Any]) -> int:  # fmt: skip
        status = super().create_cluster_custom(group, version, plural, body)
        return 200 if status == 201 else status


def test_a_create_answered_200_or_201_is_read_back_and_taken() -> None:
    assert iso(Created200()).isolate(NODE, "2", "r", "NoExecute").startswith("gpu-2 tainted")


def test_two_pods_evicted_or_refused_are_each_named() -> None:
    api = FakeDraApi()
    holder = {"driver": dra.DRIVER, "pool": NODE, "device": "gpu-0"}
    api.claims = [
        {
            "metadata": {"namespace": "ml"},
            "status": {
                "allocation": {"devices": {"results": [holder]}},
                "reservedFor": [
                    {"resource": "pods", "name": "a"},
                    {"resource": "pods", "name": "b"},
                ],
            },
        }
    ]
    out = iso(api).isolate(NODE, "0", "r")  # fmt: skip
    assert out == "gpu-0 tainted NoSchedule; evicted 2 pod(s) using it: ml/a, ml/b"
    api.faults = [("evict:200", 1), ("evict:404", 2)]  # gone or going: both fine
    api.calls = {}
    assert iso(api).isolate(NODE, "0", "r").endswith("ml/a, ml/b")
    api.faults, api.calls = [("evict:500", 1), ("evict:429", 2)], {}
    with pytest.raises(EvacuationBlocked) as err:
        iso(api).isolate(NODE, "0", "r")
    assert [(p.pod, p.status, p.message) for p in err.value.pods] == [
        ("ml/a", 500, "refused with 500"), ("ml/b", 429, "refused with 429")]  # fmt: skip
    assert str(err.value).startswith(
        f"evacuation of GPU 0 of {NODE} blocked: 2 pod(s) not evicted: "
        "ml/a: refused with 500 (HTTP 500); ml/b: refused with 429 (HTTP 429)"
    )


class Vanishing(FakeDraApi):
    """The rule is deleted between the create's 409 and gpuwarden's read of it."""

    def read_cluster_custom(self, group: str, version: str, plural: str,
                            name: str) -> dict[str, Any] | None:  # fmt: skip
        self.rules.pop(name, None)
        return super().read_cluster_custom(group, version, plural, name)


def test_a_rule_gone_between_the_conflict_and_its_read_is_no_isolation() -> None:
    api = Vanishing()
    api.rules[dra.rule_name(NODE, "1")] = dra.taint_rule(NODE, "1", NODE, "gpu-1", "None", "r")
    with pytest.raises(BackendError, match=r"not in force on read-back: absent$"):
        iso(api).isolate(NODE, "1", "r")
    assert api.evicted == []


def test_a_dry_run_moves_its_own_preview_to_the_device_but_never_a_live_rule() -> None:
    api = FakeDraApi()
    name = dra.rule_name(NODE, "1")
    preview = dra.taint_rule(NODE, "1", NODE, "gpu-2", "None", "old")
    preview["metadata"]["resourceVersion"] = "9"
    api.rules[name] = preview
    out = iso(api).isolate(NODE, "1", "new", "NoSchedule", dry_run=True)
    assert out == "preview: gpu-1 tainted with effect None; would evict 1 pod(s)"
    assert api.rules[name]["spec"]["deviceSelector"]["device"] == "gpu-1"
    assert api.rules[name]["metadata"]["annotations"] == {"gpuwarden.io/reason": "new"}


def test_a_selector_field_set_empty_is_no_selector_field() -> None:
    want = dra.taint_rule(NODE, "1", NODE, "gpu-1", "NoSchedule", "r")
    rule = dra.taint_rule(NODE, "1", NODE, "gpu-1", "NoSchedule", "r")
    rule["spec"]["deviceSelector"].update({"deviceClassName": "", "selectors": []})
    assert dra.mismatch(rule, want) is None
    rule["spec"]["deviceSelector"]["deviceClassName"] = "gpu"
    assert dra.mismatch(rule, want) == (
        "selects {'driver': 'gpu.nvidia.com', 'pool': 'gpu-node-1', 'device': 'gpu-1', "
        "'deviceClassName': 'gpu'}")  # fmt: skip
    assert dra.mismatch(None, want) == "absent"


def test_a_previews_only_release_skips_live_rules_and_deletes_every_preview_after_them() -> None:
    api = FakeDraApi()
    for gpu, effect in (("0", "NoSchedule"), ("1", "None"), ("2", "NoExecute"), ("3", "None")):
        api.rules[dra.rule_name(NODE, gpu)] = dra.taint_rule(NODE, gpu, NODE, f"gpu-{gpu}",
                                                              effect, "r")  # fmt: skip
    assert iso(api).release_node(NODE, previews_only=True) == ["1", "3"]
    assert sorted(api.rules) == [dra.rule_name(NODE, "0"), dra.rule_name(NODE, "2")]
    neighbour = dra.rule_name(NODE + "-gpu2", "3")  # starts like NODE's rules; not NODE's
    api.rules[neighbour] = dra.taint_rule(NODE + "-gpu2", "3", NODE, "gpu-3", "None", "r")
    assert iso(api).release_node(NODE) == ["0", "2"]
    assert sorted(api.rules) == [neighbour]
    api.rules[dra.rule_name(NODE, "0")] = dra.taint_rule(NODE, "0", NODE, "gpu-0", "None", "r")
    assert iso(api).release(NODE, "0") == f"DeviceTaintRule {dra.rule_name(NODE, '0')} deleted"
    assert iso(api).release(NODE, "0").endswith("already gone")


def test_the_listing_row_says_node_gpu_reason_since_and_evidence() -> None:
    api = FakeDraApi()
    rule = dra.taint_rule(NODE, "3", NODE, "gpu-3", "NoSchedule", "r")
    rule["metadata"]["creationTimestamp"] = "2026-12-04T10:00:00Z"
    del rule["metadata"]["annotations"]
    api.rules[rule["metadata"]["name"]] = rule
    since = dt.datetime(2026, 12, 4, 10, tzinfo=dt.UTC).timestamp()
    assert iso(api).listing() == [{
        "node": NODE, "gpu": "3", "tier": "isolated", "reason": "", "since": since,
        "until": None, "evidence": {"device": {"driver": dra.DRIVER, "pool": NODE,
                                               "device": "gpu-3"}, "effect": "NoSchedule"}}]  # fmt: skip
    rule["metadata"]["creationTimestamp"] = "yesterday"
    assert iso(api).listing()[0]["since"] is None
    rule["spec"]["taint"]["effect"] = "None"  # a preview keeps nothing off the GPU
    assert iso(api).listing()[0]["tier"] == "preview"
    rule["spec"]["taint"]["effect"] = "NoExecute"
    assert iso(api).listing()[0]["tier"] == "isolated"
