"""The like-with-like medians across replicas (analyzer.pools): a power limit against its
model's, a port's rate against its model's ports, a PCIe link against its model's busy links
(no maximum exported), a busy clock against its configuration's (fail-slow). Each replica
leaves its part's pools with its marginal scores and judges its nodes against its pools joined
with the others': the findings are exactly one analyzer's, on fleets split so that each
part's own median is not the fleet's (without the others' pools the replicas differ)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from analyzer.detectors.infiniband import InfinibandDetector
from analyzer.detectors.instances import InstanceStragglerDetector
from analyzer.detectors.pcie import PcieDetector
from analyzer.detectors.peer import PeerDetector
from analyzer.detectors.roce import RoceDetector
from analyzer.detectors.straggler import StragglerDetector
from analyzer.detectors.throttling import ThrottlingDetector
from analyzer.engine import Engine
from analyzer.findings import Finding
from analyzer.pools import Pool, joined, medians, pool_of
from analyzer.replicas.exchange import decode, encode
from analyzer.replicas.judge import joined as joined_scores
from analyzer.replicas.judge import judge, scores
from analyzer.window import THROTTLE_REASONS, InstanceInfo, Window
from exporter import catalog as c

T, N, G, STEP = 12, 24, 2, 15.0
# part "a" holds most of the fleet's first half, part "b" most of its second: each part's
# median is its majority's, the fleet's is the fleet's
PARTS = {"a": [*range(0, 10), 20, 21], "b": [*range(10, 20), 22, 23]}


def _window(k: int, metrics: dict[str, np.ndarray], **kw: Any) -> Window:
    t = k * T * STEP + STEP * np.arange(T)
    return Window(t=t, nodes=tuple(f"n{i:02d}" for i in range(N)), metrics=metrics, gpus=G,
                  sku=("h100-sxm",) * N, step=STEP, **kw)  # fmt: skip


def _per_node(values: list[float]) -> np.ndarray:
    return np.broadcast_to(np.array(values)[None, :, None], (T, N, G)).copy()


def power_limits(k: int) -> Window:
    """14 GPUs' nodes at 700 W, 10 at 500 W, unevenly split; a throttle array with no reason."""
    lim = _per_node([700.0] * 14 + [500.0] * 10)
    lim[:, 3, 1] = 480.0  # one GPU of a 700 W node: far below 700, not below 600
    reasons = np.zeros((T, N, G, len(THROTTLE_REASONS)))
    return _window(k, {c.GPU_POWER_LIMIT.name: lim, c.GPU_THROTTLE.name: reasons})


def ib_rates(k: int) -> Window:
    """Ports at NDR (50 GB/s) on 13 nodes and HDR (25 GB/s) on 11, no inventory fabric."""
    rate = np.full((T, N, 2), 50e9)
    rate[:, 13:] = 25e9
    return _window(k, {c.IB_PORT_RATE.name: rate}, ports=("mlx5_0/1", "mlx5_1/1"))


def pcie_links(k: int) -> Window:
    """No maximum exported (dcgm): x16 links on most nodes, x8 platforms on 11, and a node of
    each kind with one GPU at x8 (below its sibling; below the model only where x16 rules)."""
    width = _per_node([16.0] * 13 + [8.0] * 11)
    width[:, 2, 0] = 8.0
    width[:, 22, 0], width[:, 22, 1] = 8.0, 16.0
    return _window(k, {c.GPU_PCIE_WIDTH.name: width, c.GPU_UTILIZATION.name: _per_node([0.9] * N)})


def pcie_generations(k: int) -> Window:
    """The same with generations of busy GPUs: gen 5 on most nodes, gen 4 platforms on 11."""
    gen = _per_node([5.0] * 13 + [4.0] * 11)
    gen[:, 2, 0] = 4.0
    gen[:, 22, 0], gen[:, 22, 1] = 4.0, 5.0
    return _window(k, {c.GPU_PCIE_GENERATION.name: gen,
                       c.GPU_UTILIZATION.name: _per_node([0.9] * N)})  # fmt: skip


