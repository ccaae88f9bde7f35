"""The fabric as clusters are built: failure domains per node and per InfiniBand port.

Shared by the analyzer (switch correlation) and remediation (domain budgets), which may not
import each other; pure parsing, no I/O beyond reading a file.

Domains are a flat ``{kind: name}`` per node, as Kubernetes labels are. Kinds in use:
``rack``, ``su`` (scalable unit), ``leaf``, ``spine_group``, ``nvlink_domain`` (an NVL72
rack's NVLink switch domain). A node on a rail-optimized fabric (port i of every node of a
scalable unit on leaf i, the DGX SuperPOD design) sits on one leaf per port: those are the
kinds ``leaf.<port>`` (``leaf.mlx5_0.1`` for port ``mlx5_0/1``, a spelling that is also a
valid Kubernetes label name), and whatever speaks of ``leaf`` covers every one of them
(:func:`names`).

Sources: a YAML file (each part parses its own), node labels (:func:`from_labels`), and
``ibnetdiscover`` output from infiniband-diags (:func:`parse_ibnetdiscover`): which leaf each
HCA port is cabled to, and which spine group each leaf uplinks to.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from common.settings import SettingsError

KINDS = ("rack", "su", "leaf", "spine_group", "nvlink_domain")
LABEL_PREFIX = "topology.gpuwarden.io/"
# GPU feature discovery (NVIDIA k8s-device-plugin) labels each GB200 node with its NVLink
# clique, "<cluster UUID>.<clique id>": the nodes one NVL72 NVLink switch domain joins.
CLIQUE_LABEL = "nvidia.com/gpu.clique"


def fabric_domain(cluster_uuid: str, clique_id: str) -> str:
    """The NVLink domain a GPU's fabric info names (nvmlDeviceGetGpuFabricInfoV: cluster UUID
    and clique id), spelt as GFD spells its ``nvidia.com/gpu.clique`` label,
    ``<cluster UUID>.<clique id>``; "" for a GPU in no multi-node domain (no cluster UUID)."""
    return f"{cluster_uuid}.{clique_id}" if cluster_uuid else ""


def domains_from_fabric(gpus: Iterable[tuple[str, str, str]]) -> dict[str, str]:
    """node -> NVLink domain from ``(node, cluster UUID, clique id)`` per GPU: the domain most
    of the node's GPUs name (a GPU that lost its registration names none, and is outvoted)."""
    votes: dict[str, Counter[str]] = defaultdict(Counter)
    for node, cluster, clique in gpus:
        dom = fabric_domain(cluster, clique)
        if dom:
            votes[node][dom] += 1
    return {node: c.most_common(1)[0][0] for node, c in votes.items()}


def nvlink_domains(fabric: Mapping[str, str], labels: Mapping[str, str]) -> dict[str, str]:
    """node -> NVLink domain: what the GPUs' fabric info says first (the hardware's own view),
    then node labels or the inventory for nodes whose GPUs report no fabric."""
    return {**dict(labels), **dict(fabric)}


def port_kind(kind: str, port: str) -> str:
    """``leaf`` + ``mlx5_0/1`` -> ``leaf.mlx5_0.1``."""
    return f"{kind}.{port.replace('/', '.')}"


def names(domains: Mapping[str, str], kind: str) -> set[str]:
    """Every ``kind`` domain a node is in: the whole-node one and one per port."""
    return {v for k, v in domains.items() if k == kind or k.startswith(kind + ".")}


def from_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """A node's domains from its Kubernetes labels (``topology.gpuwarden.io/<kind>``, a
    per-port leaf as ``topology.gpuwarden.io/leaf.mlx5_0.1``, and GFD's NVLink clique)."""
    out = {k[len(LABEL_PREFIX) :]: v for k, v in labels.items() if k.startswith(LABEL_PREFIX)}
    if CLIQUE_LABEL in labels and "nvlink_domain" not in out:
        out["nvlink_domain"] = labels[CLIQUE_LABEL]
    return out


@dataclass(frozen=True)
class Discovered:
    """What ``ibnetdiscover`` says: per (node, port) its leaf and link speed, per leaf its
    spine group (the spines it uplinks to, joined when they share a leaf)."""

    port_leaf: Mapping[tuple[str, str], str] = field(default_factory=dict)
    port_speed: Mapping[tuple[str, str], str] = field(default_factory=dict)  # "NDR", "HDR"
    spine_group: Mapping[str, str] = field(default_factory=dict)

    def domains(self) -> dict[str, dict[str, str]]:
        """node -> domains: ``leaf.<port>`` and ``spine_group.<port>`` per port, plus the
        whole-node ``leaf``/``spine_group`` where every port of the node shares one."""
        out: dict[str, dict[str, str]] = defaultdict(dict)
        for (node, port), leaf in sorted(self.port_leaf.items()):
            out[node][port_kind("leaf", port)] = leaf
            if leaf in self.spine_group:
                out[node][port_kind("spine_group", port)] = self.spine_group[leaf]
        for doms in out.values():
            for kind in ("leaf", "spine_group"):
                if len(found := names(doms, kind)) == 1:
                    doms[kind] = found.pop()
        return dict(out)


