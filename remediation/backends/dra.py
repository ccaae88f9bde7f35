"""One GPU out, not the node: Kubernetes Dynamic Resource Allocation device taints
(KEP-5055). A GPU-scoped fault becomes a ``DeviceTaintRule`` selecting that one device of
the node's ResourceSlice (driver ``gpu.nvidia.com``, pool = the node, the device whose
``index`` attribute is the GPU): ``NoSchedule`` keeps new claims off it and gpuwarden evicts
(Eviction API, PodDisruptionBudgets respected) only the pods whose ResourceClaims hold that
device; ``NoExecute`` (only where policy says) lets the control plane evict them itself;
``None`` is the dry-run preview (the rule is visible, nothing changes). The node's other
GPUs keep serving. A GPU is reported isolated (and its pods evicted) only once gpuwarden's
rule with the wanted effect, selecting exactly that device, is read back: a rule of that
name found in place (the preview, typically) is patched if it is ours, never changed if it
is not. Release deletes only gpuwarden's rules.

The rule API's version is found by discovery, not assumed: ``resource.k8s.io/v1`` (GA in
Kubernetes 1.37), ``v1beta2`` (1.36, feature gate DRADeviceTaintRules off by default),
``v1alpha3`` (1.33-1.35, gate DRADeviceTaints); the first of these the server serves is
used for create, read-back, patch, list and delete alike, cached, and looked up afresh when
an answer says 404 (an upgrade, a gate turned off). The spec gpuwarden writes
(``deviceSelector`` driver/pool/device, ``taint`` key/value/effect) is the same at all
three (k8s.io/api resource/{v1alpha3,v1beta2,v1} types.go; the 1.33-1.34 alpha's extra
``deviceClassName`` and CEL ``selectors`` are never set). A server that serves none of them
cannot isolate one GPU: :class:`RulesNotServed` says so, and the GPU takes the node path.

A partitioned GPU (MIG) is published as more devices: the NVIDIA DRA driver names each MIG
device ``gpu-<minor>-mig-<profile id>-<placement start>-<size>`` with a ``parentUUID``
attribute (k8s-dra-driver-gpu, cmd/gpu-kubelet-plugin/deviceinfo.go). A fault on the GPU is
the fault of every instance on it (an XID on one instance is the physical GPU's), so isolating
the GPU taints the GPU's device (where published) and each of its MIG devices, one rule per
device, and evicts the pods holding any of them; the pods of the node's other GPUs' instances
stay.
"""

from __future__ import annotations

import re
from typing import Any

from remediation.backends.base import BackendError, BlockedPod, EvacuationBlocked, NodePath
from remediation.backends.kubeapi import KubeApi, Obj

GROUP = "resource.k8s.io"
SLICES = "v1"  # ResourceSlice / ResourceClaim (GA in Kubernetes 1.34)
# DeviceTaintRule versions, preferred first: GA in 1.37, beta (gate) in 1.36, alpha 1.33-1.35
TAINT_RULE_VERSIONS = ("v1", "v1beta2", "v1alpha3")
RULES = "devicetaintrules"
DRIVER = "gpu.nvidia.com"
TAINT_KEY = "gpuwarden.io/gpu-fault"
EFFECTS = ("NoSchedule", "NoExecute", "None")
MANAGED_BY = "app.kubernetes.io/managed-by"


def _epoch(ts: Any) -> float | None:
    import datetime as dt

    try:
        return dt.datetime.fromisoformat(str(ts)).timestamp()  # "Z" read since Python 3.11
    except ValueError:
        return None


class RulesNotServed(NodePath):
    """No served version of resource.k8s.io has devicetaintrules: one GPU cannot be taken
    out alone here (the message says so, and "node path": the node is taken out instead)."""


def rule_name(node: str, gpu: str, part: str = "") -> str:
    """The rule of GPU ``gpu``'s device; ``part``: of one of its MIG devices (``mig-9-3-1``)."""
    return f"gpuwarden-{node}-gpu{gpu}" + (f"-{part}" if part else "")


_NAME = re.compile(r"^gpuwarden-(?P<node>.+)-gpu(?P<gpu>\d+)(?:-mig(?:-\d+)+)?$")


