"""Failure domains (rack, scalable unit, leaf, spine group, NVLink domain) per node, for the
domain budgets.

Read from a YAML topology file at start-up, in any of these shapes (mixable):

    nodes:   {gpu-node-001: {leaf: leaf-01, rack: r01, su: su1, nvlink_domain: nvl72-01}}
    domains: {leaf: {leaf-01: [gpu-node-001, gpu-node-002]}}
    nodes:   {gpu-node-003: {ports: {mlx5_0/1: su1-rail0, mlx5_1/1: su1-rail1}}}
    ibnetdiscover: fabric.txt   # infiniband-diags output; relative to this file

``ports`` (and ``ibnetdiscover``) name a leaf per IB port, as rail-optimized fabrics are
cabled: the node is then in every one of those leaves, and a ``leaf`` budget counts it in
each (:mod:`common.fabric`). What the file says of a node wins over the discovered fabric.
Kubernetes node labels (``topology.gpuwarden.io/<domain>``) add to this at run time.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from common import fabric
from common.settings import SettingsError

Topology = Mapping[str, Mapping[str, str]]  # node -> {domain type -> domain name}

# libyaml's loader where present: a 12,500-node file in 0.4 s of CPU instead of 4.7 s
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse(
    data: Mapping[str, Any], where: str = "topology", base: Path | None = None
) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    if (disc := data.get("ibnetdiscover")) is not None:
        if not isinstance(disc, str):
            raise SettingsError(f"{where}: 'ibnetdiscover' must be a file name")
        out.update(fabric.load_ibnetdiscover((base or Path()) / disc).domains())
    nodes = data.get("nodes") or {}
    domains = data.get("domains") or {}
    if not isinstance(nodes, dict) or not isinstance(domains, dict):
        raise SettingsError(f"{where}: 'nodes' and 'domains' must be mappings")
    for node, doms in nodes.items():
        if not isinstance(doms, dict):
            raise SettingsError(f"{where}: nodes.{node}: expected {{domain: name}}")
        ports = doms.get("ports") or {}
        if not isinstance(ports, dict):
            raise SettingsError(f"{where}: nodes.{node}.ports: expected {{port: leaf}}")
        mine = out.setdefault(str(node), {})
        mine.update({str(k): str(v) for k, v in doms.items() if k != "ports"})
        mine.update({fabric.port_kind("leaf", str(p)): str(v) for p, v in ports.items()})
    for kind, groups in domains.items():
        if not isinstance(groups, dict):
            raise SettingsError(f"{where}: domains.{kind}: expected {{name: [nodes]}}")
        for name, members in groups.items():
            if not isinstance(members, list):
                raise SettingsError(f"{where}: domains.{kind}.{name}: expected a list of nodes")
            for node in members:
                out.setdefault(str(node), {})[str(kind)] = str(name)
    return out


def load(path: str | Path | None) -> dict[str, dict[str, str]]:
    if path is None:
        return {}
    try:
        data = yaml.load(Path(path).read_text(), Loader=LOADER) or {}
    except OSError as e:
        raise SettingsError(f"topology {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise SettingsError(f"topology {path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise SettingsError(f"topology {path}: expected a mapping")
    return parse(data, f"topology {path}", Path(path).parent)
