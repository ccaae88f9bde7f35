"""The 4-node, 2-job stand-in fleet the real rule engines (vmalert, Thanos' ruler) scrape in
the feature-rule tests: per node 2 GPUs with constant clocks, temperatures, power, utilization,
up (one GPU down) and allocation (jobs ``j0``/``j1`` alternate by node)."""

from __future__ import annotations

from exporter import catalog as c

NODES = ["gpu-node-00", "gpu-node-01", "gpu-node-02", "gpu-node-03"]


def sm_clock(i: int, g: int) -> float:
    return 1.9e9 + 1e7 * i + 1e6 * g


def exposition(i: int, node: str) -> bytes:
    """Node ``i``'s text exposition."""
    lines = []
    for g in range(2):
        lab = f'node="{node}",gpu="{g}",uuid="GPU-{i}-{g}"'
        lines += [f"{c.GPU_SM_CLOCK.name}{{{lab}}} {sm_clock(i, g):.0f}",
                  f"{c.GPU_TEMPERATURE.name}{{{lab}}} {60 + 2 * i + g}",
                  f"{c.GPU_POWER.name}{{{lab}}} {500 + 10 * i}",
                  f"{c.GPU_UTILIZATION.name}{{{lab}}} 0.5",
                  f"{c.GPU_UP.name}{{{lab}}} {0 if (i, g) == (3, 1) else 1}",
                  f'{c.GPU_ALLOCATION_INFO.name}{{{lab},job_id="j{i % 2}",scheduler="slurm"}} 1']  # fmt: skip
    return ("\n".join(lines) + "\n").encode()


def bodies() -> dict[str, bytes]:
    """Path ``/<node>`` -> its exposition, for :func:`tests.realcomp.serve_expositions`."""
    return {f"/{n}": exposition(i, n) for i, n in enumerate(NODES)}
