"""What a fault is: kind, target, onset, optional end, parameters; and how requests are checked.

Sits between the inputs (scenario files, ``POST /inject``) and the step loop. A request is
turned into a frozen :class:`Fault` by :func:`make_fault`, which raises :class:`FaultError`
with a one-line reason for anything wrong, before anything in the fleet changes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator.effects import Effects, Event
from simulator.jobs import Jobs
from simulator.partitions import Layout
from simulator.state import FleetState
from simulator.topology import GPUS, LINKS, PORTS, Topology, port_name


class FaultError(ValueError):
    """A fault request that cannot be honoured; the message says why, in one line."""


@dataclass(frozen=True)
class Param:
    default: float | int | bool
    lo: float | None = None
    hi: float | None = None
    choices: tuple[int, ...] = ()

    def check(self, name: str, value: Any) -> Any:
        kind = type(self.default)
        if kind is bool:
            if not isinstance(value, bool):
                raise FaultError(f"parameter {name!r} must be true or false, got {value!r}")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FaultError(f"parameter {name!r} must be a number, got {value!r}")
        if kind is int and float(value) != int(value):
            raise FaultError(f"parameter {name!r} must be an integer, got {value!r}")
        if not math.isfinite(value):
            raise FaultError(f"parameter {name!r} must be finite, got {value!r}")
        if self.choices and value not in self.choices:
            raise FaultError(f"parameter {name!r} must be one of {list(self.choices)}, got {value}")
        if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            raise FaultError(f"parameter {name!r} must be in [{self.lo}, {self.hi}], got {value}")
        return kind(value)


@dataclass(frozen=True)
class Fault:
    """One injected fault, as the truth reports it. ``node`` is the switch name for a switch."""

    id: int
    kind: str
    node: str
    target: str
    onset: float
    end: float | None
    parameters: Mapping[str, Any]
    hardware: bool
    negative_control: bool
    nodes: tuple[int, ...]  # node indices touched
    gpu: int = -1  # -1: every GPU of the node / not GPU-scoped
    link: int = -1
    port: int = -1

    def state_at(self, t: float) -> bool:
        return self.onset <= t and (self.end is None or t < self.end)

    def starts_in(self, t0: float, t1: float) -> bool:
        return t0 < self.onset <= t1

    def since(self, t: float) -> float:
        return max(0.0, t - self.onset)

    def overlap(self, t0: float, t1: float) -> float:
        end = math.inf if self.end is None else self.end
        return max(0.0, min(t1, end) - max(t0, self.onset))

    def to_json(self, topo: Topology) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "node": self.node,
            "target": self.target,
            "onset": self.onset,
            "end": self.end,
            "parameters": dict(self.parameters),
            "hardware": self.hardware,
            "negative_control": self.negative_control,
            "nodes": [topo.nodes[i] for i in self.nodes],
        }


@dataclass
class Step:
    """Everything a fault may read or write during one step (t0, t1]."""

    eff: Effects
    st: FleetState
    jobs: Jobs
    t0: float
    t1: float
    rng: np.random.Generator
    skus: tuple[str, ...] = ()  # per node: its SKU key (rack-wide faults find their rack)
    layouts: Mapping[int, Layout] = field(default_factory=dict)  # partitioned nodes' GPUs

    def event(
        self, node: int, gpu: int, xid: int, text: str, at: float, counted: bool = True
    ) -> None:
        self.eff.events.append(Event(at, node, gpu, xid, text, counted))


Apply = Callable[[Fault, Step], None]


@dataclass(frozen=True)
class FaultKind:
    name: str
    target: str  # gpu | link | xgmi_link | port | node | gpu_or_node | switch | mount
    apply: Apply
    params: Mapping[str, Param] = field(default_factory=dict)
    hardware: bool = True
    negative_control: bool = False
    help: str = ""
    clears_on_reboot: Callable[[Fault], bool] = lambda f: False
    check: Callable[[Mapping[str, Any]], str] = lambda p: ""  # cross-parameter rule: "" = ok
    vendor: str = ""  # "amd": only on AMD nodes (simulator.amd); "": any node


_GPU = re.compile(r"^(?:gpu)?(\d+)$")
_LINK = re.compile(r"^gpu(\d+)/(\d+)$")
_PORT = re.compile(r"^mlx5_(\d+)/1$")


def resolve_target(kind: FaultKind, topo: Topology, node: str, target: str) -> dict[str, Any]:
    """Node indices and gpu/link/port for ``target``; FaultError when it names nothing real."""
    if kind.target == "mount":
        return _mount_target(kind, topo, node, target)
    if kind.target == "switch" and (target or node) in topo.rail_leaves:  # one rail's leaf
        leaf = target or node
        members, port = topo.rail_leaves[leaf]
        return {"node": leaf, "target": leaf, "nodes": tuple(members), "port": port}
    if kind.target == "switch":
        leaf = target or (topo.leaf_of[topo.node_index(node)] if node in topo.index else node)
        if leaf not in topo.leaves:
            raise FaultError(f"unknown switch {leaf!r} (fleet has {', '.join(topo.leaves)})")
        return {"node": leaf, "target": leaf, "nodes": tuple(topo.leaves[leaf])}
    if node not in topo.index:
        raise FaultError(f"unknown node {node!r} (fleet has {topo.nodes[0]}..{topo.nodes[-1]})")
    out: dict[str, Any] = {"node": node, "nodes": (topo.index[node],)}
    t = target.strip()
    if kind.target == "node" or (kind.target == "gpu_or_node" and t in ("", "node")):
        return {**out, "target": "node"}
    if kind.target in ("gpu", "gpu_or_node") and (m := _GPU.match(t)) and int(m[1]) < GPUS:
        return {**out, "target": f"gpu{int(m[1])}", "gpu": int(m[1])}
    if kind.target == "link" and (m := _LINK.match(t)) and int(m[1]) < GPUS and int(m[2]) < LINKS:
        return {**out, "target": t, "gpu": int(m[1]), "link": int(m[2])}
    if (
        kind.target == "xgmi_link"
        and (m := _LINK.match(t))
        and GPUS > int(m[2]) != int(m[1]) < GPUS
    ):
        return {**out, "target": t, "gpu": int(m[1]), "link": int(m[2])}  # link_index = peer
    if kind.target == "port" and (m := _PORT.match(t)) and int(m[1]) < PORTS:
        return {**out, "target": port_name(int(m[1])), "port": int(m[1])}
    want = {
        "gpu": "gpu0..gpu7",
        "gpu_or_node": "'node' or gpu0..gpu7",
        "link": "gpu<0-7>/<0-17>",
        "xgmi_link": "gpu<0-7>/<peer 0-7, not the GPU itself>",
        "port": "mlx5_<0-7>/1",
    }[kind.target]
    raise FaultError(f"bad target {target!r} for {kind.name}: want {want}")


def _mount_target(kind: FaultKind, topo: Topology, node: str, target: str) -> dict[str, Any]:
    """A mount (absolute path) seen from ``cluster`` (every node), a leaf, or one node."""
    if not target.startswith("/") or any(c.isspace() for c in target):
        raise FaultError(f"bad target {target!r} for {kind.name}: want a mount (absolute path)")
    if node in ("", "cluster"):
        return {"node": "cluster", "target": target, "nodes": tuple(range(topo.n_nodes))}
    if node in topo.leaves:
        return {"node": node, "target": target, "nodes": tuple(topo.leaves[node])}
    if node in topo.index:
        return {"node": node, "target": target, "nodes": (topo.index[node],)}
    raise FaultError(f"unknown node {node!r} for {kind.name}: want cluster, a leaf or a node")


def check_parameters(kind: FaultKind, given: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(given, Mapping):
        raise FaultError(f"parameters must be an object, got {type(given).__name__}")
    unknown = sorted(set(given) - set(kind.params))
    if unknown:
        known = ", ".join(kind.params) or "none"
        raise FaultError(
            f"unknown parameter(s) {', '.join(unknown)} for {kind.name} (known: {known})"
        )
    return {k: p.check(k, given[k]) if k in given else p.default for k, p in kind.params.items()}


def make_fault(
    kinds: Mapping[str, FaultKind],
    topo: Topology,
    fid: int,
    kind: str,
    node: str,
    target: str,
    onset: float,
    duration: float | None,
    parameters: Mapping[str, Any],
) -> Fault:
    if kind not in kinds:
        raise FaultError(f"unknown fault kind {kind!r} (known: {', '.join(sorted(kinds))})")
    if not isinstance(node, str) or not isinstance(target, str):
        raise FaultError("node and target must be strings")
    k = kinds[kind]
    where = resolve_target(k, topo, node, target)
    params = check_parameters(k, parameters)
    if problem := k.check(params):
        raise FaultError(f"bad parameters for {kind}: {problem}")
    if duration is not None and (not isinstance(duration, (int, float)) or not duration > 0):
        raise FaultError(f"duration must be a positive number of seconds, got {duration!r}")
    if not isinstance(onset, (int, float)) or not math.isfinite(onset) or onset < 0:
        raise FaultError(f"onset must be a non-negative number of seconds, got {onset!r}")
    end = None if duration is None else float(onset) + float(duration)
    return Fault(
        id=fid,
        kind=kind,
        onset=float(onset),
        end=end,
        parameters=params,
        hardware=k.hardware,
        negative_control=k.negative_control,
        **where,
    )
