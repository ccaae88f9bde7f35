"""Scenario files: a fleet's shape, a fault schedule and/or a random fault mix, from YAML.

Sits at the input edge of :mod:`simulator` (files in ``fixtures/scenarios/``, format in
docs/simulator.md). Loading checks everything and raises :class:`ScenarioError` with the file
and the entry at fault. The random mix draws from its own generator (seed, 1), so adding a
fault class never changes the baseline noise of the fleet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from simulator.faults import KINDS, Fault, FaultError, make_fault
from simulator.fleet import Fleet
from simulator.topology import GPUS, LINKS, PORTS, Topology, port_name

FLEET_KEYS = {
    "nodes",
    "nodes_per_leaf",
    "sku",
    "idle_fraction",
    "mean_job_s",
    "seed",
    "small_job_share",
    "storage_mounts",
    "skus",  # per node, its model (a mixed fleet: h100 beside mi300x)
    "partitions",  # node index -> its GPUs' MIG / compute partition layout (simulator.partitions)
}
TOP_KEYS = {"name", "description", "fleet", "faults", "random"}
FAULT_KEYS = {"kind", "node", "target", "at", "duration", "parameters"}
RANDOM_KEYS = {"horizon_s", "start_s", "priors", "rates", "classes"}
CLASS_KEYS = {"kind", "rate", "parameters", "duration_s", "target"}


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names the file and the entry."""


@dataclass(frozen=True)
class Scenario:
    name: str = ""
    fleet: Mapping[str, Any] = field(default_factory=dict)
    faults: tuple[Mapping[str, Any], ...] = ()
    random: Mapping[str, Any] | None = None


def default_priors() -> dict[str, dict[str, Any]]:
    text = resources.files("simulator").joinpath("priors.yaml").read_text()
    return dict(yaml.safe_load(text))


def _keys(where: str, d: Any, allowed: set[str]) -> Mapping[str, Any]:
    if not isinstance(d, Mapping):
        raise ScenarioError(f"{where}: expected a mapping, got {type(d).__name__}")
    extra = sorted(set(d) - allowed)
    if extra:
        raise ScenarioError(f"{where}: unknown key(s) {', '.join(map(str, extra))}")
    return d


def parse(data: Any, source: str = "<scenario>") -> Scenario:
    d = _keys(source, data or {}, TOP_KEYS)
    fleet = _keys(f"{source}: fleet", d.get("fleet") or {}, FLEET_KEYS)
    faults = d.get("faults") or []
    if not isinstance(faults, list):
        raise ScenarioError(f"{source}: faults must be a list")
    for i, f in enumerate(faults):
        _keys(f"{source}: faults[{i}]", f, FAULT_KEYS)
        if f.get("kind") not in KINDS:
            raise ScenarioError(f"{source}: faults[{i}]: unknown kind {f.get('kind')!r}")
    rnd = d.get("random")
    if rnd is not None:
        rnd = _keys(f"{source}: random", rnd, RANDOM_KEYS)
        _classes(rnd, f"{source}: random")  # checked now, drawn later
    return Scenario(str(d.get("name", Path(source).stem)), fleet, tuple(faults), rnd)


