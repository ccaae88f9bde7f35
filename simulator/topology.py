"""The fleet's fixed shape: node names, leaf switches, IB ports in rails, GPU identities.

Sits under everything else in :mod:`simulator`: the model's arrays are indexed by the
positions defined here, and the per-node fakes take their names and PCI addresses from it.
Nothing here is random, so a node keeps its identity whatever the seed.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

GPUS = 8
LINKS = 18  # NVLink 4 on H100/H200 SXM
PORTS = 8  # one 400 Gb/s compute port per GPU, port p on rail p
# PCI buses of the 8 GPUs on an HGX H100/H200 board (as nvml_fake.HGX_BUSES).
HGX_BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
SKUS = ("h100", "h200")
# GB200 NVL72 racks (simulator.nvl72): the SKU key, 18 compute trays of 4 GPUs to a rack, and the
# links of each GPU one of the rack's 9 NVLink switch trays carries (2 of its 18)
NVL72_SKU, NVL72_TRAYS, NVL72_GPUS_PER_TRAY = "gb200-nvl72", 18, 4
NVL72_SWITCH_TRAY_LINKS = (0, 9)


def nvl72_rack_of(skus: Sequence[str], i: int) -> int | None:
    """The NVL72 rack (0, 1, ...) of fleet node ``i``: the fleet's GB200 nodes, in order, 18 to
    a rack (``--skus gb200-nvl72:N`` lays them out so); None for other SKUs."""
    if skus[i] != NVL72_SKU:
        return None
    return sum(1 for s in skus[:i] if s == NVL72_SKU) // NVL72_TRAYS


def node_name(i: int) -> str:
    """``gpu-node-001`` ... ``gpu-node-999``, then four digits (``gpu-node-1000``)."""
    return f"gpu-node-{i + 1:03d}"


def leaf_name(i: int) -> str:
    return f"leaf-{i + 1:02d}"


def port_name(p: int) -> str:
    """IB port ``p`` as the fleet names it: HCA ``mlx5_<p>``, port 1."""
    return f"mlx5_{p}/1"


def gpu_uuid(node: str, gpu: int) -> str:
    return "GPU-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"gpuwarden/fleet/{node}/{gpu}"))


def pci_bus_id(gpu: int) -> str:
    """NVML's spelling, e.g. ``00000000:18:00.0``."""
    return f"00000000:{HGX_BUSES[gpu].upper()}:00.0"


def kernel_pci(gpu: int) -> str:
    """The kernel log's spelling in an Xid line, e.g. ``0000:18:00``."""
    return f"0000:{HGX_BUSES[gpu]}:00"