def busy_clocks(k: int) -> Window:
    """Busy GPUs in no job: 13 nodes at 1,980 MHz, 11 at 1,900 MHz (4 % below)."""
    clock = _per_node([1980e6] * 13 + [1900e6] * 11)
    util = _per_node([0.9] * N)
    return _window(k, {c.GPU_SM_CLOCK.name: clock, c.GPU_UTILIZATION.name: util})


def _counter(k: int, per_s: list[float]) -> np.ndarray:
    """A cumulative counter rising at ``per_s`` on each node's two ports."""
    t = k * T * STEP + STEP * np.arange(T)
    return np.broadcast_to(t[:, None, None] * np.array(per_s)[None, :, None], (T, N, 2)).copy()


def roce_rails(k: int) -> Window:
    """No topology: each port is compared with its rail (the same port of every node).
    Packets lost at 0.5/s on part a's ports, 3/s on part b's, 5/s on one of node 4's."""
    rate = [0.5 if i in PARTS["a"] else 3.0 for i in range(N)]
    oos = _counter(k, rate)
    oos[:, 4, 0] = _counter(k, [5.0] * N)[:, 4, 0]
    return _window(k, {}, ports=("mlx5_0/1", "mlx5_1/1"), ib_counters={"out_of_sequence": oos})


def roce_leaves(k: int) -> Window:
    """Four leaves of six nodes, two on each part; ECN marks at 700/s on leaf 0's ports,
    200/s on leaf 1's, 50/s on part b's: leaf 0 stands out of the fabric's other leaves, and
    a part alone has too few leaves to compare with (3 are needed)."""
    leaf = {n: f"leaf-{i // 6}" for i, n in enumerate(PARTS["a"] + PARTS["b"])}
    rate = [700.0 if leaf[i] == "leaf-0" else 200.0 if i in PARTS["a"] else 50.0 for i in range(N)]
    ecn = _counter(k, rate)
    return _window(k, {}, ports=("mlx5_0/1", "mlx5_1/1"), leaf_of=leaf,
                   ib_counters={"np_ecn_marked_roce_packets": ecn})  # fmt: skip


def mig_instances(k: int) -> Window:
    """One inference Deployment's MIG instances, one on GPU 0 of every node: at 50 % on part
    a's nodes, 90 % on part b's, and node 4's at 35 %: below 60 % of the whole workload's
    median (70 %), not of its part's (50 %)."""
    act = np.full((T, N, G, 8), np.nan)
    act[:, :, 0, 0] = [0.5 if i in PARTS["a"] else 0.9 for i in range(N)]
    act[:, 4, 0, 0] = 0.35
    infos = {(i, 0, 0): InstanceInfo("1", "1g.10gb", "infer/llama") for i in range(N)}
    return _window(k, {c.GPU_MIG_GRAPHICS_ACTIVE.name: act}, instances=infos)


CASES: dict[str, tuple[Callable[[int], Window], Callable[[], Any]]] = {
    "power_limit": (power_limits, ThrottlingDetector),
    "ib_rate": (ib_rates, InfinibandDetector),
    "pcie_width": (pcie_links, PcieDetector),
    "pcie_generation": (pcie_generations, PcieDetector),
    "busy_clock": (busy_clocks, StragglerDetector),
    "roce_rail": (roce_rails, RoceDetector),
    "roce_leaf": (roce_leaves, RoceDetector),
    "mig_instances": (mig_instances, InstanceStragglerDetector),
}


def _key(fs: list[Finding]) -> set[tuple[object, ...]]:
    def same(v: float) -> float | None:  # NaN (not exported) equals NaN here
        return None if v != v else v

    return {(f.node, f.subject, f.kind, f.action, round(f.confidence, 12),
             tuple(sorted((k, same(v)) for k, v in f.evidence.items()))) for f in fs}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_replicas_judge_against_the_fleet_s_median_and_find_what_one_analyzer_finds(
    case: str,
) -> None:
    make, detector = CASES[case]
    _split_like_one_analyzer([make(k) for k in range(3)], detector, PARTS)


