"""Peer anomaly (faulty machine): each GPU against its peers in the same job, per metric,
with median/MAD robust z-scores, a continuity gate (k of the last n samples), and an
IsolationForest over the multivariate profile as tie-breaker when a group has several
candidates (after Minder, NSDI 2025; REFERENCE.md §5).

Workload moves utilisation, power and temperature together, so a deviation only counts when
it has a hardware signature: clocks below the peers', hotter than the peers at no more power,
or less power than the peers at no less utilisation. In a job the last one is also what a
pipeline stage with less work looks like while its ranks wait in NCCL collectives at ~100 %
utilisation, so there it counts only with the straggler detector's clock test behind it
(:mod:`analyzer.detectors.workload`); among idle peers it stands alone. Only GPUs whose busy/idle state was
stable over the look-back are compared (a node that just joined or left a job is not an
outlier). Low clocks or power on a node exporting neither the power limit nor clock-event
reasons may be an administrator's cap: those findings only notify
(:mod:`analyzer.detectors.capsight`). Reads per-GPU gauges (T, node, gpu); groups from :mod:`analyzer.detectors.groups`.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from sklearn.ensemble import IsolationForest

from analyzer.detectors import capsight, workload
from analyzer.detectors.groups import peer_groups
from analyzer.detectors.series import nanmedian, robust_z
from analyzer.findings import Finding
from analyzer.pools import SEP, Pool
from analyzer.window import Window
from exporter import catalog

BUSY = 0.05
# metric, absolute floor of the robust scale, relative floor (fraction of the group median)
FEATURES = (
    ("clock", catalog.GPU_SM_CLOCK, 0.0, 0.01),
    ("temp", catalog.GPU_TEMPERATURE, 1.5, 0.0),
    ("power", catalog.GPU_POWER, 5.0, 0.02),
    ("util", catalog.GPU_UTILIZATION, 0.02, 0.0),
)


class PeerDetector:
    name = "peer"

    def __init__(
        self,
        z: float = 6.0,
        k: int = 4,
        n: int = 6,
        settle: int = 8,
        max_candidates: int = 2,
        group_by_job: bool = True,
        continuity: bool = True,
    ):
        self.z, self.k, self.n, self.settle = z, k, n, settle
        self.max_candidates = max_candidates
        self.group_by_job, self.continuity = group_by_job, continuity

    def detect(self, window: Window) -> list[Finding]:
        got = self._members(window)
        if got is None:
            return []
        w, arrays, groups, members, in_job = got
        there = window.elsewhere.get(POOLED)
        extra: dict[str, int] = {}
        if there is not None:
            arrays, members = _with_elsewhere(w, arrays, groups, members, there, self.n)
            extra = dict(there.nodes)
        # an idle group of fewer than MIN_GROUP nodes, the other replicas' counted, is none
        keep = [i for i, (name, idx) in enumerate(groups)
                if len(idx) + extra.get(name, 0) >= MIN_GROUP]  # fmt: skip
        groups, members = [groups[i] for i in keep], [members[i] for i in keep]
        in_job = [in_job[i] for i in keep]
        if not members or max(len(m) for m in members) < 3:
            return []
        # groups of similar size side by side (a bucket is at most twice as wide as its
        # narrowest group): one idle group of thousands of GPUs beside hundreds of 8-GPU jobs
        # must not pad every job to its width (that was quadratic in the fleet)
        found: list[tuple[int, list[Finding]]] = []
        for bucket in _buckets([len(m) for m in members]):
            found += self._bucket(w, arrays, [members[i] for i in bucket], bucket,
                                  np.array([in_job[i] for i in bucket], dtype=bool))  # fmt: skip
        out = [f for _, fs in sorted(found, key=lambda x: x[0]) for f in fs]
        # low clocks or power are also what an admin's cap looks like: without the power
        # limit or clock-event reasons to tell, only notify
        return capsight.downgrade(out, w, _cap_like)

    def pools(self, window: Window) -> dict[str, Pool]:
        """The idle groups' stable GPUs' features over the last ``n`` samples, each under
        ``<group>\x1f<node>\x1f<gpu>``, and each idle group's nodes here (a replica's
        part: the others' idle peers)."""
        got = self._members(window)
        if got is None:
            return {}
        w, arrays, groups, members, _ = got
        values: dict[str, np.ndarray] = {}
        nodes: dict[str, int] = {}
        for (name, idx), cols in zip(groups, members, strict=True):
            if not name.startswith("idle"):
                continue
            nodes[name] = len(idx)  # the group's nodes here, stable or not
            for c in cols:
                key = SEP.join((name, w.nodes[int(c) // w.gpus], str(int(c) % w.gpus)))
                values[key] = np.concatenate([arrays[k][:, c] for k, *_ in FEATURES])
        return {POOLED: Pool(values, nodes)} if nodes else {}

    def _members(self, window: Window) -> tuple[Window, dict[str, np.ndarray],
                                               list[tuple[str, np.ndarray]], list[np.ndarray],
                                               list[bool]] | None:  # fmt: skip
        """``(window, features, groups, members, in_job)``: the features' last ``n`` samples
        (n, nodes*gpus), the peer groups, each group's GPUs (columns) whose busy or idle state
        held over the look-back, and whether it is a job's; None: nothing to compare."""
        need = self.n + self.settle
        if window.empty or len(window.t) < self.n:
            return None
        w = window if self.group_by_job else replace(window, jobs={})
        arrays = {}
        for key, m, _, _ in FEATURES:
            a = w.get(m)
            if a is None or a.ndim != 3:
                return None
            arrays[key] = a[-self.n :].reshape(self.n, -1)  # (n, nodes*gpus)
        util = w.get(catalog.GPU_UTILIZATION)
        assert util is not None
        u = util[-need:].reshape(min(need, len(w.t)), -1)
        known = ~np.isnan(u)
        enough = known.mean(axis=0) >= 0.5  # a scrape gap is neither busy nor idle
        with np.errstate(invalid="ignore"):
            state_busy = ~(known & (u <= BUSY)).any(axis=0) & enough
            state_idle = ~(known & (u > BUSY)).any(axis=0) & enough
        groups = peer_groups(w, MIN_GROUP, idle_min=1)  # few idle here: see detect
        if not groups:
            return None
        # each group's stable GPUs (a flapping busy/idle state is no evidence)
        members, in_job = [], []
        for name, idx in groups:
            cols = (idx[:, None] * w.gpus + np.arange(w.gpus)).reshape(-1)
            stable = state_idle[cols] if name.startswith("idle") else state_busy[cols]
            members.append(cols[stable])
            in_job.append(not name.startswith("idle"))
        return w, arrays, groups, members, in_job

    def _bucket(self, w: Window, arrays: dict[str, np.ndarray], members: list[np.ndarray],
                ids: list[int], in_job: np.ndarray) -> list[tuple[int, list[Finding]]]:  # fmt: skip
        """Robust z-scores of these groups in one vectorised pass; findings per group id."""
        width = max(len(m) for m in members)
        if width == 0:
            return []
        gidx = np.full((len(members), width), -1)
        for i, m in enumerate(members):
            gidx[i, : len(m)] = m
        pad = gidx < 0
        zs, knowns, behind = {}, {}, np.zeros(gidx.shape, dtype=bool)
        for key, _, absf, relf in FEATURES:
            x = arrays[key][:, np.where(pad, 0, gidx)]  # (n, groups, width)
            x[:, pad] = np.nan
            knowns[key] = ~np.isnan(x)
            with np.errstate(all="ignore"):
                med = nanmedian(np.moveaxis(x, 1, 0).reshape(len(members), -1), axis=1)
            floor = np.maximum(np.maximum(absf, relf * np.abs(np.nan_to_num(med[:, 0]))), 1e-9)
            zs[key] = np.nan_to_num(robust_z(x, axis=2, floor=floor[None, :, None]), nan=0.0)
            if key == "clock":  # the straggler detector's hardware test, per group
                cm = workload.mean_clock(x, ~pad)
                behind = workload.clocks_behind(workload.clock_z(cm, axis=1))
        k = knowns
        known = np.stack(
            [k["clock"], k["temp"] & k["power"], k["power"] & k["util"]], axis=-1
        )  # which samples could show each signature
        # in a job, less power at the same (collective-wait) utilisation is a stage with less
        # work unless its clocks are behind: only then is "power starved" the hardware's
        hardware = ~in_job[:, None] | behind
        return [(ids[g], fs) for g, fs in self._judge(w, zs, gidx, pad, known, hardware)]

    def _judge(self, w: Window, zs: dict[str, np.ndarray], gidx: np.ndarray, pad: np.ndarray,
               known: np.ndarray, hardware: np.ndarray) -> list[tuple[int, list[Finding]]]:  # fmt: skip
        """``hardware`` (groups, width): where a power deficit cannot be the job's workload."""
        thr, half = self.z, self.z / 2
        sig = np.stack(
            [
                zs["clock"] < -thr,
                (zs["temp"] > thr) & (zs["power"] < half),
                (zs["power"] < -thr) & (zs["util"] > -half) & hardware[None],
            ],
            axis=-1,
        )  # (n, groups, width, signatures)
        sig[:, pad] = False
        if self.continuity:
            # k of n, counted over the samples that arrived (a gap neither confirms nor denies)
            n_known = known.sum(axis=0)
            need = np.maximum(np.ceil(self.k * n_known / self.n), 2)
            gate = (sig.sum(axis=0) >= need) & (n_known >= self.n // 2)
        else:
            gate = sig[-1]
        mag = np.stack([-zs["clock"], zs["temp"], -zs["power"]], axis=-1)
        score = np.where(gate, np.median(np.abs(mag), axis=0), 0.0).max(axis=-1)
        out: list[tuple[int, list[Finding]]] = []
        for g in np.nonzero(gate.any(axis=(1, 2)))[0]:
            cand = np.nonzero(gate[g].any(axis=1))[0]
            node_of = np.where(pad[g], -1, gidx[g] // w.gpus)
            if len({int(node_of[c]) for c in cand}) > self.max_candidates:
                z = np.stack([zs[k][:, g] for k in zs], axis=-1)[:, ~pad[g]]
                cand = self._tie_break(z, cand, node_of[~pad[g]])
            cand = cand[node_of[cand] < len(w.nodes)]  # another replica's GPU: its own
            gpu_of = np.where(pad[g], -1, gidx[g] % w.gpus)
            out.append((int(g), self._findings(w, cand, node_of, gpu_of, score[g], gate[g])))
        return out

    def _tie_break(self, z: np.ndarray, cand: np.ndarray, node_of: np.ndarray) -> np.ndarray:
        profile = np.median(z, axis=0)  # (gpus, features)
        forest = IsolationForest(n_estimators=50, random_state=0).fit(profile)
        s = -forest.score_samples(profile)  # higher = more anomalous
        per_node: dict[int, float] = {}
        for c in cand:
            per_node[int(node_of[c])] = max(per_node.get(int(node_of[c]), 0.0), float(s[c]))
        keep = sorted(per_node, key=lambda k: -per_node[k])[: self.max_candidates]
        return np.array([c for c in cand if int(node_of[c]) in keep], dtype=int)

    def _findings(self, w: Window, cand: np.ndarray, node_of: np.ndarray, gpu_of: np.ndarray,
                  score: np.ndarray, gate: np.ndarray) -> list[Finding]:  # fmt: skip
        by_node: dict[int, list[int]] = {}
        for c in cand:
            by_node.setdefault(int(node_of[c]), []).append(int(c))
        names = ("clocks low", "hot for its power", "power starved")
        out = []
        for n, cs in by_node.items():
            gpus = [int(gpu_of[c]) for c in cs]
            subjects = ["node"] if len(gpus) >= w.gpus // 2 else [f"gpu={g}" for g in gpus]
            best = max(cs, key=lambda c: score[c])
            s = float(score[best])
            action = "drain" if s >= 2 * self.z and self.continuity else "cordon"
            why = [names[i] for i in np.nonzero(gate[best])[0]]
            evidence = {"z": s, "signatures": float(len(why)), "gpus": float(len(gpus)),
                        "clocks_low": float(bool(gate[best][0])),
                        "power_starved": float(bool(gate[best][2]))}  # fmt: skip
            for subj in subjects:
                out.append(Finding(w.nodes[n], subj, "faulty_machine", "warning", action,
                                   self.name, float(min(1.0, s / (3 * self.z))), w.now, evidence,
                                   "deviates from its peers: " + ", ".join(why)))  # fmt: skip
        return out


def _cap_like(f: Finding) -> bool:
    """A signature an administrator's power or clock cap also shows."""
    return bool(f.evidence.get("clocks_low") or f.evidence.get("power_starved"))


def _buckets(sizes: list[int]) -> list[list[int]]:
    """Group indexes in runs of similar size: within a run the widest is at most twice the
    narrowest (and at least 16), so padding costs at most 2x the cells of the groups."""
    out: list[list[int]] = []
    for i in sorted(range(len(sizes)), key=lambda i: sizes[i]):
        if out and sizes[i] <= max(2 * sizes[out[-1][0]], 16):
            out[-1].append(i)
        else:
            out.append([i])
    return out


MIN_GROUP = 3  # nodes a peer group needs
POOLED = "peer"  # the idle groups' GPUs among a replica's pools


def _with_elsewhere(w: Window, arrays: dict[str, np.ndarray], groups: list[tuple[str, np.ndarray]],
                    members: list[np.ndarray], there: Pool, n: int
                    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:  # fmt: skip
    """The features and members with the idle GPUs other replicas pooled added to this
    part's idle groups, in the order one analyzer holds them (by node name, then GPU: a
    source's nodes are sorted by name), each other replica's node numbered after this
    part's (so no finding is made on it here)."""
    names = {name for name, _ in groups if name.startswith("idle")}
    foreign: dict[str, list[tuple[str, int, np.ndarray]]] = {}
    for key, v in there.values.items():
        group, node, index = (*key.split(SEP), "", "")[:3]
        if group in names and node and index.isdigit() and len(v) == len(FEATURES) * n:
            foreign.setdefault(group, []).append((node, int(index), np.asarray(v)))
    if not foreign:
        return arrays, members
    others = sorted({node for fs in foreign.values() for node, _, _ in fs})
    number = {node: len(w.nodes) + i for i, node in enumerate(others)}
    width = (len(w.nodes) + len(others)) * w.gpus
    out = {}
    for k, a in arrays.items():
        out[k] = np.full((a.shape[0], width), np.nan)
        out[k][:, : a.shape[1]] = a
    merged = list(members)
    for gi, (name, _) in enumerate(groups):
        if name not in foreign:
            continue
        order = [(w.nodes[int(c) // w.gpus], int(c) % w.gpus, int(c)) for c in members[gi]]
        for node, gpu, v in foreign[name]:
            col = number[node] * w.gpus + gpu
            for f, (k, *_) in enumerate(FEATURES):
                out[k][:, col] = v[f * n : (f + 1) * n]
            order.append((node, gpu, col))
        merged[gi] = np.array([c for _, _, c in sorted(order)], dtype=int)
    return out, merged
