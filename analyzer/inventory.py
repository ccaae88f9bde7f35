"""The fleet's inventory: what each node is (GPU model, fabric, rack, leaf, admin power cap).

Sits between the source and the detectors: the source fills what the exporters say
(``gpu_info``'s ``name`` -> :attr:`Window.sku`, through :func:`exporter.catalog_specs.model_key`);
the operator's inventory file (``--inventory FILE``, YAML) overrides and completes it, and
:meth:`Inventory.apply` folds it into each window. Detectors then compare like with like.

File format (every key optional; ``defaults`` apply to every node the file does not name)::

    defaults: {hca: NDR}
    nodes:
      gpu-node-001: {model: a100-sxm, hca: HDR, rack: r01, leaf: leaf-01, power_limit_w: 300}
      gpu-node-002: {model: "NVIDIA H100 80GB HBM3", rack: r02}
      gpu-node-003: {ports: {mlx5_0/1: su1-rail0, mlx5_1/1: su1-rail1}}  # leaf per port
      gb200-001: {nvlink_domain: nvl72-01}  # an NVL72 rack's NVLink switch domain

``model`` is a key of :data:`exporter.catalog_specs.BY_KEY` or an NVML name; ``hca`` is HDR,
NDR, XDR (or EDR); ``power_limit_w`` is a power limit the administrator set on purpose (it
is configuration, never a fault); ``ports`` maps each IB port to its leaf switch
(rail-optimized fabrics: port i of every node of a scalable unit on leaf i; in ``defaults``
it describes a whole scalable unit at once). A top-level ``ibnetdiscover: FILE`` (output of
infiniband-diags' ``ibnetdiscover``, relative to the inventory file) fills every node's
``ports`` from the fabric as cabled (:mod:`common.fabric`); the file's own ``ports`` win.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from analyzer.window import Window
from common import fabric
from common.settings import SettingsError
from exporter import catalog_specs

FIELDS = ("model", "hca", "rack", "leaf", "power_limit_w", "ports", "nvlink_domain")


@dataclass(frozen=True)
class NodeInventory:
    model: str = ""
    hca: str = ""
    rack: str = ""
    leaf: str = ""
    power_limit_w: float | None = None
    ports: Mapping[str, str] = field(default_factory=dict)  # IB port (mlx5_0/1) -> its leaf
    nvlink_domain: str = ""  # the NVL72 rack (NVLink switch domain) the node is in


@dataclass(frozen=True)
class Inventory:
    nodes: Mapping[str, NodeInventory] = field(default_factory=dict)
    defaults: NodeInventory = NodeInventory()

    def of(self, node: str) -> NodeInventory:
        return self.nodes.get(node, self.defaults)

    def apply(self, w: Window) -> Window:
        """``w`` with the inventory's model, fabric, rack, leaf and power caps folded in;
        what the file does not say stays as the source delivered it."""
        if w.empty or (not self.nodes and self.defaults == NodeInventory()):
            return w
        sku, hca = list(_per_node(w.sku, w.nodes)), list(_per_node(w.hca, w.nodes))
        rack, leaf, cap = dict(w.rack_of), dict(w.leaf_of), dict(w.power_cap_w)
        port_leaf, nvl = dict(w.port_leaf), dict(w.nvlink_domain_of)
        port_ix = {p: j for j, p in enumerate(w.ports)}
        for i, name in enumerate(w.nodes):
            inv = self.of(name)
            for port, lf in inv.ports.items():
                if port in port_ix:
                    port_leaf[(i, port_ix[port])] = lf
            if inv.model:
                sku[i] = catalog_specs.model_key(inv.model)
            if inv.hca:
                hca[i] = inv.hca
            if inv.rack:
                rack[i] = inv.rack
            if inv.leaf:
                leaf[i] = inv.leaf
            if inv.power_limit_w is not None:
                cap[i] = inv.power_limit_w
            if inv.nvlink_domain and i not in w.nvlink_domain_of:  # the GPUs' fabric info first
                nvl[i] = inv.nvlink_domain
        return replace(w, sku=tuple(sku), hca=tuple(hca), rack_of=rack, leaf_of=leaf,
                       power_cap_w=cap, port_leaf=port_leaf, nvlink_domain_of=nvl)  # fmt: skip


def _per_node(values: tuple[str, ...], nodes: tuple[str, ...]) -> tuple[str, ...]:
    return values if len(values) == len(nodes) else ("",) * len(nodes)


def parse_inventory(doc: Any, where: str = "inventory", base: Path | None = None) -> Inventory:
    """An :class:`Inventory` from a parsed YAML document; SettingsError naming the bad entry."""
    if doc is None:
        return Inventory()
    if not isinstance(doc, Mapping) or set(doc) - {"defaults", "nodes", "ibnetdiscover"}:
        raise SettingsError(
            f"{where}: expected a mapping with 'defaults', 'nodes' and/or 'ibnetdiscover'"
        )
    nodes = doc.get("nodes") or {}
    if not isinstance(nodes, Mapping):
        raise SettingsError(f"{where}: 'nodes' must map node names to their inventory")
    out = {str(n): _node(v, f"{where}: node {n}") for n, v in nodes.items()}
    defaults = _node(doc.get("defaults") or {}, f"{where}: defaults")
    if (disc := doc.get("ibnetdiscover")) is not None:
        if not isinstance(disc, str):
            raise SettingsError(f"{where}: 'ibnetdiscover' must be a file name")
        cabled: dict[str, dict[str, str]] = {}
        found = fabric.load_ibnetdiscover((base or Path()) / disc)
        for (node, port), leaf in found.port_leaf.items():
            cabled.setdefault(node, {})[port] = leaf
        for node, ports in cabled.items():
            inv = out.get(node, defaults)
            out[node] = replace(inv, ports={**ports, **inv.ports})
    return Inventory(nodes=out, defaults=defaults)


def load_inventory(path: str | Path) -> Inventory:
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise SettingsError(f"inventory {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise SettingsError(f"inventory {path}: not YAML{at}") from None
    return parse_inventory(doc, f"inventory {path}", Path(path).parent)


def _node(v: Any, where: str) -> NodeInventory:
    if not isinstance(v, Mapping):
        raise SettingsError(f"{where}: expected a mapping of {', '.join(FIELDS)}")
    unknown = set(v) - set(FIELDS)
    if unknown:
        raise SettingsError(f"{where}: unknown field(s) {', '.join(sorted(map(str, unknown)))}")
    hca = str(v.get("hca") or "").upper()
    if hca and hca not in catalog_specs.HCA_RATES:
        raise SettingsError(f"{where}: hca must be one of {', '.join(catalog_specs.HCA_RATES)}")
    cap = v.get("power_limit_w")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float))
                            or cap <= 0):  # fmt: skip
        raise SettingsError(f"{where}: power_limit_w must be a positive number of watts")
    ports = v.get("ports") or {}
    if not isinstance(ports, Mapping) or not all(isinstance(x, str) for x in ports.values()):
        raise SettingsError(f"{where}: ports must map IB ports (mlx5_0/1) to leaf names")
    return NodeInventory(
        ports={str(k): str(x) for k, x in ports.items()},
        model=str(v.get("model") or ""),
        hca=hca,
        rack=str(v.get("rack") or ""),
        leaf=str(v.get("leaf") or ""),
        nvlink_domain=str(v.get("nvlink_domain") or ""),
        power_limit_w=float(cap) if cap is not None else None,
    )