def _split_like_one_analyzer(windows: list[Window], detector: Callable[[], Any],
                             parts: dict[str, list[int]]) -> None:  # fmt: skip
    """Each window judged by one analyzer and by replicas holding ``parts`` with their pools
    exchanged (equal every cycle), and by the parts alone (different in some cycle)."""
    single = Engine([detector()])
    pooled = {r: Engine([detector()]) for r in parts}
    alone = {r: Engine([detector()]) for r in parts}
    found = differ = 0
    for k, w in enumerate(windows):
        full = single.cycle(w)
        # over the wire, as the exchange carries them
        published = {r: decode(encode(scores(pooled[r], w, keep))) for r, keep in parts.items()}
        got: list[Finding] = []
        for r, keep in parts.items():
            others = joined_scores(s for o, s in published.items() if o != r)
            got += judge(pooled[r], w, keep, others, fleet=r == min(parts))
        assert _key(got) == _key(full), (k, _key(got) ^ _key(full))
        part_alone = [f for r, keep in parts.items() for f in judge(alone[r], w, keep)]
        differ += _key(part_alone) != _key(full)
        found += len(full)
    assert found  # the single analyzer finds something to agree on
    assert differ  # and each part's own median would have judged otherwise


def test_a_replica_with_few_ports_of_a_rail_judges_them_against_the_whole_rail() -> None:
    """Node 4's lossy port on a replica holding 2 nodes: too few peers there (3 needed), the
    rail's 24 ports over all replicas."""

    def quiet(k: int) -> Window:  # every port at 0.5/s but node 4's first, at 5/s
        oos = _counter(k, [0.5] * N)
        oos[:, 4, 0] *= 10
        return _window(k, {}, ports=("mlx5_0/1", "mlx5_1/1"),
                       ib_counters={"out_of_sequence": oos})  # fmt: skip

    parts = {"a": [4, 5], "b": [i for i in range(N) if i not in (4, 5)]}
    _split_like_one_analyzer([quiet(k) for k in range(2)], RoceDetector, parts)


def test_a_replica_with_few_instances_of_a_workload_judges_them_against_all_of_them() -> None:
    """Node 4's slow instance on a replica holding 3 of the Deployment's 24 (5 are needed)."""
    parts = {"a": [3, 4, 5], "b": [i for i in range(N) if i not in (3, 4, 5)]}
    _split_like_one_analyzer([mig_instances(k) for k in range(2)], InstanceStragglerDetector,
                             parts)  # fmt: skip


def idle_fleet(k: int, hot: dict[int, float]) -> Window:
    """Every node idle (no job): peers are the fleet's idle nodes of the configuration. The
    GPU 0 of each node in ``hot`` runs at that temperature at the same power as the rest."""
    temp = _per_node([40.0] * N)
    for n, t in hot.items():
        temp[:, n, 0] = t
    return _window(k, {c.GPU_SM_CLOCK.name: _per_node([1410e6] * N),
                       c.GPU_TEMPERATURE.name: temp, c.GPU_POWER.name: _per_node([60.0] * N),
                       c.GPU_UTILIZATION.name: _per_node([0.0] * N)})  # fmt: skip


def test_an_idle_gpu_is_compared_with_the_fleet_s_idle_peers_not_its_replica_s_few() -> None:
    """Node 4's idle GPU hot for its power, on a replica holding 2 idle nodes (a group needs
    3): one analyzer finds it among the fleet's 24, and so does its replica (of three)."""
    parts = {"a": [4, 5], "b": list(range(0, 4)), "c": list(range(6, N))}
    windows = [idle_fleet(k, {4: 60.0}) for k in range(2)]
    _split_like_one_analyzer(windows, PeerDetector, parts)


