"""`gpuwarden simulate`: serve a simulated fleet over HTTP, with fault injection and truth.

Flags > environment (``GPUWARDEN_<FIELD>``) > YAML ``--config`` > the scenario's ``fleet:``
section > defaults. A bad value, or a bad scenario, stops the start with one line on stderr
and exit code 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from aiohttp import web

from common.settings import SettingsError, load
from exporter.catalog_specs import HCA_RATES
from exporter.settings import parse_listen
from simulator import scenario as scenarios
from simulator import workers
from simulator.fleet import Fleet
from simulator.model import SKUS
from simulator.server import make_app
from simulator.simulator import Simulator
from simulator.telemetry import HELP, TELEMETRIES, is_dcgm
from simulator.topology import ibnetdiscover

log = logging.getLogger("gpuwarden.simulate")


def hca_speed(fleet: Fleet) -> Callable[[int], str]:
    """Node index -> the IB rate name its model's HCA ports train to (A100 nodes: HDR)."""
    names = {rate: name for name, rate in HCA_RATES.items()}
    return lambda i: names.get(SKUS[fleet.sku_of[i]].hca_bytes_s, "NDR")


@dataclass(frozen=True)
class SimulateSettings:
    nodes: int | None = None  # None: the scenario's, else 32
    listen: str = "127.0.0.1:9400"
    seed: int | None = None  # None: the scenario's, else 0
    scenario: str | None = None
    file_sd: str | None = None
    ibnetdiscover: str | None = None  # write the fabric as ibnetdiscover prints it
    compat: str | None = None
    telemetry: str = "gpuwarden"  # dcgm-exporter: every node as dcgm-exporter + node_exporter
    dme_prefix: str = ""  # AMD nodes: DME's field prefix (MetricsFieldPrefix; amd_ in its example)
    time_scale: float = 1.0
    tick: float = 1.0
    nodes_per_leaf: int | None = None
    sku: str | None = None
    skus: str | None = None  # "h100:4,a100:2": racks (leaves) of each model, in order
    power_caps: str | None = None  # "leaf-06:500": an administrator's cap per rack, watts
    signals: str | None = None  # "activity,steps": profiling activity, published step times
    storage_mounts: str | None = None  # "/mnt/ckpt,...": checkpoint mounts every node probes
    duration: float = 0.0  # 0: until SIGINT/SIGTERM
    max_staleness: float = 0.0  # serve a node's last body for up to this long (load shedding)
    workers: int = 1  # processes; node i is served by worker i % workers on port + i % workers
    shard: int | None = None  # internal: this process is worker <shard> of a --workers run
    epoch: float | None = None  # internal: the wall time all workers count virtual time from

    def __post_init__(self) -> None:
        parse_listen(self.listen)
        if self.nodes is not None and not 1 <= self.nodes <= 100_000:
            raise ValueError(f"--nodes: {self.nodes} is outside 1..100000")
        if self.compat not in (None, "", "dcgm"):
            raise ValueError(f"--compat: {self.compat!r} is not dcgm")
        if self.telemetry not in TELEMETRIES:
            raise ValueError(f"--telemetry: {self.telemetry!r} is not one of {TELEMETRIES}")
        if self.dme_prefix and not re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*_", self.dme_prefix):
            raise ValueError(f"--dme-prefix: {self.dme_prefix!r} is not a metric-name prefix "
                             "ending in _ (e.g. amd_)")  # fmt: skip
        if not 0 < self.time_scale <= 1e6:
            raise ValueError(f"--time-scale: {self.time_scale} is outside (0, 1e6]")
        if not 0.01 <= self.tick <= 3600:
            raise ValueError(f"--tick: {self.tick} s is outside 0.01..3600")
        if self.duration < 0:
            raise ValueError(f"--duration: {self.duration} must be >= 0")
        if self.max_staleness < 0:
            raise ValueError(f"--max-staleness: {self.max_staleness} must be >= 0")
        if not 1 <= self.workers <= 64:
            raise ValueError(f"--workers: {self.workers} is outside 1..64")
        racks(self.skus or "", 1)
        caps(self.power_caps or "")
        if self.workers > 1 and parse_listen(self.listen)[1] == 0:
            raise ValueError("--workers > 1 needs a fixed --listen port (workers use port + i)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpuwarden simulate", description=__doc__.splitlines()[0])
    a = p.add_argument
    a("--nodes", help="number of nodes (default: the scenario's, else 32)")
    a("--listen", help="HOST:PORT (default 127.0.0.1:9400)")
    a("--seed", help="seed; the same seed and scenario replay bit for bit (default 0)")
    a("--scenario", help="scenario YAML (fixtures/scenarios/*.yaml)")
    a("--file-sd", help="write Prometheus file_sd targets (one per node) to this path")
    a("--ibnetdiscover", help="write the fleet's fabric in ibnetdiscover's format to this path")
    a("--compat", choices=["dcgm"], help="also render dcgm-exporter's names and labels")
    a("--telemetry", choices=TELEMETRIES, help=HELP)
    a("--dme-prefix", help="AMD nodes: the prefix before DME's field names (e.g. amd_; "
      "default none)")  # fmt: skip
    a("--time-scale", help="virtual seconds per wall second (default 1)")
    a("--tick", help="wall seconds between model steps at most (default 1)")
    a("--nodes-per-leaf", help="nodes under one leaf switch (default 32)")
    a("--sku", choices=["h100", "h200"], help="GPU model (default h100)")
    a(
        "--skus",
        help="a mixed fleet, rack by rack: MODEL:RACKS,... (e.g. h100:4,a100:2; models "
        f"{', '.join(SKUS)}); a rack is --nodes-per-leaf nodes, and --nodes defaults to the sum",
    )
    a("--power-caps", help="administrator power caps per rack: LEAF:WATTS,... (leaf-06:500)")
    a("--signals", help="straggler signals beyond NVML: activity (SM/tensor profiling), steps "
      "(per-rank step times the jobs publish); comma-separated")  # fmt: skip
    a("--duration", help="stop after this many wall seconds (default: run until Ctrl-C)")
    a("--storage-mounts", help="checkpoint mounts every node probes: PATH,... (default: the "
      "scenario's, else none; a storage fault names its own)")  # fmt: skip
    a(
        "--max-staleness",
        help="serve a node's last body for up to this many seconds unless a "
        "fault touched it (sheds load on big fleets; default 0: always fresh)",
    )
    a("--workers", help="processes serving the nodes, on ports PORT..PORT+N-1 (default 1)")
    a("--shard", help=argparse.SUPPRESS)
    a("--epoch", help=argparse.SUPPRESS)
    a("--config", help="YAML file with any of the settings above")
    a("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p


def file_sd(sim: Simulator, addresses: list[str]) -> list[dict[str, object]]:
    """One target group per node: its worker's address, its path, and a ``node`` label; on
    dcgm-exporter telemetry no ``node`` label but an ``instance`` naming the node's host, as
    a real fleet's per-node exporters would have."""
    dcgm = is_dcgm(sim.telemetry)
    return [
        {
            "targets": [addresses[i % len(addresses)]],
            "labels": {
                "__metrics_path__": n["metrics_path"],
                **({"instance": f"{n['node']}:9400"} if dcgm else {"node": n["node"]}),
            },
        }
        for i, n in enumerate(sim.nodes())
    ]


def write_file_sd(path: str, groups: list[dict[str, object]]) -> None:
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(groups, indent=1))
    os.replace(tmp, path)  # atomic: Prometheus never reads half a file


