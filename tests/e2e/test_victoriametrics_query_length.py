"""A replica's node matcher on VictoriaMetrics: a replica reads its nodes with a literal
alternation of their names, ~16 bytes a node, so at 12,500 nodes over 8 replicas (~1,560 a
replica) every query is over VictoriaMetrics' default ``-search.maxQueryLen`` of 16 KiB
(dcgm-exporter's multi-selector queries far over). A real VictoriaMetrics refuses such a read
with an error that names the flag, and the analyzer's error carries it; with the flag raised
as docs/deploy.md says, the same read succeeds and holds exactly the replica's nodes."""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

import pytest

from analyzer.sources.prometheus import PrometheusSource
from analyzer.sources.promhttp import SourceError
from exporter import catalog as c
from tests.realcomp import VM_GENERATIONS, daemon, free_port, vm_binary, world_readable_tmpdir

pytestmark = pytest.mark.real
STEP, WINDOW, REAL, FILLER = 15.0, 600.0, 3, 1500
T0 = 1_796_500_000.0


def _import(vm: str) -> None:
    """gpu_up of REAL nodes over the window, through VictoriaMetrics' Prometheus import."""
    lines = []
    for i in range(REAL):
        for g in range(2):
            lab = f'node="gpu-node-{i}",gpu="{g}",uuid="GPU-{i}-{g}",reason=""'
            lines += [f"{c.GPU_UP.name}{{{lab}}} 1 {int((T0 + k * STEP) * 1000)}"
                      for k in range(int(WINDOW / STEP) + 1)]  # fmt: skip
    req = urllib.request.Request(f"{vm}/api/v1/import/prometheus",
                                 data=("\n".join(lines) + "\n").encode(), method="POST")  # fmt: skip
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 204
    with urllib.request.urlopen(f"{vm}/internal/force_flush", timeout=30) as r:
        assert r.status == 200  # searchable now, not after the next in-memory flush


async def _read(url: str, mine: set[str]) -> tuple[tuple[str, ...], set[str]]:
    src = PrometheusSource(url, window=WINDOW, step=STEP, settle=0.0, discover=False,
                           retries=0)  # fmt: skip
    src.scope = lambda topo: mine
    try:
        w = await src.read(T0 + WINDOW)
        return w.nodes, set(src.errors.values())
    finally:
        await src.close()


@pytest.mark.parametrize("vm_generation", VM_GENERATIONS)
@pytest.mark.parametrize("max_len", ["", "4MiB"])
def test_a_replicas_long_node_matcher_needs_victoriametrics_max_query_len_raised(
    max_len: str, vm_generation: str
) -> None:
    vm_bin = vm_binary("victoria-metrics", vm_generation)
    d: Path = world_readable_tmpdir("gpuwarden-vmlen-")
    port = free_port()
    vm = f"http://127.0.0.1:{port}"
    argv = [vm_bin, f"-storageDataPath={d / 'vm'}", f"-httpListenAddr=127.0.0.1:{port}",
            "-search.latencyOffset=0s", "-retentionPeriod=100y", "-search.disableCache"]  # fmt: skip
    if max_len:
        argv.append(f"-search.maxQueryLen={max_len}")
    # one replica's share at 12,500 nodes over 8: the real nodes plus made-up ones, as long
    mine = {f"gpu-node-{i}" for i in range(REAL)} | {f"gpu-node-{i:05d}" for i in range(FILLER)}
    with daemon(argv, f"{vm}/health", d / "vm.log"):
        _import(vm)
        if not max_len:
            with pytest.raises(SourceError) as e:
                asyncio.run(_read(vm, mine))
            text = str(e.value)  # the reason kept, the quoted query cut short
            assert "maxQueryLen" in text and len(text) < 1000, text[-600:]
        else:
            nodes, errors = asyncio.run(_read(vm, mine))
            assert not errors, errors
            assert set(nodes) == {f"gpu-node-{i}" for i in range(REAL)}