def test_more_hot_idle_gpus_than_candidates_are_tie_broken_as_one_analyzer_does() -> None:
    """Three hot idle GPUs on two replicas, two candidates kept: the IsolationForest ranks
    the fleet's idle GPUs in one analyzer's order (by node name), on every replica."""
    parts = {"a": [3, 4, 5, 20], "b": [i for i in range(N) if i not in (3, 4, 5, 20)]}
    windows = [idle_fleet(k, {4: 60.0, 10: 61.0, 15: 63.0}) for k in range(2)]
    _split_like_one_analyzer(windows, PeerDetector, parts)
    full = Engine([PeerDetector()]).cycle(windows[0])
    assert len({f.node for f in full}) == 2  # the tie-break did choose


def test_an_idle_group_counts_the_other_replicas_nodes_whose_gpus_flap_as_one_analyzer_does() -> (
    None
):
    """Nodes 6-23 in a job; of the idle nodes 0-5, those on the other replica (0-3) flap
    between busy and idle, so only nodes 4 and 5 have GPUs to compare: the group still has
    6 nodes, as one analyzer counts it, and node 4's hot GPU is found."""
    parts = {"a": [4, 5], "b": [i for i in range(N) if i not in (4, 5)]}
    windows = []
    for k in range(2):
        w = idle_fleet(k, {4: 60.0})
        util = _per_node([0.0] * 6 + [0.9] * 18)
        util[::2, :4] = 0.5  # flapping
        jobs = {"j": tuple(range(6, N))}
        windows.append(replace(w, jobs=jobs, metrics={**w.metrics, c.GPU_UTILIZATION.name: util}))
    _split_like_one_analyzer(windows, PeerDetector, parts)


def test_an_idle_pool_larger_than_the_forest_s_sample_is_ranked_in_one_analyzer_s_order() -> None:
    """320 idle GPUs (more than the 256 the IsolationForest samples) and three hot ones on
    two replicas: the sample is drawn from the fleet's GPUs in one analyzer's order."""
    n, g = 40, 8
    hot = {(3, 1): 60.0, (17, 4): 60.2, (30, 6): 60.4}
    rng = np.random.default_rng(2)

    def window(k: int) -> Window:
        t = k * T * STEP + STEP * np.arange(T)
        shape = (T, n, g)
        temp = 40.0 + rng.normal(0, 0.3, shape)
        for (node, gpu), v in hot.items():
            temp[:, node, gpu] = v
        return Window(t=t, nodes=tuple(f"m{i:02d}" for i in range(n)), gpus=g, step=STEP,
                      sku=("h100-sxm",) * n, metrics={
                          c.GPU_SM_CLOCK.name: np.full(shape, 1410e6),
                          c.GPU_TEMPERATURE.name: temp,
                          c.GPU_POWER.name: 60.0 + rng.normal(0, 0.5, shape),
                          c.GPU_UTILIZATION.name: np.zeros(shape)})  # fmt: skip

    parts = {"a": [*range(0, 10), *range(25, 35)], "b": [*range(10, 25), *range(35, 40)]}
    _split_like_one_analyzer([window(k) for k in range(3)], PeerDetector, parts)


def test_a_rail_of_more_than_64_ports_is_judged_against_its_whole_median_on_every_replica() -> None:
    """66 ports on a rail: a port is compared with the rail's median, itself included (one
    analyzer's rule for a large group), though its replica holds fewer than 64 of them. The
    rail: 33 ports at 0.5/s, 32 at 3/s, one at 5/s, balanced so that the rule decides."""
    n = 66
    rate = np.array([0.5] * 33 + [3.0] * 32 + [5.0])
    windows = []
    for k in range(2):
        t = k * T * STEP + STEP * np.arange(T)
        windows.append(Window(t=t, nodes=tuple(f"m{i:02d}" for i in range(n)), metrics={},
                              ports=("mlx5_0/1",), step=STEP,
                              ib_counters={"out_of_sequence": (t[:, None] * rate)[:, :, None]}))  # fmt: skip
    parts = {"a": [*range(0, 20), 65], "b": list(range(20, 65))}
    full = Engine([RoceDetector()]).cycle(windows[0])
    assert full == []  # 5 is not 4 x the whole rail's median (1.75): nothing to find
    alone = judge(Engine([RoceDetector()]), windows[0], parts["a"])
    assert [f.node for f in alone] == ["m65"]  # against its part's 20 others: lossy
    pooled = {r: Engine([RoceDetector()]) for r in parts}
    published = {r: scores(pooled[r], windows[0], keep) for r, keep in parts.items()}
    got = judge(pooled["a"], windows[0], parts["a"], published["b"])
    assert got == []