def parse_name(name: str) -> tuple[str, str] | None:
    """(node, gpu) of a rule named by :func:`rule_name` (a MIG device's: its parent GPU);
    None for any other name."""
    m = _NAME.match(name)
    return (m["node"], m["gpu"]) if m else None


def _attrs(device: Obj) -> Obj:
    return device.get("attributes") or (device.get("basic") or {}).get("attributes") or {}


def _index(device: Obj) -> int | None:
    raw = (_attrs(device).get("index") or {}).get("int")
    return int(raw) if isinstance(raw, int) else None


def _string(device: Obj, name: str) -> str:
    return str((_attrs(device).get(name) or {}).get("string") or "")


def mig_part(device: str, gpu: str) -> str:
    """``mig-9-3-1`` of a MIG device named ``gpu-<gpu>-mig-9-3-1``; "" for any other device."""
    prefix = f"gpu-{gpu}-"
    return device.removeprefix(prefix) if device.startswith(prefix + "mig-") else ""


def find_devices(slices: list[Obj], node: str, gpu: str,
                 driver: str = DRIVER) -> tuple[str, list[str]]:  # fmt: skip
    """(pool, devices) of GPU ``gpu``: its own device (``index``) where published, then each
    MIG device on it (``parentUUID`` = the GPU's uuid, or named ``gpu-<gpu>-mig-...`` where
    the GPU's device is not published); BackendError when there is none."""
    mine = [(s.get("spec") or {}) for s in slices]
    mine = [sp for sp in mine if sp.get("nodeName") == node and sp.get("driver") == driver]
    devices = [(str((sp.get("pool") or {}).get("name", node)), d)
               for sp in mine for d in sp.get("devices") or []]  # fmt: skip
    parent = next(((p, d) for p, d in devices if _index(d) == int(gpu)), None)
    uuid = _string(parent[1], "uuid") if parent else ""
    migs = [(p, d) for p, d in devices if _string(d, "type") != "gpu"
            and ((uuid and _string(d, "parentUUID") == uuid)
                 or (not uuid and mig_part(str(d.get("name")), gpu)))]  # fmt: skip
    found = ([parent] if parent else []) + migs
    if not found:
        raise BackendError(f"no DRA device for GPU {gpu} on {node} (driver {driver}): node path")
    return found[0][0], [str(d["name"]) for _, d in found]


def find_device(slices: list[Obj], node: str, gpu: str, driver: str = DRIVER) -> tuple[str, str]:
    """(pool, device) of GPU ``gpu`` in the node's ResourceSlices; BackendError if none."""
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("nodeName") != node or spec.get("driver") != driver:
            continue
        for d in spec.get("devices") or []:
            if _index(d) == int(gpu):
                return str((spec.get("pool") or {}).get("name", node)), str(d["name"])
    raise BackendError(f"no DRA device for GPU {gpu} on {node} (driver {driver}): node path")


def holders(claims: list[Obj], driver: str, pool: str, device: str) -> list[tuple[str, str]]:
    """(namespace, pod) of every pod whose ResourceClaim is allocated this device."""
    out = []
    for c in claims:
        st = c.get("status") or {}
        results = ((st.get("allocation") or {}).get("devices") or {}).get("results") or []
        if not any((r.get("driver"), r.get("pool"), r.get("device")) == (driver, pool, device)
                   for r in results):  # fmt: skip
            continue
        ns = (c.get("metadata") or {}).get("namespace", "default")
        out += [(ns, str(r["name"])) for r in st.get("reservedFor") or []
                if r.get("resource") == "pods"]  # fmt: skip
    return sorted(set(out))


def taint_rule(node: str, gpu: str, pool: str, device: str, effect: str, reason: str,
               driver: str = DRIVER, version: str = TAINT_RULE_VERSIONS[0]) -> Obj:  # fmt: skip
    """The rule at ``version`` (one of :data:`TAINT_RULE_VERSIONS`: the same spec at each);
    a MIG device of the GPU gets a rule of its own (named after the device)."""
    if effect not in EFFECTS:
        raise ValueError(f"DeviceTaintRule effect {effect!r}: one of {EFFECTS}")
    if version not in TAINT_RULE_VERSIONS:
        raise ValueError(f"DeviceTaintRule version {version!r}: one of {TAINT_RULE_VERSIONS}")
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "DeviceTaintRule",
        "metadata": {"name": rule_name(node, gpu, mig_part(device, gpu)),
                     "labels": {MANAGED_BY: "gpuwarden"},
                     "annotations": {"gpuwarden.io/reason": reason[:200]}},
        "spec": {
            "deviceSelector": {"driver": driver, "pool": pool, "device": device},
            "taint": {"key": TAINT_KEY, "value": "true", "effect": effect},
        },
    }  # fmt: skip


