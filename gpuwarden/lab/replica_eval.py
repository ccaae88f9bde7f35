"""``gpuwarden evaluate --replicas N``: the evaluation fleets judged by one analyzer and by N
replicas that share them by ownership unit, the same windows cycle by cycle (issue 33, "same
verdicts").

Each replica has its own engine, as separate processes would; the replicas are named
``r-0`` .. ``r-<N-1>`` and own the units rendezvous hashing gives them
(:mod:`analyzer.replicas.ownership`); ``marginal`` judges each replica's nodes with the other
replicas' scores of that cycle joined in, as the running replicas exchange them; a node's
detector memory goes with it to its next replica through the encoding the running replicas
leave on their board (:mod:`analyzer.replicas.handover`). Two more runs over the same
windows: the replica that owns the most nodes halfway restarted between two cycles (a fresh
engine that finds its memory of the last cycle on the board), and the same replica killed in
that cycle before it judged (its units go unjudged once, and the new process judges them
afresh). A job that straddles Prometheus shards (``gpuwarden_shard``, the ``hashmod`` of its
nodes over N shards) is one unit, judged whole by one replica; the table counts those jobs
and the findings on their nodes, so a fault in such a job is shown, not assumed.

Pure apart from the simulator's run: :func:`run_fleet` returns a row, :func:`table` renders the
rows.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from analyzer.detectors import default_detectors
from analyzer.engine import Engine
from analyzer.findings import Finding
from analyzer.replicas.exchange import decode, encode
from analyzer.replicas.handover import Handover
from analyzer.replicas.judge import joined, judge, scores
from analyzer.replicas.ownership import assign, owned_nodes, units
from analyzer.sources.features import shard_of
from analyzer.window import Window
from gpuwarden.lab.evaluation_metrics import EpisodeTracker, Truth, score

Key = tuple[str, str, str, str, str]
FLEETS = ("homogeneous", "mixed", "mixed-amd")


def key(f: Finding) -> Key:
    """What a verdict is: the node, subject, kind, severity and action of a finding."""
    return (f.node, f.subject, f.kind, f.severity, f.action)


@dataclass
class Sharded:
    """``run_seed``'s ``judged`` hook: judges each cycle's window again with ``replicas``
    replicas and compares their findings, together, with the single analyzer's."""

    replicas: int
    restart_at: int  # the cycle (1-based) at which the busiest replica restarts; 0: never
    shards: int = 0  # gpuwarden_shard's modulus for the straddling count; 0: the replicas';
    # 1: not counted
    cycle: int = 0
    single: int = 0  # findings over all cycles, one analyzer
    sharded: int = 0  # the same, the replicas together
    differing: int = 0  # cycles whose two sets differ
    diff: Counter[str] = field(default_factory=Counter)  # "missing <kind>" / "extra <kind>"
    distinct: set[Key] = field(default_factory=set)  # the single analyzer's verdicts, all cycles
    straddling: set[str] = field(default_factory=set)  # jobs seen spanning shards
    straddled: set[Key] = field(default_factory=set)  # verdicts on a straddling job's nodes
    largest_unit: int = 0  # nodes
    units: int = 0  # in the last cycle
    split: int = 0  # cycles in which two replicas or more owned units (the others test nothing)
    tracker: EpisodeTracker | None = None  # the replicas' findings as episodes, to be scored
    moved: int = 0  # nodes that changed replica between cycles (the members never change here)
    owner_of: dict[str, str] = field(default_factory=dict)
    handover: bool = True  # the previous owner's memory goes with a moved node (False: as
    # before analyzer.replicas.handover, a moved node judged afresh)
    crash: bool = False  # it dies in cycle restart_at, before it judges (its units go
    # unjudged that cycle, its memory of the cycle before is never left), back the next
    adopted: int = 0  # gained nodes whose memory came with them
    restart_nodes: int = 0  # the restarted replica's nodes in the cycle it restarted
    victim: str = ""  # the replica restarted: the one owning the most nodes at restart_at
    fresh: int = 0  # gained nodes judged afresh (every node in the first cycle)
    board: dict[str, bytes] = field(default_factory=dict)  # the memory left last cycle

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {self.replicas}")
        self.engines = {f"r-{i}": Engine(default_detectors()) for i in range(self.replicas)}
        self.handovers = {r: Handover() for r in self.engines}

    def __call__(self, window: Window, full: list[Finding]) -> None:
        self.cycle += 1
        parts = units(window)
        self.largest_unit = max([self.largest_unit, *map(len, parts.values())])
        owned = {r: owned_nodes(parts, mine)
                 for r, mine in assign(parts, sorted(self.engines)).items()}  # fmt: skip
        busy = sum(1 for keep in owned.values() if keep)
        now = {window.nodes[i]: r for r, keep in owned.items() for i in keep}
        self.moved += sum(1 for n, r in now.items() if self.owner_of.get(n, r) != r)
        self.owner_of = now
        self.units = len(parts)
        self.split += busy > 1
        if self.cycle == self.restart_at:  # the replica that owns the most nodes goes down
            self.victim = max(sorted(owned), key=lambda r: len(owned[r]))
            self.restart_nodes = len(owned[self.victim])
        dead = self.cycle == self.restart_at and self.crash  # killed before it judges
        if self.cycle == self.restart_at + (1 if self.crash else 0):  # a new process, same name
            v = self.victim
            self.engines[v], self.handovers[v] = Engine(default_detectors()), Handover()
        judging = {r: keep for r, keep in owned.items() if not (dead and r == self.victim)}
        names = {r: frozenset(window.nodes[i] for i in keep) for r, keep in judging.items()}
        published = {r: decode(encode(scores(self.engines[r], window, keep)))  # over the wire
                     for r, keep in judging.items()}  # fmt: skip
        got: list[Finding] = []
        board: dict[str, bytes] = {}
        for r, keep in judging.items():
            if self.handover:
                taken = self.handovers[r].take(self.engines[r], self.board, names[r], self.cycle)
                self.adopted, self.fresh = self.adopted + taken.adopted, self.fresh + taken.fresh
            others = joined(s for o, s in published.items() if o != r)
            got += judge(self.engines[r], window, keep, others, fleet=r == min(judging))
            if self.handover:
                board[r] = self.handovers[r].close(self.engines[r], names[r], self.cycle)
        self.board = board
        if self.tracker is not None:
            self.tracker.observe(window.now, got)
        a, b = {key(f) for f in full}, {key(f) for f in got}
        self.single += len(a)
        self.sharded += len(b)
        self.differing += a != b
        self.diff.update(f"missing {x[2]}" for x in a - b)
        self.diff.update(f"extra {x[2]}" for x in b - a)
        self.distinct |= a
        self._straddle(window, a)

    def _straddle(self, window: Window, verdicts: set[Key]) -> None:
        shards = self.shards or self.replicas
        if shards < 2:
            return
        on: set[str] = set()
        for job, members in window.jobs.items():
            names = [window.nodes[m] for m in members if 0 <= m < len(window.nodes)]
            if len({shard_of(n, shards) for n in names}) > 1:
                self.straddling.add(job)
                on.update(names)
        self.straddled |= {v for v in verdicts if v[0] in on}