def test_a_pool_joined_from_parts_gives_numpy_s_nanmedian_of_the_whole_bit_for_bit() -> None:
    rng = np.random.default_rng(5)
    values = rng.normal(1.0, 0.1, (40, 8))
    values[rng.random(values.shape) < 0.3] = np.nan
    values[3] = np.nan  # a node without a value does not count
    groups = [("x", np.arange(0, 40, 2)), ("y", np.arange(1, 40, 2))]
    whole = pool_of(values, groups)
    a = pool_of(values, [(g, idx[idx < 17]) for g, idx in groups])
    b = pool_of(values, [(g, idx[idx >= 17]) for g, idx in groups])
    for g, idx in groups:
        have = idx[np.isfinite(values[idx]).any(axis=1)]
        expected = float(np.nanmedian(values[have]))
        assert medians(whole, None, 3)[g] == expected
        assert medians(a, b, 3)[g] == expected and medians(b, a, 3)[g] == expected
    assert whole.nodes == {"x": 20, "y": 19} and a.join(b).nodes == whole.nodes
    assert medians(a, None, 12) == {}  # too few nodes here alone: no median
    assert set(medians(a, b, 12)) == {"x", "y"}  # enough with the others'
    assert joined([{"q": a}, {"q": b}])["q"].nodes == whole.nodes


def test_scores_from_a_replica_without_pools_read_as_none_and_malformed_ones_are_refused() -> None:
    """A replica of the release before leaves scores without pools (a rolling upgrade): they
    read, with no pool; pools that are not values per group are a clear error."""
    import json
    import zlib

    blob = encode(scores(Engine([ThrottlingDetector()]), power_limits(0), PARTS["a"]))
    doc = json.loads(zlib.decompress(blob))
    assert decode(blob).pools["power_limit_w"].nodes == {"h100-sxm": 12}
    del doc["pools"]
    assert decode(zlib.compress(json.dumps(doc).encode())).pools == {}
    doc["pools"] = {"power_limit_w": {"values": {"h100-sxm": ["x"]}, "nodes": {}}}
    with pytest.raises(ValueError, match="malformed"):
        decode(zlib.compress(json.dumps(doc).encode()))


def test_a_detector_whose_pools_fail_costs_its_error_count_not_the_others_pools() -> None:
    class Broken(ThrottlingDetector):
        name = "broken"

        def pools(self, window: Window) -> dict[str, Pool]:
            raise RuntimeError("boom")

    engine = Engine([Broken(), PcieDetector()])
    got = engine.pools(pcie_links(0))
    assert set(got) == {"pcie_width"} and engine.stats.errors["broken"] == 1


def test_a_replica_leaves_no_administrator_s_cap_and_no_idle_link_in_its_pools() -> None:
    """What one analyzer leaves out of a model's median stays out of a part's pool: a limit
    the inventory or a rack's common setting says an administrator chose, and the PCIe
    generation of an idle GPU (which drops its link to save power); idle widths count."""
    w = replace(power_limits(0), power_cap_w={0: 700.0}, rack_of={14: "r1", 15: "r1"})
    limits = ThrottlingDetector().pools(w)["power_limit_w"]
    assert limits.nodes == {"h100-sxm": N - 3}  # node 0 (inventory), rack r1 (500 W both)
    assert sorted(limits.values["h100-sxm"]) == sorted([480.0] + [700.0] * 25 + [500.0] * 16)
    gen = pcie_generations(0).metrics[c.GPU_PCIE_GENERATION.name]
    util = _per_node([0.9] * 20 + [0.0] * 4)
    idle = replace(pcie_links(0), metrics={**pcie_links(0).metrics, c.GPU_UTILIZATION.name: util,
                                           c.GPU_PCIE_GENERATION.name: gen})  # fmt: skip
    links = PcieDetector().pools(idle)
    assert links["pcie_generation"].nodes == {"h100-sxm": 20}  # nodes 20-23 idle: out
    assert links["pcie_width"].nodes == {"h100-sxm": N}