def racks(spec: str, per_rack: int) -> tuple[str, ...] | None:
    """``h100:4,a100:2`` -> a model per node, ``per_rack`` nodes to a rack; None for ""."""
    if not spec:
        return None
    out: list[str] = []
    for part in spec.split(","):
        model_, _, count = part.strip().partition(":")
        if model_ not in SKUS or not count.isdigit() or int(count) < 1:
            raise ValueError(f"--skus: {part!r} is not MODEL:RACKS (models {', '.join(SKUS)})")
        out += [model_] * (int(count) * RACK_NODES.get(model_, per_rack))
    return tuple(out)


RACK_NODES = {"gb200-nvl72": 18}  # an NVL72 rack: 18 compute trays (simulator.nvl72)


def caps(spec: str) -> dict[str, float] | None:
    """``leaf-06:500,leaf-07:450`` -> {leaf: watts}; None for ""."""
    if not spec:
        return None
    out = {}
    for part in spec.split(","):
        leaf, _, watts = part.strip().rpartition(":")
        try:
            out[leaf] = float(watts)
        except ValueError:
            raise ValueError(f"--power-caps: {part!r} is not LEAF:WATTS") from None
        if not leaf or not out[leaf] > 0:
            raise ValueError(f"--power-caps: {part!r} is not LEAF:WATTS (watts > 0)")
    return out