_HEADER = re.compile(r'^(Switch|Ca|Rt)\s+\d+\s+"([SHR]-[0-9a-fA-F]+)"\s*(?:#\s*"([^"]*)")?')
_PORT = re.compile(
    r'^\[(\d+)\](?:\([0-9a-fA-F]+\))?\s+"([SHR]-[0-9a-fA-F]+)"\[(\d+)\]'
    r"(?:\([0-9a-fA-F]+\))?\s*#\s*(.*)$"
)
_SPEED = re.compile(r"\b\d+x([A-Z]+)\s*$")
_MANAGED = re.compile(r"^MF0;([^:]+):")  # managed switch: "MF0;<hostname>:<model>/U1"


def _switch_name(desc: str, guid: str) -> str:
    m = _MANAGED.match(desc)
    return m.group(1) if m else (desc.strip() or guid)


@dataclass
class _Graph:
    desc: dict[str, str] = field(default_factory=dict)  # guid -> node description
    hosts: dict[str, list[tuple[str, str, str]]] = field(default_factory=dict)
    links: set[tuple[str, str]] = field(default_factory=set)  # switch guid pairs


def parse_ibnetdiscover(text: str, where: str = "ibnetdiscover") -> Discovered:
    """:class:`Discovered` from ``ibnetdiscover`` output (its default text format: blocks of
    ``Switch``/``Ca`` lines, each followed by one ``[port]`` line per cabled port). HCAs are
    named by their node description, which rdma-ndd sets to ``"<hostname> <device>"``."""
    g, current = _Graph(), ""
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#") or "=" in line.split()[0]:
            continue
        if m := _HEADER.match(line):
            current = m.group(2) if m.group(1) == "Switch" else ""
            g.desc[m.group(2)] = m.group(3) or ""
            if current:
                g.hosts.setdefault(current, [])
            continue
        m = _PORT.match(line)
        if m is None:
            raise SettingsError(f"{where}: line {no}: not a port line of ibnetdiscover output")
        if not current:
            continue  # a CA's own view of its link: the switch block says the same
        peer, peer_port, rest = m.group(2), m.group(3), m.group(4)
        if peer.startswith("H-"):
            desc = rest.split('"')[1] if rest.count('"') >= 2 else ""
            speed = _SPEED.search(rest)
            g.hosts[current].append((desc, peer_port, speed.group(1) if speed else ""))
        elif peer.startswith("S-"):
            g.links.add((min(current, peer), max(current, peer)))
            if rest.count('"') >= 2:
                g.desc.setdefault(peer, rest.split('"')[1])
    if not g.hosts:
        raise SettingsError(f"{where}: no Switch blocks (not ibnetdiscover output?)")
    return _discovered(g, where)


def _discovered(g: _Graph, where: str) -> Discovered:
    name = {guid: _switch_name(g.desc.get(guid, ""), guid) for guid in g.hosts}
    port_leaf, port_speed = {}, {}
    for sw, hosts in g.hosts.items():
        for desc, ca_port, speed in hosts:
            parts = desc.split()
            if len(parts) < 2:
                raise SettingsError(
                    f"{where}: HCA description {desc!r} is not '<hostname> <device>' "
                    "(rdma-ndd's default); set it so the port can be named"
                )
            key = (parts[0], f"{parts[1]}/{ca_port}")
            port_leaf[key], port_speed[key] = name[sw], speed
    return Discovered(port_leaf, port_speed, _spine_groups(g, name))


def _spine_groups(g: _Graph, name: dict[str, str]) -> dict[str, str]:
    """Leaves are switches with HCAs; their switch neighbours are spines. Spines sharing a
    leaf are one group (rail-aligned spine groups in a SuperPOD; one group in a plain fat
    tree), named after its first spine."""
    leaves = {sw for sw, hosts in g.hosts.items() if hosts}
    up: dict[str, set[str]] = defaultdict(set)
    for a, b in g.links:
        if a in leaves and b not in leaves:
            up[a].add(b)
        elif b in leaves and a not in leaves:
            up[b].add(a)
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for spines in up.values():
        first, *rest = sorted(spines)
        for s in rest:
            parent[root(s)] = root(first)
    label = {s: _switch_name(g.desc.get(s, ""), s) for s in parent}
    group_name: dict[str, str] = {}
    for s in sorted(parent, key=lambda s: label[s]):
        group_name.setdefault(root(s), label[s])
    return {name[lf]: group_name[root(min(sp))] for lf, sp in up.items()}


def load_ibnetdiscover(path: str | Path) -> Discovered:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise SettingsError(f"ibnetdiscover {path}: {e.strerror or e}") from None
    return parse_ibnetdiscover(text, f"ibnetdiscover {path}")
