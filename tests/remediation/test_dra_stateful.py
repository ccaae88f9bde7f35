"""One-GPU isolation (remediation/backends/dra.py) under any interleaving: a Hypothesis
state machine drives the real ``DraIsolation`` against an in-memory Kubernetes API (the
DeviceTaintRule calls with resourceVersion preconditions and JSON merge patch, the DRA
ResourceSlices and ResourceClaims, the Eviction API) in which

- DeviceTaintRules pre-exist under gpuwarden's names and others, with every effect (None,
  NoSchedule, NoExecute, one the API does not know), owners (gpuwarden, another, none) and
  selectors (the device, another device, the whole pool, the device and a class);
- any call fails at random (an error status, an exception, an answer lost after the write,
  a patch the server ignores), and another writer changes a rule between gpuwarden's read
  and its write (the resourceVersion it read is stale);
- isolate (live and dry-run), release of one GPU or of a node (previews only, or all) and a
  restart (a new ``DraIsolation``) interleave on two nodes, one named like a prefix of the
  other's rules.

Checked at every call (the fake records what gpuwarden did to what): a GPU is reported
isolated only right after gpuwarden read back its rule with the wanted effect selecting
exactly that device, and pods are evicted only then and only the device's; a dry-run never
writes a rule with an effect, nor patches one that had an effect; gpuwarden never changes
nor deletes a rule that is not its own, and a previews-only release never deletes a live one.
"""

from __future__ import annotations

import copy
import os
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from remediation.backends import dra
from remediation.backends.base import BackendError
from remediation.backends.kubeapi import Eviction

NODES = ("gpu-node-1", "gpu-node-1-gpu2")  # the second's rule names start like the first's
GPUS = ("0", "1", "2", "3")
OURS = {dra.MANAGED_BY: "gpuwarden"}
FAULTS = ("create:500", "create:raise", "create:lost", "read:raise", "read:race",
          "patch:409", "patch:500", "patch:raise", "patch:ignored", "delete:raise",
          "list:raise", "list:race", "evict:429", "evict:500")  # fmt: skip


def device(gpu: str) -> str:
    return f"gpu-{gpu}"


def selector(node: str, gpu: str, kind: str) -> dict[str, Any]:
    exact = {"driver": dra.DRIVER, "pool": node, "device": device(gpu)}
    return {"exact": exact, "other": {**exact, "device": device(str((int(gpu) + 1) % 4))},
            "pool": {"driver": dra.DRIVER, "pool": node},
            "classed": {**exact, "deviceClassName": "gpu.nvidia.com"},
            "device-only": {"device": device(gpu)}}[kind]  # fmt: skip


def owner_of(rule: dict[str, Any] | None) -> Any:
    return ((rule or {}).get("metadata") or {}).get("labels", {}).get(dra.MANAGED_BY)


def in_force(rule: dict[str, Any] | None, node: str, gpu: str, effect: str) -> bool:
    if rule is None or owner_of(rule) != "gpuwarden":
        return False
    spec = rule.get("spec") or {}
    taint = spec.get("taint") or {}
    return (taint.get("key"), taint.get("effect"), spec.get("deviceSelector")) == (
        dra.TAINT_KEY, effect, selector(node, gpu, "exact"))  # fmt: skip