def storage_probes(k: int) -> Window:
    """A checkpoint mount failing on nodes 1 and 2 (part a) and, from earlier, 11 and 12
    (part b), slow on 5 and 15: 6 of 24 nodes is a shared fault, judged otherwise on either
    part's share alone."""
    up = np.ones((T, N, 1))
    up[6:, [1, 2], 0] = 0.0
    up[3:, [11, 12], 0] = 0.0
    fsync = np.full((T, N, 1), 0.05)
    fsync[:, 15, 0], fsync[:, 5, 0] = 4.0, 3.0
    return _window(k, {c.STORAGE_PROBE_UP.name: up, c.STORAGE_PROBE_DURATION.name: fsync},
                   mounts=("/ckpt",))  # fmt: skip


def test_a_storage_fault_spread_over_replicas_is_the_fleet_s_one_finding_reported_once() -> None:
    from analyzer.detectors.storage import StorageDetector

    single = Engine([StorageDetector()])
    pooled = {r: Engine([StorageDetector()]) for r in PARTS}
    w = storage_probes(0)
    full = single.cycle(w)
    published = {r: decode(encode(scores(pooled[r], w, keep))) for r, keep in PARTS.items()}
    got: list[Finding] = []
    for r, keep in PARTS.items():
        others = joined_scores(s for o, s in published.items() if o != r)
        got += judge(pooled[r], w, keep, others, fleet=r == "a")
    assert len(full) == 1 and full[0].evidence["failing"] == 4.0 and full[0].since == w.t[3]
    assert full[0].evidence["fsync_p50_max"] == 4.0
    assert len(got) == 1 and _key(got) == _key(full) and got[0].since == full[0].since
    alone = [f for r, keep in PARTS.items() for f in judge(Engine([StorageDetector()]), w, keep)]
    assert _key(alone) != _key(full)  # each part: 3 of its 12 nodes, its own evidence


def test_scores_too_large_for_the_exchange_leave_out_their_largest_pools_first() -> None:
    """A ConfigMap holds 756 KiB: over it, the pool with the most values goes first (the
    others judge that comparison without this part), then the next; the marginal scores and
    the smaller pools stay."""
    from analyzer.detectors.marginal import Scores
    from analyzer.replicas.exchange import fitted

    rng = np.random.default_rng(1)
    big = Pool({"leaves": rng.lognormal(5, 1, 40_000)}, {"leaves": 9})
    mid = Pool({"x": rng.lognormal(5, 1, 4_000)}, {"x": 3})
    small = Pool({"h100-sxm": np.full(16, 700.0)}, {"h100-sxm": 8})
    s = Scores(values={("whole", "nvlink", "h100"): np.arange(5.0)}, sizes={"h100": 5},
               pools={"roce:ecn": big, "peer": mid, "power_limit_w": small})  # fmt: skip
    blob, dropped = fitted(s, None)
    assert decode(blob).pools.keys() == s.pools.keys() and dropped == []
    limit = len(encode(replace(s, pools={"peer": mid, "power_limit_w": small}))) + 10
    blob, dropped = fitted(s, limit)
    got = decode(blob)
    assert set(got.pools) == {"peer", "power_limit_w"} and got.sizes == {"h100": 5}
    assert dropped == ["roce:ecn"]
    blob, dropped = fitted(s, len(encode(replace(s, pools={"power_limit_w": small}))))
    assert set(decode(blob).pools) == {"power_limit_w"} and dropped == ["roce:ecn", "peer"]
    blob, dropped = fitted(s, 10)  # still too large: the exchange refuses it
    assert decode(blob).pools == {} and len(dropped) == 3