def load(path: str | Path) -> Scenario:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise ScenarioError(f"{path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise ScenarioError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    return parse(data, str(path))


def _classes(rnd: Mapping[str, Any], where: str) -> dict[str, dict[str, Any]]:
    priors = rnd.get("priors", "default")
    if priors not in ("default", "none"):
        raise ScenarioError(f"{where}: priors must be 'default' or 'none', got {priors!r}")
    classes = default_priors() if priors == "default" else {}
    for name, cls in (rnd.get("classes") or {}).items():
        classes[name] = dict(_keys(f"{where}: classes.{name}", cls, CLASS_KEYS))
    for name, rate in (rnd.get("rates") or {}).items():
        if name not in classes:
            raise ScenarioError(f"{where}: rates: unknown class {name!r}")
        classes[name] = {**classes[name], "rate": rate}
    for name, cls in classes.items():
        if cls.get("kind") not in KINDS:
            raise ScenarioError(f"{where}: class {name}: unknown kind {cls.get('kind')!r}")
        rate = cls.get("rate")
        if not isinstance(rate, (int, float)) or isinstance(rate, bool) or rate < 0:
            raise ScenarioError(f"{where}: class {name}: rate must be a number >= 0, got {rate!r}")
    return classes


def _draw(rng: np.random.Generator, kind: str, name: str, v: Any) -> Any:
    param = KINDS[kind].params.get(name)
    if not isinstance(v, list):
        return v
    if param is not None and param.choices:
        return int(rng.choice(v))
    if len(v) != 2:
        raise ScenarioError(f"parameter {name}: a range is [low, high], got {v!r}")
    lo, hi = v
    if param is not None and isinstance(param.default, int) and not isinstance(param.default, bool):
        return int(rng.integers(int(lo), int(hi) + 1))
    return float(rng.uniform(lo, hi))


def _target(rng: np.random.Generator, kind: str, want: str | None) -> str:
    t = want or KINDS[kind].target
    g = int(rng.integers(GPUS))
    return {
        "gpu": f"gpu{g}",
        "gpu_or_node": f"gpu{g}",
        "node": "node",
        "switch": "",
        "link": f"gpu{g}/{int(rng.integers(LINKS))}",
        "xgmi_link": f"gpu{g}/{(g + 1 + int(rng.integers(GPUS - 1))) % GPUS}",
        "port": port_name(int(rng.integers(PORTS))),
        "mount": "/mnt/ckpt",
    }[t]


def random_faults(rnd: Mapping[str, Any], topo: Topology, seed: int) -> list[dict[str, Any]]:
    """Fault entries (kind, node, target, at, duration, parameters) for a random mix."""
    rng = np.random.default_rng([seed, 1])
    horizon = float(rnd.get("horizon_s", 86400.0))
    start = float(rnd.get("start_s", 0.0))
    node_days = topo.n_nodes * horizon / 86400.0
    out = []
    for name, cls in sorted(_classes(rnd, "random").items()):
        count = rng.poisson(float(cls["rate"]) * node_days / 1000.0)
        for at in np.sort(rng.uniform(start, start + horizon, count)):
            kind = cls["kind"]
            dur = cls.get("duration_s")
            params = {k: _draw(rng, kind, k, v) for k, v in (cls.get("parameters") or {}).items()}
            out.append(
                {
                    "kind": kind,
                    "node": topo.nodes[int(rng.integers(topo.n_nodes))],
                    "target": _target(rng, kind, cls.get("target")),
                    "onset": float(at),
                    "duration": _draw(rng, kind, "duration_s", dur) if dur else None,
                    "parameters": params,
                    "class": name,
                }
            )
    return sorted(out, key=lambda f: (f["onset"], f["node"]))


def schedule(sc: Scenario, topo: Topology, seed: int, start: float = 0.0) -> list[dict[str, Any]]:
    """Every fault entry of the scenario (schedule, then random mix), checked against ``topo``."""
    out = [{**f, "onset": start + float(f.get("at", 0.0))} for f in sc.faults]
    for f in out:
        f.pop("at", None)
    if sc.random is not None:
        out += random_faults(sc.random, topo, seed)
    return out


def apply(sc: Scenario, fleet: Fleet) -> list[Fault]:
    """Schedule the scenario's faults on ``fleet``: all are checked first, then all added."""
    entries = schedule(sc, fleet.topo, fleet.seed, fleet.t)
    for i, f in enumerate(entries):
        try:
            make_fault(
                KINDS,
                fleet.topo,
                0,
                f["kind"],
                f.get("node", ""),
                str(f.get("target", "")),
                f["onset"],
                f.get("duration"),
                f.get("parameters") or {},
            )
        except FaultError as e:
            raise ScenarioError(f"{sc.name}: fault {i} ({f['kind']}): {e}") from None
    return fleet.schedule({**f, "target": str(f.get("target", ""))} for f in entries)


def build(sc: Scenario, **overrides: Any) -> Fleet:
    """A fleet shaped by the scenario's ``fleet:`` section (``overrides`` that are not None
    win, e.g. command-line flags), with the scenario's faults scheduled on it."""
    opts = {**sc.fleet, **{k: v for k, v in overrides.items() if v is not None}}
    try:
        fleet = Fleet(**opts)
    except (TypeError, ValueError) as e:
        raise ScenarioError(f"{sc.name}: fleet: {e}") from None
    apply(sc, fleet)
    return fleet