def merge(into: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386 JSON merge patch, as the API server applies it."""
    for k, v in patch.items():
        if v is None:
            into.pop(k, None)
        elif isinstance(v, dict) and isinstance(into.get(k), dict):
            merge(into[k], v)
        else:
            into[k] = copy.deepcopy(v)


class ApiDown(Exception):
    pass


class FakeDraApi:
    """The KubeApi calls dra.py makes, over a dict of rules; every call logged, and what
    gpuwarden must never do recorded as a violation at the moment it happens."""

    def __init__(self) -> None:
        self.rules: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.faults: list[tuple[str, int]] = []  # (op:mode, which call of that op)
        self.calls: dict[str, int] = {}
        self.log: list[tuple[str, str, Any]] = []  # (op, name, what it returned/wrote)
        self.violations: list[str] = []
        self.evicted: list[str] = []
        self.context: dict[str, Any] = {}  # the call in progress (set by the machine)
        self.served = ["v1"]  # the versions discovery finds serving DeviceTaintRules
        slices = []
        for n in NODES:
            devs = [{"name": device(g), "attributes": {"index": {"int": int(g)}}} for g in GPUS]
            slices.append({"spec": {"nodeName": n, "driver": dra.DRIVER, "pool": {"name": n},
                                    "devices": devs}})  # fmt: skip
        self.slices = slices
        self.claims = [
            {"metadata": {"namespace": "ml"},
             "status": {"allocation": {"devices": {"results": [
                 {"driver": dra.DRIVER, "pool": n, "device": device(g)}]}},
                 "reservedFor": [{"resource": "pods", "name": f"{n}-p{g}"}]}}
            for n in NODES for g in GPUS
        ]  # fmt: skip

    # -- the machinery: faults and the other writer
    def fault(self, op: str) -> str | None:
        self.calls[op] = self.calls.get(op, 0) + 1
        for i, (f, nth) in enumerate(self.faults):
            kind, mode = f.split(":")
            if kind == op and nth == self.calls[op]:
                del self.faults[i]
                return mode
        return None

    def bump(self) -> str:
        self.version += 1
        return str(self.version)

    def meddle(self, name: str) -> None:
        """Another writer changes gpuwarden's rule (its effect), after gpuwarden read it."""
        r = self.rules.get(name)
        if r is None or owner_of(r) != "gpuwarden":
            return
        taint = r["spec"].setdefault("taint", {})
        taint["effect"] = "NoExecute" if taint.get("effect") == "None" else "None"
        r["metadata"]["resourceVersion"] = self.bump()

    # -- KubeApi
    def served_versions(self, group: str, plural: str) -> list[str]:
        return list(self.served) if (group, plural) == (dra.GROUP, dra.RULES) else []

    def rule_version(self, op: str, version: str) -> None:
        """Every rule call is made at a version the server serves (found by discovery)."""
        if version not in self.served:
            self.violations.append(f"{op} at {version}, which is not served ({self.served})")

    def list_custom(self, group: str, version: str, plural: str) -> list[dict[str, Any]]:
        if plural == "resourceslices":
            return copy.deepcopy(self.slices)
        if plural == "resourceclaims":
            return copy.deepcopy(self.claims)
        self.rule_version("list", version)
        mode = self.fault("list")
        if mode == "raise":
            raise ApiDown("list: connection reset")
        out = [copy.deepcopy(r) for r in self.rules.values()]
        if mode == "race":
            for name in list(self.rules):
                self.meddle(name)
        return out

    def create_cluster_custom(self, group: str, version: str, plural: str,
                              body: dict[str, Any]) -> int:  # fmt: skip
        self.rule_version("create", version)
        mode = self.fault("create")
        if mode == "500":
            return 500
        if mode == "raise":
            raise ApiDown("create: timeout")
        name = body["metadata"]["name"]
        if name in self.rules:
            return 409
        if self.context.get("dry_run") and body["spec"]["taint"]["effect"] != "None":
            self.violations.append(f"dry-run created {name} with an effect")
        obj = copy.deepcopy(body)
        obj["metadata"]["resourceVersion"] = self.bump()
        self.rules[name] = obj
        self.log.append(("create", name, copy.deepcopy(obj)))
        if mode == "lost":
            raise ApiDown("create: the answer was lost")
        return 201

    def read_cluster_custom(self, group: str, version: str, plural: str,
                            name: str) -> dict[str, Any] | None:  # fmt: skip
        self.rule_version("read", version)
        mode = self.fault("read")
        if mode == "raise":
            raise ApiDown("read: timeout")
        got = copy.deepcopy(self.rules.get(name))
        self.log.append(("read", name, copy.deepcopy(got)))
        if mode == "race":
            self.meddle(name)
        return got

    def patch_cluster_custom(self, group: str, version: str, plural: str, name: str,
                             body: dict[str, Any]) -> int:  # fmt: skip
        self.rule_version("patch", version)
        mode = self.fault("patch")
        if mode in ("409", "500"):
            return int(mode)
        if mode == "raise":
            raise ApiDown("patch: timeout")
        r = self.rules.get(name)
        if r is None:
            return 404
        rv = (body.get("metadata") or {}).get("resourceVersion")
        if rv is None:
            self.violations.append(f"patch of {name} without a resourceVersion")
        if rv is not None and rv != r["metadata"].get("resourceVersion"):
            return 409
        if owner_of(r) != "gpuwarden":
            self.violations.append(f"patched {name}, which is not gpuwarden's")
        if mode == "ignored":  # e.g. a webhook undoes it: answered 200, nothing changed
            return 200
        before = (r.get("spec") or {}).get("taint", {}).get("effect")
        merge(r, body)
        after = (r.get("spec") or {}).get("taint", {}).get("effect")
        if self.context.get("dry_run") and (before != "None" or after != "None"):
            self.violations.append(f"dry-run patched {name} from {before} to {after}")
        r["metadata"]["resourceVersion"] = self.bump()
        self.log.append(("patch", name, copy.deepcopy(r)))
        return 200

    def delete_cluster_custom(self, group: str, version: str, plural: str, name: str,
                              resource_version: str = "") -> None:  # fmt: skip
        self.rule_version("delete", version)
        if self.fault("delete") == "raise":
            raise ApiDown("delete: timeout")
        r = self.rules.get(name)
        if r is None:
            return  # 404: already gone
        if resource_version and resource_version != r["metadata"].get("resourceVersion"):
            raise ApiDown(f"delete {name}: HTTP 409 (precondition)")
        if owner_of(r) != "gpuwarden":
            self.violations.append(f"deleted {name}, which is not gpuwarden's")
        effect = (r.get("spec") or {}).get("taint", {}).get("effect")
        of = self.context.get("release_of")
        if of is not None and (dra.parse_name(name) or ("",))[0] != of:
            self.violations.append(f"the release of {of} deleted {name}")
        if self.context.get("previews_only") and effect != "None":
            self.violations.append(f"a previews-only release deleted {name} ({effect})")
        del self.rules[name]
        self.log.append(("delete", name, None))

    def evict(self, namespace: str, name: str) -> Eviction:
        c = self.context
        rule_name = dra.rule_name(c.get("node", ""), c.get("gpu", ""))
        if c.get("dry_run") or c.get("effect") != "NoSchedule":
            self.violations.append(f"evicted {name} under {c}")
        elif not self.read_back(rule_name, c["node"], c["gpu"], "NoSchedule"):
            self.violations.append(f"evicted {name} before {rule_name} was read back in force")
        if name != f"{c.get('node')}-p{c.get('gpu')}":
            self.violations.append(f"evicted {name}, which does not hold GPU {c.get('gpu')}")
        mode = self.fault("evict")
        if mode is not None:
            return Eviction(int(mode), "Refused", f"refused with {mode}")
        self.evicted.append(name)
        return Eviction(201)

    def read_back(self, name: str, node: str, gpu: str, effect: str) -> bool:
        """gpuwarden's last call on ``name`` was a read that showed it in force."""
        mine = [entry for entry in self.log if entry[1] == name]
        return bool(mine) and mine[-1][0] == "read" and in_force(mine[-1][2], node, gpu, effect)


node_st = st.sampled_from(NODES)
gpu_st = st.sampled_from(GPUS)
faults_st = st.lists(st.tuples(st.sampled_from(FAULTS), st.integers(1, 2)), max_size=3)


class DraRules(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.api = FakeDraApi()
        self.iso = dra.DraIsolation(self.api)  # type: ignore[arg-type]

    def call(self, faults: list[tuple[str, int]], context: dict[str, Any], fn: Any,
             *args: Any) -> tuple[Any, Exception | None]:  # fmt: skip
        self.api.faults, self.api.calls, self.api.context = list(faults), {}, context
        try:
            return fn(*args), None
        except (BackendError, ApiDown) as e:
            return None, e
        finally:
            self.api.faults, self.api.context = [], {}

    @rule(node=node_st, gpu=gpu_st,
          effect=st.sampled_from(["None", "NoSchedule", "NoExecute", "Degraded"]),
          owner=st.sampled_from(["gpuwarden", "other", None]),
          kind=st.sampled_from(["exact", "other", "pool", "classed", "device-only"]),
          our_name=st.booleans())  # fmt: skip
    def a_rule_exists(self, node: str, gpu: str, effect: str, owner: str | None, kind: str,
                      our_name: bool) -> None:  # fmt: skip
        """Put there by a dry-run, an earlier version, an admin or another controller."""
        name = dra.rule_name(node, gpu) if our_name else f"admin-{node}-gpu{gpu}"
        labels = {dra.MANAGED_BY: owner} if owner else {}
        self.api.rules[name] = {
            "metadata": {"name": name, "labels": labels, "resourceVersion": self.api.bump()},
            "spec": {"deviceSelector": selector(node, gpu, kind),
                     "taint": {"key": dra.TAINT_KEY, "value": "true", "effect": effect}},
        }  # fmt: skip

    @rule(node=node_st, gpu=gpu_st, effect=st.sampled_from(["NoSchedule", "NoExecute"]),
          dry_run=st.booleans(), faults=faults_st)  # fmt: skip
    def isolate(self, node: str, gpu: str, effect: str, dry_run: bool,
                faults: list[tuple[str, int]]) -> None:  # fmt: skip
        wanted = "None" if dry_run else effect
        ctx = {"node": node, "gpu": gpu, "effect": wanted, "dry_run": dry_run}
        existed = self.api.rules.get(dra.rule_name(node, gpu))
        out, err = self.call(faults, ctx, self.iso.isolate, node, gpu, "xid 79", effect, dry_run)
        event(f"isolate {'dry-run' if dry_run else 'live'} over "
              f"{'nothing' if existed is None else 'a rule'}: "
              f"{'reported' if err is None else 'failed'}")  # fmt: skip
        if err is not None:
            return  # failed: nothing reported; the executor retries the step
        name = dra.rule_name(node, gpu)
        if dry_run:
            assert out.startswith("preview: "), out
            if not out.endswith("left as it is"):
                assert self.api.read_back(name, node, gpu, "None"), (out, self.api.log[-3:])
            return
        assert out.startswith(f"{device(gpu)} tainted {effect}; "), out
        assert self.api.read_back(name, node, gpu, effect), (out, self.api.log[-3:])

    @rule(node=node_st, gpu=gpu_st, faults=faults_st)
    def release_gpu(self, node: str, gpu: str, faults: list[tuple[str, int]]) -> None:
        self.call(faults, {"release_of": node}, self.iso.release, node, gpu)

    @rule(node=node_st, previews_only=st.booleans(), faults=faults_st)
    def release_node(self, node: str, previews_only: bool, faults: list[tuple[str, int]]) -> None:
        ctx = {"previews_only": previews_only, "release_of": node}
        gone, err = self.call(faults, ctx, self.iso.release_node, node, previews_only)
        if err is not None or previews_only:
            return
        left = [r for r in self.iso.active() if r["metadata"]["name"].startswith(
            dra.rule_name(node, "")) and r["metadata"]["name"].rpartition("-gpu")[0] ==
            f"gpuwarden-{node}"]  # fmt: skip
        assert left == [], left  # every rule of ours on the node gone, no other node's
        assert all(g in GPUS for g in gone)

    @rule()
    def restart(self) -> None:
        self.iso = dra.DraIsolation(self.api)  # type: ignore[arg-type]

    @invariant()
    def gpuwarden_never_did_what_it_must_not(self) -> None:
        assert self.api.violations == [], self.api.violations

    @invariant()
    def the_listing_shows_only_gpuwardens_rules_and_isolated_only_with_an_effect(self) -> None:
        for row in self.iso.listing():
            rule = self.api.rules[dra.rule_name(row["node"], row["gpu"])]
            assert owner_of(rule) == "gpuwarden"
            effect = rule["spec"]["taint"]["effect"]
            assert (row["tier"] == "isolated") == (effect in ("NoSchedule", "NoExecute"))


DraRules.TestCase.settings = settings(
    max_examples=int(os.environ.get("GPUWARDEN_SOAK_EXAMPLES", "200")),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_dra_isolation_is_reported_only_when_read_back_in_force_and_touches_only_its_rules = (
    DraRules.TestCase
)