def run_fleet(fleet: str, seed: int, replicas: int, nodes: int, horizon: float,
              step: float = 15.0, cycle: float = 30.0, per_kind: int = 1, controls: int = 1,
              hardware: bool = True) -> dict[str, Any]:  # fmt: skip
    """One seed of one evaluation fleet through both paths; the row of :func:`table`."""
    from gpuwarden.lab.evaluate import run_seed  # the simulator's loop (heavy imports)

    if fleet not in FLEETS:
        raise ValueError(f"fleet must be one of {', '.join(FLEETS)}, got {fleet!r}")
    cycles = int(horizon // cycle)
    hook = Sharded(replicas, restart_at=0, tracker=EpisodeTracker(2 * cycle))
    # the straddling jobs are the same windows' as hook's: counted there only
    restarted = Sharded(replicas, restart_at=max(1, cycles // 2), shards=1)
    killed = Sharded(replicas, restart_at=max(1, cycles // 2), shards=1, crash=True)
    seen: list[Any] = []  # the simulated fleet, for its ground truth

    def tap(fleet_: Any, *_: Any) -> None:
        if not seen:
            seen.append(fleet_)

    def both(window: Window, full: list[Finding]) -> None:
        for h in (hook, restarted, killed):
            h(window, full)

    r = run_seed(seed, nodes, horizon, step, cycle, per_kind, controls, hardware=hardware,
                 compare=False, mixed=fleet == "mixed", amd=fleet == "mixed-amd",
                 judged=both, tap=tap)  # fmt: skip
    truth = [Truth.from_json(d, horizon) for d in seen[0].truth()]
    assert hook.tracker is not None
    sharded = score(hook.tracker.episodes(), truth, r["node_days"]).summary()
    return {
        "fleet": fleet, "seed": seed, "nodes": nodes, "hardware": hardware,
        "replicas": replicas, "cycles": hook.cycle, "restart_at": restarted.restart_at,
        "faults": r["truth"], "single": hook.single, "sharded": hook.sharded,
        "distinct": len(hook.distinct), "differing": hook.differing, "diff": dict(hook.diff),
        "restart_differing": restarted.differing, "restart_diff": dict(restarted.diff),
        "killed_differing": killed.differing, "killed_diff": dict(killed.diff),
        "restart_nodes": restarted.restart_nodes,
        "adopted": hook.adopted, "fresh": hook.fresh,
        "moved": hook.moved,
        "straddling_jobs": len(hook.straddling), "straddled": len(hook.straddled),
        "largest_unit": hook.largest_unit, "units": hook.units,
        "split": hook.split,
        "scores": {"single": _scored(r["results"]["gpuwarden"]["summary"]),
                   "replicas": _scored(sharded)},
    }  # fmt: skip


_SCORED = ("detected", "recall", "precision", "f1", "ttd_median_s", "ttd_p95_s", "false_drains")


def _scored(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: summary.get(k) for k in _SCORED}


def _num(v: Any, fmt: str) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The single process against the replicas, one row per fleet and seed."""
    if not rows:
        return "no runs"
    n = rows[0]["replicas"]
    head = (f"| fleet | seed | faults | cycles | findings, one analyzer | findings, {n} replicas "
            "| cycles that differ | node moves | units (largest) | cycles split "
            "| jobs straddling shards | their verdicts "
            "| detected / F1 / TTD p95 / false drains, one analyzer "
            f"| the same, {n} replicas | cycles that differ, busiest replica restarted "
            "| the same, killed mid-cycle |")  # fmt: skip
    out = [
        f"One analyzer against {n} replicas sharing the fleet by unit, the same windows cycle "
        "by cycle, findings summed over cycles. Node moves: nodes whose unit went to another "
        "replica between cycles (jobs joining or splitting units; the members never change "
        "here). Units: in the last cycle, the largest of any cycle in nodes. Cycles split: "
        "those in which two replicas or more owned units (in the others one replica judged "
        f"the fleet). A job straddles shards when its nodes' gpuwarden_shard over {n} differ. "
        "A node's detector memory goes with it to its next replica (analyzer.replicas."
        "handover). The last two columns: the same run with the replica that owns the most "
        "nodes halfway (how many: in brackets) restarted, "
        "between two cycles (a fresh engine that finds its memory of the last cycle on the "
        "board), and with it killed in that cycle before it judged (its units go unjudged "
        "that cycle, its memory of the cycle before is never left, and the new process "
        "judges them afresh the cycle after: these differences are the cost of a crash).",
        "",
        head,
        "|" + "---|" * head.count(" | ") + "---|",
    ]
    for r in rows:
        seed = f"{r['seed']}" + ("" if r["hardware"] else " (fault-free)")
        one, rep = (
            " / ".join((_num(x["detected"], "d"), _num(x["f1"], ".3f"),
                        _num(x["ttd_p95_s"], ".0f") + " s", _num(x["false_drains"], "d")))
            for x in (r["scores"]["single"], r["scores"]["replicas"])
        )  # fmt: skip
        out.append(
            f"| {r['fleet']} | {seed} | {r['faults']} | {r['cycles']} | {r['single']:,}"
            f" | {r['sharded']:,} | **{r['differing']}** | {r['moved']:,}"
            f" | {r['units']} ({r['largest_unit']}) | {r['split']} | {r['straddling_jobs']}"
            f" | {r['straddled']} | {one} | {rep}"
            f" | {r['restart_differing']} (at cycle {r['restart_at']},"
            f" {r.get('restart_nodes', 0)} nodes)"
            f" | {r['killed_differing']} |"
        )
    bad = [r for r in rows if r["differing"]]
    out += ["", "identical findings in every cycle of every run" if not bad else
            "DIFFERENT: " + "; ".join(f"{r['fleet']} seed {r['seed']}: {r['diff']}" for r in bad)]  # fmt: skip
    for col, what in (("restart", "restarted"), ("killed", "killed mid-cycle")):
        if differ := [r for r in rows if r[f"{col}_differing"]]:
            out.append(f"with the busiest replica {what}: " + "; ".join(
                f"{r['fleet']} seed {r['seed']}: {r[f'{col}_diff']}" for r in differ))  # fmt: skip
    return "\n".join(out)