@dataclass(frozen=True)
class Topology:
    """``n_nodes`` nodes of 8 GPUs, grouped ``nodes_per_leaf`` to a leaf switch. With
    ``rails`` the fabric is rail-optimized instead: each group of ``nodes_per_leaf`` nodes is a
    scalable unit (``leaf_of`` still names it, as the rack), and port p of every node of unit
    k is cabled to leaf ``su<k>-rail<p>`` (:attr:`rail_leaves`, :meth:`port_leaf`)."""

    n_nodes: int = 32
    nodes_per_leaf: int = 32
    sku: str = "h100"
    rails: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.n_nodes <= 100_000:
            raise ValueError(f"nodes must be 1..100000, got {self.n_nodes}")
        if self.nodes_per_leaf < 1:
            raise ValueError(f"nodes_per_leaf must be >= 1, got {self.nodes_per_leaf}")
        if self.sku not in SKUS:
            raise ValueError(f"sku must be one of {', '.join(SKUS)}, got {self.sku!r}")

    @cached_property
    def nodes(self) -> tuple[str, ...]:
        return tuple(node_name(i) for i in range(self.n_nodes))

    @cached_property
    def index(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.nodes)}

    @cached_property
    def leaf_of(self) -> tuple[str, ...]:
        return tuple(leaf_name(i // self.nodes_per_leaf) for i in range(self.n_nodes))

    @cached_property
    def leaves(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for i, leaf in enumerate(self.leaf_of):
            out.setdefault(leaf, []).append(i)
        return out

    def port_leaf(self, i: int, p: int) -> str:
        """The leaf port ``p`` of node ``i`` is cabled to (its unit's rail p, or its leaf)."""
        return f"su{i // self.nodes_per_leaf + 1:02d}-rail{p}" if self.rails else self.leaf_of[i]

    @cached_property
    def rail_leaves(self) -> dict[str, tuple[list[int], int]]:
        """Rail leaf -> (its nodes, the port of theirs it holds); empty without ``rails``."""
        if not self.rails:
            return {}
        out: dict[str, tuple[list[int], int]] = {}
        for p in range(PORTS):
            for i in range(self.n_nodes):
                out.setdefault(self.port_leaf(i, p), ([], p))[0].append(i)
        return out

    def node_index(self, node: str) -> int:
        try:
            return self.index[node]
        except KeyError:
            first, last = self.nodes[0], self.nodes[-1]
            raise ValueError(f"unknown node {node!r} (fleet has {first}..{last})") from None


def ibnetdiscover(
    topo: Topology, spines: int = 2, speed: Callable[[int], str] = lambda i: "NDR"
) -> str:
    """The fleet's fabric as ``ibnetdiscover`` (infiniband-diags) prints it: every leaf with
    its nodes' HCA ports (``"<node> mlx5_<p>"``, rdma-ndd's description) and ``spines`` spine
    uplinks, then every spine. Feeds the analyzer's inventory and remediation's topology
    (``ibnetdiscover: FILE``) the way a real fabric scan would. ``speed(i)``: the rate node
    ``i``'s HCA ports trained to ("HDR" for an A100 node); switch-to-switch links are NDR."""

    def guid(kind: int, a: int, b: int = 0) -> str:
        return f"b83fd203{kind:02x}{a:04x}{b:02x}"

    cabled = {
        leaf: [(i, p) for i in nodes for p in range(PORTS)] for leaf, nodes in topo.leaves.items()
    }
    if topo.rails:
        cabled = {leaf: [(i, p) for i in nodes] for leaf, (nodes, p) in topo.rail_leaves.items()}
    leaves = list(cabled.items())
    lines = ["#", "# Topology file: generated by gpuwarden simulate", "#", ""]
    for li, (leaf, ports) in enumerate(leaves):
        lines += [f"switchguid=0x{guid(1, li)}({guid(1, li)})",
                  f'Switch\t64 "S-{guid(1, li)}"\t\t# "MF0;{leaf}:MQM9700/U1" enhanced port 0']  # fmt: skip
        port = 0
        for i, p in ports:
            port += 1
            ca = guid(3, i, p)
            lines.append(
                f'[{port}]\t"H-{ca}"[1]({ca}) \t\t# "{node_name(i)} mlx5_{p}" 4x{speed(i)}'
            )
        for s in range(spines):
            lines.append(f'[{port + 1 + s}]\t"S-{guid(2, s)}"[{li + 1}]\t\t# "MF0;spine-{s + 1:02d}:MQM9700/U1" 4xNDR')  # fmt: skip
        lines.append("")
    for s in range(spines):
        lines += [f"switchguid=0x{guid(2, s)}({guid(2, s)})",
                  f'Switch\t64 "S-{guid(2, s)}"\t\t# "MF0;spine-{s + 1:02d}:MQM9700/U1" enhanced port 0']  # fmt: skip
        for li, (leaf, _) in enumerate(leaves):
            up = len(cabled[leaf]) + 1 + s  # the leaf's uplink port to spine s
            lines.append(f'[{li + 1}]\t"S-{guid(1, li)}"[{up}]\t\t# "MF0;{leaf}:MQM9700/U1" 4xNDR')  # fmt: skip
        lines.append("")
    return "\n".join(lines)
