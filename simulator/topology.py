"""The fleet's fixed shape: node names, leaf switches, IB ports in rails, GPU identities.

Sits under everything else in :mod:`simulator`: the model's arrays are indexed by the
positions defined here, and the per-node fakes take their names and PCI addresses from it.
Nothing here is random, so a node keeps its identity whatever the seed.
"""

from __future__ import annotations

import uuid as uuidlib
from dataclasses import dataclass
from functools import cached_property

GPUS = 8
LINKS = 18  # NVLink 4 on H100/H200 SXM
PORTS = 8  # one 400 Gb/s compute port per GPU, port p on rail p
# PCI buses of the 8 GPUs on an HGX H100/H200 board (as nvml_fake.HGX_BUSES).
HGX_BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
SKUS = ("h100", "h200")


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
    """``n_nodes`` nodes of 8 GPUs, grouped ``nodes_per_leaf`` to a leaf switch."""

    n_nodes: int = 32
    nodes_per_leaf: int = 32
    sku: str = "h100"

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

    def node_index(self, node: str) -> int:
        try:
            return self.index[node]
        except KeyError:
            first, last = self.nodes[0], self.nodes[-1]
            raise ValueError(f"unknown node {node!r} (fleet has {first}..{last})") from None
