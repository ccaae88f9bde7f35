"""Failure domains (leaf switch, rack, NVLink domain) per node, for the domain budgets.

Read from a YAML topology file at start-up, in either of two shapes (mixable):

    nodes:   {gpu-node-001: {leaf: leaf-01, rack: r01}}
    domains: {leaf: {leaf-01: [gpu-node-001, gpu-node-002]}}

Kubernetes node labels (``topology.gpuwarden.io/<domain>``) add to this at run time.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from common.settings import SettingsError

Topology = Mapping[str, Mapping[str, str]]  # node -> {domain type -> domain name}


def parse(data: Mapping[str, Any], where: str = "topology") -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    nodes = data.get("nodes") or {}
    domains = data.get("domains") or {}
    if not isinstance(nodes, dict) or not isinstance(domains, dict):
        raise SettingsError(f"{where}: 'nodes' and 'domains' must be mappings")
    for node, doms in nodes.items():
        if not isinstance(doms, dict):
            raise SettingsError(f"{where}: nodes.{node}: expected {{domain: name}}")
        out.setdefault(str(node), {}).update({str(k): str(v) for k, v in doms.items()})
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
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as e:
        raise SettingsError(f"topology {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise SettingsError(f"topology {path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise SettingsError(f"topology {path}: expected a mapping")
    return parse(data, f"topology {path}")
