"""Which replica judges which comparison domains: pure functions, no I/O.

Sits between the source's window (completed by the operator's inventory, which may be the
only place a node's leaf, rack or NVLink domain is named) and the engine in the sharded mode.
Nodes are compared inside bounded domains (a job, an NVLink domain such as an NVL72 rack, a
leaf switch, a rail leaf of a rail-optimized fabric, a rack: an administrator's power cap is
told from a fault by what the rest of its rack runs at); a replica must see each domain
whole, so the ownership unit
is a connected group of nodes that share any domain (a job spanning two leaves joins them: the
job belongs to one replica whole). Units go to replicas by rendezvous (highest random weight)
hashing, so when a replica joins or leaves only the units it gains or loses move
(Thaler & Ravishankar, "Using name-based mappings to increase hit rates", IEEE/ACM ToN 1998).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence

from analyzer.window import Window


def weight(unit: str, replica: str) -> int:
    """The rendezvous weight of ``unit`` on ``replica`` (stable across processes and hosts:
    never Python's salted ``hash``)."""
    digest = hashlib.blake2b(f"{replica}\0{unit}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner(unit: str, replicas: Sequence[str]) -> str:
    """The replica that owns ``unit`` among ``replicas`` (ties broken by name)."""
    if not replicas:
        raise ValueError("no replicas to own anything")
    return max(replicas, key=lambda r: (weight(unit, r), r))


def assign(units: Iterable[str], replicas: Sequence[str]) -> dict[str, list[str]]:
    """``{replica: [units]}`` for every replica (an empty list where it owns nothing)."""
    out: dict[str, list[str]] = {r: [] for r in replicas}
    for u in sorted(units):
        out[owner(u, replicas)].append(u)
    return out


class _Union:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def join(self, members: Iterable[int]) -> None:
        it = iter(members)
        first = next(it, None)
        if first is None:
            return
        root = self.find(first)
        for m in it:
            other = self.find(m)
            if other != root:
                self.parent[other] = root


def domains(window: Window) -> dict[str, list[int]]:
    """Every comparison domain of the window: ``{"job/<id>" | "nvlink/<d>" | "leaf/<l>" |
    "rack/<r>": [node indices]}`` (a rail leaf of a per-port fabric is a leaf like any other)."""
    n = len(window.nodes)
    out: dict[str, list[int]] = {}
    for job, members in window.jobs.items():
        out.setdefault(f"job/{job}", []).extend(m for m in members if 0 <= m < n)
    kinds = (("nvlink", window.nvlink_domain_of), ("leaf", window.leaf_of),
             ("rack", window.rack_of))  # fmt: skip
    for kind, of in kinds:
        for node, name in of.items():
            if 0 <= node < n:
                out.setdefault(f"{kind}/{name}", []).append(node)
    for (node, _port), leaf in window.port_leaf.items():
        if 0 <= node < n:
            out.setdefault(f"leaf/{leaf}", []).append(node)
    return out


def units(window: Window) -> dict[str, tuple[int, ...]]:
    """The ownership units: ``{key: node indices}``, a partition of the window's nodes into
    groups closed under every domain. The key is the unit's first physical domain (leaf,
    NVLink domain, rack) by name, else its first job (a node in no domain is its own unit,
    ``node/<name>``): the same on every replica that reads the same topology, and stable
    while jobs come and go on the same hardware, so a unit's detector memory (streaks,
    open XID incidents) stays with one replica."""
    n = len(window.nodes)
    uf = _Union(n)
    named = domains(window)
    for members in named.values():
        uf.join(members)
    key: dict[int, str] = {}
    for name in sorted(named, key=lambda d: (d.startswith("job/"), d)):
        for m in named[name]:
            root = uf.find(m)
            key.setdefault(root, name)
    groups: dict[str, list[int]] = {}
    for i in range(n):
        root = uf.find(i)
        groups.setdefault(key.get(root, f"node/{window.nodes[i]}"), []).append(i)
    return {k: tuple(v) for k, v in groups.items()}


def owned_nodes(parts: Mapping[str, tuple[int, ...]], mine: Iterable[str]) -> list[int]:
    """The sorted node indices of the units in ``mine``."""
    return sorted(i for u in mine for i in parts.get(u, ()))
