"""Partitioned GPUs: one GPU instance (MIG) or compute partition (AMD) that does far less work
than the instances of the same profile serving the same workload.

Reads the per-instance engine activity (``gpu_mig_graphics_engine_active_ratio``, the
``(T, nodes, gpus, slots)`` array with ``Window.instances`` naming each slot). Peers are the
instances of the same GPU model, profile and workload (ARCHITECTURE decision 14: like with
like): a 1g.10gb instance is never judged against a 7g.80gb one or a whole GPU, a CPX partition
never against a DPX one. Replicas behind one load balancer share its load, so one of them
sustaining a fraction of its peers' median is stuck or degraded. Too few peers: no judgement
(there is no specification for an instance's load). The finding names the parent GPU and the
instance (``instance=gpu<g>/<id>``) and recommends notify: the replica's pod is what to look at,
not the GPU, whose own faults (XIDs, ECC) other detectors attribute to it.

A workload's instances may sit on nodes of several replicas of the sharded analyzer: each
leaves its part's instances' activity per group (:meth:`InstanceStragglerDetector.pools`)
and judges its own against every member's median at each sample (``Window.elsewhere``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from analyzer.detectors.emit import ev
from analyzer.findings import Finding
from analyzer.pools import SEP, Pool
from analyzer.window import Window
from exporter import catalog

Key = tuple[int, int, int]  # (node, gpu, slot)
POOLED = "instances"  # the instances' activity among a replica's pools: per group


@dataclass
class InstanceStragglerDetector:
    name: str = "instances"
    span_s: float = 300.0  # judged over the last five minutes
    ratio: float = 0.6  # below this share of the peers' median, at each sample
    share: float = 0.8  # ... for this share of the span's samples
    min_peers: int = 4  # same-profile peers needed besides the instance itself
    min_load: float = 0.1  # peers this idle say nothing about a slow one

    def groups(self, window: Window) -> dict[tuple[str, str, str], list[Key]]:
        """(GPU model, profile, workload) -> the slots of its instances."""
        out: dict[tuple[str, str, str], list[Key]] = defaultdict(list)
        for key, info in sorted(window.instances.items()):
            out[(window.sku_of(key[0]), info.profile, info.job)].append(key)
        return out

    def detect(self, window: Window) -> list[Finding]:
        act = window.get(catalog.GPU_MIG_GRAPHICS_ACTIVE)
        if act is None or not window.instances or window.empty:
            return []
        tail = act[window.tail(self.span_s)]
        if len(tail) < 3:
            return []
        found = []
        there = window.elsewhere.get(POOLED, Pool())
        for group, keys in self.groups(window).items():
            sku, profile, job = group
            n, g, s = (np.array(ax) for ax in zip(*keys, strict=True))
            x = tail[:, n, g, s]  # (T, members)
            extra = there.values.get(SEP.join(group), np.zeros(0))
            # member by member over the same span (another grid's: this part's alone)
            extra = extra.reshape(-1, len(x)).T if len(extra) % len(x) == 0 else x[:, :0]
            if len(keys) + extra.shape[1] <= self.min_peers:
                continue
            # the group's median at each sample (one replica among many barely moves it),
            # over its instances on other replicas' nodes too
            every = np.concatenate([x, extra], axis=1)
            seen = np.isfinite(every).sum(axis=1) > self.min_peers
            med = np.full(len(x), np.nan)
            med[seen] = np.nanmedian(every[seen], axis=1)
            ok = np.isfinite(x) & (med >= self.min_load)[:, None]
            low = (x < self.ratio * med[:, None]) & ok
            judged = ok.sum(axis=0)
            hit = (judged >= 3) & (low.sum(axis=0) >= self.share * np.maximum(judged, 1))
            for m in np.flatnonzero(hit):
                rows = ok[:, m]
                found.append(self._finding(window, keys[m], profile, job, sku, x[rows, m],
                                           med[rows], every.shape[1] - 1))  # fmt: skip
        return found

    def pools(self, window: Window) -> dict[str, Pool]:
        """Per group, its instances' activity over the span here, instance by instance (a
        replica's part, for the others' medians)."""
        act = window.get(catalog.GPU_MIG_GRAPHICS_ACTIVE)
        if act is None or not window.instances or window.empty:
            return {}
        tail = act[window.tail(self.span_s)]
        values, members = {}, {}
        for group, keys in self.groups(window).items():
            n, g, s = (np.array(ax) for ax in zip(*keys, strict=True))
            values[SEP.join(group)] = tail[:, n, g, s].T.ravel()  # member by member
            members[SEP.join(group)] = len(keys)
        return {POOLED: Pool(values, members)}

    def _finding(self, window: Window, key: Key, profile: str, job: str, sku: str,
                 mine: np.ndarray, med: np.ndarray, peers: int) -> Finding:  # fmt: skip
        n, g, _ = key
        info = window.instances[key]
        share = float(np.mean(mine) / max(float(np.mean(med)), 1e-9))
        return Finding(
            node=window.nodes[n],
            subject=f"instance=gpu{g}/{info.instance}",
            kind="instance_straggler",
            severity="warning",
            action="notify",
            detector=self.name,
            confidence=float(min(1.0, 1.0 - share)),
            since=window.now - self.span_s,
            evidence=ev(
                activity=float(np.mean(mine)),
                peer_median=float(np.mean(med)),
                share_of_peers=share,
                peers=peers,
            ),
            summary=(
                f"GPU {g} instance {info.instance} ({profile}, {job or 'unknown workload'},"
                f" {sku or 'unknown model'}) works at {share:.0%} of its {peers}"
                " same-profile peers' median"
            ),
        )