def _effect(rule: Obj) -> Any:
    return ((rule.get("spec") or {}).get("taint") or {}).get("effect")


def mismatch(rule: Obj | None, want: Obj) -> str | None:
    """Why ``rule`` (as read) is not ``want`` in force: None when it is gpuwarden's, with
    the wanted taint and effect, and selects exactly the wanted device."""
    if rule is None:
        return "absent"
    owner = (((rule.get("metadata") or {}).get("labels")) or {}).get(MANAGED_BY)
    if owner != "gpuwarden":
        return f"managed-by {owner!r}"
    spec = rule.get("spec") or {}
    key, effect = (spec.get("taint") or {}).get("key"), _effect(rule)
    if (key, effect) != (TAINT_KEY, want["spec"]["taint"]["effect"]):
        return f"taint {key} effect {effect}"
    sel = {k: v for k, v in (spec.get("deviceSelector") or {}).items() if v not in (None, "", [])}
    if sel != want["spec"]["deviceSelector"]:
        return f"selects {sel}"
    return None


class DraIsolation:
    def __init__(self, api: KubeApi, driver: str = DRIVER) -> None:
        self.api, self.driver = api, driver
        self._version: str | None = None  # the rule API's version, found by discovery

    def version(self, fresh: bool = False) -> str | None:
        """The version of resource.k8s.io serving DeviceTaintRules (v1 > v1beta2 >
        v1alpha3), cached; None when the server serves none. ``fresh``: ask again."""
        if fresh or self._version is None:
            served = self.api.served_versions(GROUP, RULES)
            self._version = next((v for v in TAINT_RULE_VERSIONS if v in served), None)
        return self._version

    def _served(self) -> str:
        """The rule API's version; :class:`RulesNotServed` when there is none."""
        version = self.version() or self.version(fresh=True)
        if version is None:
            raise RulesNotServed(
                f"DeviceTaintRules are not served by this API server ({GROUP} serves none of "
                f"{', '.join(TAINT_RULE_VERSIONS)}: GA in Kubernetes 1.37, beta behind the "
                "DRADeviceTaintRules feature gate in 1.36): one GPU cannot be taken out alone, "
                "node path"
            )
        return version

    def _again(self, version: str) -> str | None:
        """After an answer that may mean "not served at this version" (404, nothing found):
        the version discovery finds now, when it is another one; else None."""
        now = self.version(fresh=True)
        return now if now is not None and now != version else None

    def isolate(self, node: str, gpu: str, reason: str, effect: str = "NoSchedule",
                dry_run: bool = False) -> str:  # fmt: skip
        """Taint one GPU (a partitioned GPU: its device and every MIG device on it); evict
        only the pods holding them (NoSchedule). Dry-run: a None-effect preview. Each rule is
        read back: BackendError (the step is retried) unless gpuwarden's rule with this effect
        selects the device, whatever was there before (see :meth:`_adopt`)."""
        slices = self.api.list_custom(GROUP, SLICES, "resourceslices")
        pool, devices = find_devices(slices, node, gpu, self.driver)
        effect = "None" if dry_run else effect
        for device in devices:
            left = self._taint(node, gpu, pool, device, effect, reason, dry_run)
            if left is not None:
                return left
        claims = self.api.list_custom(GROUP, SLICES, "resourceclaims")
        pods = sorted({p for d in devices for p in holders(claims, self.driver, pool, d)})
        what = devices[0] if len(devices) == 1 else (
            f"GPU {gpu}'s {len(devices)} devices ({', '.join(devices)})")  # fmt: skip
        if effect == "None":
            return f"preview: {what} tainted with effect None; would evict {len(pods)} pod(s)"
        if effect == "NoExecute":
            return f"{what} tainted NoExecute; the control plane evicts {len(pods)} pod(s)"
        return f"{what} tainted NoSchedule; " + self._evict(node, gpu, pods)

    def _taint(self, node: str, gpu: str, pool: str, device: str, effect: str, reason: str,
               dry_run: bool) -> str | None:  # fmt: skip
        """One device's rule in force (None), or the dry-run's word on a rule left as it is."""
        version = self._served()
        want = taint_rule(node, gpu, pool, device, effect, reason, self.driver, version)
        name = want["metadata"]["name"]
        status = self.api.create_cluster_custom(GROUP, version, RULES, want)
        if status == 404:  # no longer served at the cached version (an upgrade): ask again
            version = self._again(version) or self._served()
            want = taint_rule(node, gpu, pool, device, effect, reason, self.driver, version)
            status = self.api.create_cluster_custom(GROUP, version, RULES, want)
        if status == 409:  # a rule of that name exists: in force only once it is what we want
            left = self._adopt(name, want, dry_run)
            if left is not None:
                return left
        elif status not in (200, 201):
            raise BackendError(f"DeviceTaintRule {name}: create answered HTTP {status}")
        why = mismatch(self.read(name), want)
        if why is not None:
            raise BackendError(f"DeviceTaintRule {name} not in force on read-back: {why}")
        return None

    def read(self, name: str) -> Obj | None:
        """The rule named ``name`` at the served version; None when absent or not served."""
        version = self.version()
        if version is None:
            return None
        rule = self.api.read_cluster_custom(GROUP, version, RULES, name)
        if rule is None and (other := self._again(version)) is not None:
            rule = self.api.read_cluster_custom(GROUP, other, RULES, name)
        return rule

    def _adopt(self, name: str, want: Obj, dry_run: bool) -> str | None:
        """A rule named ``name`` exists. Ours but another effect or selector (typically the
        dry-run's effect-None preview): patched to ``want``, conditional on the
        resourceVersion read (409: changed meanwhile, the step fails and is retried). Not
        ours: never changed (BackendError). Dry-run changes nothing with an effect: a live
        rule or another owner's is left, and the preview says so (a str)."""
        rule = self.read(name)
        why = mismatch(rule, want)
        if rule is None or why is None:
            return None  # gone since (the read-back fails) or already what we want
        meta = rule.get("metadata") or {}
        owner = (meta.get("labels") or {}).get(MANAGED_BY)
        effect = _effect(rule)
        if dry_run and (owner != "gpuwarden" or effect != "None"):
            return f"preview: DeviceTaintRule {name} exists ({why}); left as it is"
        if owner != "gpuwarden":
            raise BackendError(f"DeviceTaintRule {name} exists and is not gpuwarden's (managed-by "
                               f"{owner!r}): not changed; delete or rename it")  # fmt: skip
        old = (rule.get("spec") or {}).get("deviceSelector") or {}
        sel = want["spec"]["deviceSelector"]
        body = {
            "metadata": {"annotations": want["metadata"]["annotations"]},
            "spec": {"deviceSelector": {**{k: None for k in old if k not in sel}, **sel},
                     "taint": want["spec"]["taint"]},
        }  # fmt: skip
        if meta.get("resourceVersion"):
            body["metadata"]["resourceVersion"] = meta["resourceVersion"]
        status = self.api.patch_cluster_custom(GROUP, self._served(), RULES, name, body)
        if status == 409:
            raise BackendError(f"DeviceTaintRule {name} changed while being patched (HTTP 409)")
        if status != 200:
            raise BackendError(f"DeviceTaintRule {name} ({why}): patch answered HTTP {status}")
        return None

    def nodes(self) -> set[str]:
        """The nodes whose GPUs this driver publishes in ResourceSlices (allocated by DRA)."""
        slices = self.api.list_custom(GROUP, SLICES, "resourceslices")
        return {str((s.get("spec") or {}).get("nodeName")) for s in slices
                if (s.get("spec") or {}).get("driver") == self.driver}  # fmt: skip

    def pods_on(self, node: str, gpu: str) -> set[tuple[str, str]]:
        """(namespace, pod) of the pods holding GPU ``gpu``; BackendError without DRA."""
        pool, devices = find_devices(self.api.list_custom(GROUP, SLICES, "resourceslices"),
                                     node, gpu, self.driver)  # fmt: skip
        claims = self.api.list_custom(GROUP, SLICES, "resourceclaims")
        return {p for d in devices for p in holders(claims, self.driver, pool, d)}

    def _evict(self, node: str, gpu: str, pods: list[tuple[str, str]]) -> str:
        """Evict the GPU's pods; EvacuationBlocked (with the server's reasons, not a guess)
        when any is refused: the device stays tainted and the executor retries."""
        blocked = []
        for ns, name in pods:
            answer = self.api.evict(ns, name)
            if not answer.done:
                message = " ".join(x for x in (answer.message, *answer.causes) if x)
                blocked.append(BlockedPod(f"{ns}/{name}", answer.status, answer.reason, message))
        if blocked:
            raise EvacuationBlocked(node, tuple(blocked), scope=f"GPU {gpu} of")
        return f"evicted {len(pods)} pod(s) using it: " + ", ".join(f"{n}/{p}" for n, p in pods)

    def release(self, node: str, gpu: str) -> str:
        """Delete the GPU's rule (and its MIG devices' rules) if gpuwarden's; another owner's
        rule is left."""
        name = rule_name(node, gpu)
        rule = self.read(name)
        parts = [r for n, g, r in self._ours() if (n, g) == (node, gpu)
                 and (r.get("metadata") or {}).get("name") != name]  # fmt: skip
        if rule is None and not parts:
            return f"DeviceTaintRule {name} already gone"
        return "; ".join(self._delete(r) for r in ([rule] if rule else []) + parts)

    def _delete(self, rule: Obj) -> str:
        """Delete this version of ``rule`` if it is gpuwarden's: one changed since it was
        read (a preview made live meanwhile) is not deleted (409, an error)."""
        meta = rule.get("metadata") or {}
        name, owner = str(meta.get("name")), (meta.get("labels") or {}).get(MANAGED_BY)
        if owner != "gpuwarden":
            return f"DeviceTaintRule {name} is not gpuwarden's (managed-by {owner!r}): left"
        self.api.delete_cluster_custom(GROUP, self._served(), RULES, name,
                                       str(meta.get("resourceVersion") or ""))  # fmt: skip
        return f"DeviceTaintRule {name} deleted"

    def release_node(self, node: str, previews_only: bool = False) -> list[str]:
        """Delete every rule of ours on the node (``previews_only``: only the dry-run's
        effect-None previews, never a rule a live run made); the GPUs released."""
        out = []
        for n, gpu, r in self._ours():
            if n != node or (previews_only and _effect(r) != "None"):
                continue
            self._delete(r)
            if gpu not in out:  # a partitioned GPU's MIG device rules release the GPU once
                out.append(gpu)
        return out

    def listing(self) -> list[dict[str, Any]]:
        """Our rules as placement rows: node, gpu, tier (``isolated``; ``preview`` for a rule
        whose effect keeps nothing off the GPU, as the dry-run's), reason, since, until
        (None: held until released), evidence (the rule's selector and effect)."""
        out = []
        for node, gpu, r in self._ours():
            meta, spec = r.get("metadata") or {}, r.get("spec") or {}
            effect = _effect(r)
            out.append({
                "node": node, "gpu": gpu,
                "tier": "isolated" if effect in ("NoSchedule", "NoExecute") else "preview",
                "reason": (meta.get("annotations") or {}).get("gpuwarden.io/reason", ""),
                "since": _epoch(meta.get("creationTimestamp")), "until": None,
                "evidence": {"device": spec.get("deviceSelector"), "effect": effect},
            })  # fmt: skip
        return out

    def active(self) -> list[dict[str, Any]]:
        """Our rules, for the placement listing and reconciliation."""
        return [r for _, _, r in self._ours()]

    def _ours(self) -> list[tuple[str, str, Obj]]:
        """(node, gpu, rule) of every rule labelled gpuwarden's and named as it names them
        (another name is not ours to list or delete, whatever its label)."""
        version = self.version()
        if version is None:
            return []  # no rule API: no rule of ours can exist
        rules = self.api.list_custom(GROUP, version, RULES)
        if not rules and (other := self._again(version)) is not None:
            rules = self.api.list_custom(GROUP, other, RULES)
        out = []
        for r in rules:
            meta = r.get("metadata") or {}
            parsed = parse_name(str(meta.get("name")))
            if (meta.get("labels") or {}).get(MANAGED_BY) == "gpuwarden" and parsed is not None:
                out.append((*parsed, r))
        return out
