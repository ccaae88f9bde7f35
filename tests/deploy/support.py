"""Helpers for the deploy tests: a small kustomize build and the generator, loaded from a path.

No kustomize binary is promised on CI, so :func:`build` renders a kustomization itself. It
supports exactly the fields the shipped kustomizations use (resources, namespace, labels,
images, JSON 6902 patches) and refuses any other, so a new field cannot be silently ignored.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
SUPPORTED = {"apiVersion", "kind", "namespace", "labels", "images", "resources", "patches"}
# Flags each service accepts (ARCHITECTURE.md "Contracts").
CONTRACT_FLAGS = {
    "gpuwarden-exporter": {
        "--listen", "--node", "--source", "--sysfs-root", "--kmsg", "--compat",
        "--web-config", "--job-map-dir", "--interval", "--kmsg-state",
    },
    "gpuwarden-analyzer": {
        "--prometheus", "--targets", "--listen", "--interval", "--config", "--alertmanager",
        "--window", "--replica", "--membership",
    },
    "gpuwarden-remediation": {
        "--listen", "--policy", "--state-db", "--backend", "--webhook-token-file",
        "--alertmanager",
    },
}  # fmt: skip
# Kinds without a namespace (the rest get the kustomization's namespace).
CLUSTER_SCOPED = {
    "Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
    "PersistentVolume",
}  # fmt: skip


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("deploy_generate", ROOT / "deploy/generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.load_all(path.read_text(), Loader=Loader) if d]


def build(directory: Path) -> list[dict[str, Any]]:
    """The documents ``kustomize build directory`` would emit (for the supported fields)."""
    return copy.deepcopy(_build(directory.resolve()))


@functools.cache
def _build(directory: Path) -> list[dict[str, Any]]:
    k = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(k) - SUPPORTED
    assert not unknown, f"{directory}: kustomization fields the test builder lacks: {unknown}"
    docs: list[dict[str, Any]] = []
    for entry in k.get("resources", []):
        path = (directory / entry).resolve()
        docs += _build(path) if path.is_dir() else load_docs(path)
    docs = [copy.deepcopy(d) for d in docs]
    for patch in k.get("patches", []):
        _apply_patch(docs, patch)
    for doc in docs:
        _transform(doc, k)
    return docs


def _transform(doc: dict[str, Any], k: dict[str, Any]) -> None:
    meta = doc.setdefault("metadata", {})
    if "namespace" in k and doc["kind"] not in CLUSTER_SCOPED:
        meta["namespace"] = k["namespace"]
    for entry in k.get("labels", []):
        assert not entry.get("includeSelectors"), "selector labels are not supported here"
        meta.setdefault("labels", {}).update(entry["pairs"])
    for image in k.get("images", []):
        for container in _containers(doc):
            name, _, _ = container["image"].partition(":")
            if name == image["name"]:
                new = image.get("newName", name)
                container["image"] = f"{new}:{image['newTag']}" if "newTag" in image else new


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    pod = doc.get("spec", {}).get("template", {}).get("spec", {})
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


def _apply_patch(docs: list[dict[str, Any]], patch: dict[str, Any]) -> None:
    target = patch["target"]
    ops = yaml.safe_load(patch["patch"])
    hits = [
        d for d in docs if d["kind"] == target["kind"] and d["metadata"]["name"] == target["name"]
    ]
    assert hits, f"patch target {target} matches nothing"
    if isinstance(ops, dict) and ops.get("$patch") == "delete":  # strategic merge: delete it
        assert set(ops) == {"$patch", "apiVersion", "kind", "metadata"}, ops
        docs[:] = [d for d in docs if not any(d is h for h in hits)]
        return
    assert isinstance(ops, list), "only JSON 6902 patches and $patch: delete are supported"
    for doc in hits:
        for op in ops:
            _json_patch(doc, op)


def _json_patch(doc: dict[str, Any], op: dict[str, Any]) -> None:
    *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"][1:].split("/")]
    node: Any = doc
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key: Any = int(last) if isinstance(node, list) and last != "-" else last
    if op["op"] == "replace":
        assert key in node if isinstance(node, dict) else key < len(node), f"no {op['path']}"
        node[key] = op["value"]
    elif op["op"] == "add":
        if isinstance(node, list):
            node.append(op["value"]) if key == "-" else node.insert(key, op["value"])
        else:
            node[key] = op["value"]
    elif op["op"] == "remove":
        del node[key]
    else:
        raise AssertionError(f"unsupported patch op {op['op']}")