def make_simulator(s: SimulateSettings) -> Simulator:
    sc = scenarios.load(s.scenario) if s.scenario else scenarios.Scenario()
    per_rack = s.nodes_per_leaf or int(sc.fleet.get("nodes_per_leaf", 32))
    skus = racks(s.skus or "", per_rack)
    if skus is not None and s.nodes is not None and s.nodes != len(skus):
        raise ValueError(f"--skus names {len(skus)} nodes ({per_rack} per rack), --nodes {s.nodes}")
    nodes = len(skus) if skus is not None else s.nodes
    fleet = scenarios.build(sc, nodes=nodes, seed=s.seed, nodes_per_leaf=s.nodes_per_leaf,
                            sku=s.sku, skus=skus, power_caps=caps(s.power_caps or ""),
                            signals=tuple(x for x in (s.signals or "").split(",") if x) or None,
                            storage_mounts=tuple(m for m in (s.storage_mounts or "").split(",")
                                                 if m) or None)  # fmt: skip
    return Simulator(fleet, dcgm=s.compat == "dcgm", time_scale=s.time_scale, tick_s=s.tick,
                     epoch=s.epoch, shard=(s.shard or 0, s.workers),
                     max_stale_s=s.max_staleness, telemetry=s.telemetry,
                     dme_prefix=s.dme_prefix)  # fmt: skip


async def serve(sim: Simulator, s: SimulateSettings, stop: asyncio.Event) -> None:
    host, port = parse_listen(s.listen)
    runner = web.AppRunner(
        make_app(sim, workers.forwarder(s)), access_log=None, handle_signals=False
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0][1] if port == 0 else port
    if s.file_sd and not s.shard:
        await workers.wait_healthy(
            [f"http://{host}:{port + i}/healthz" for i in range(1, s.workers)]
        )
        addresses = [f"{host}:{bound + i}" for i in range(s.workers)]
        write_file_sd(s.file_sd, file_sd(sim, addresses))
    if s.ibnetdiscover and not s.shard:
        Path(s.ibnetdiscover).write_text(ibnetdiscover(sim.fleet.topo, speed=hca_speed(sim.fleet)))
    log.info("simulating %d nodes on http://%s:%d", len(sim.fleet.nodes), host, bound)
    try:
        if s.duration:
            await asyncio.wait_for(stop.wait(), s.duration)
        else:
            await stop.wait()
    except TimeoutError:
        pass
    finally:
        await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    logging.basicConfig(level=ns.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    flags = {k: v for k, v in vars(ns).items() if k not in ("config", "log_level")}
    try:
        settings = load(SimulateSettings, flags, config_file=ns.config)
        if settings.workers > 1 and settings.shard is None:
            settings = replace(settings, shard=0, epoch=time.time())
        sim = make_simulator(settings)
    except (SettingsError, scenarios.ScenarioError, ValueError) as e:
        sys.stderr.write(f"gpuwarden simulate: {e}\n")
        return 2
    others = [] if settings.shard else workers.start(settings)
    try:
        asyncio.run(_run(sim, settings))
    finally:
        workers.stop(others)
    return 0


async def _run(sim: Simulator, settings: SimulateSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await serve(sim, settings, stop)
