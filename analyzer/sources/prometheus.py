"""Prometheus-compatible source (Prometheus, VictoriaMetrics, Thanos, Mimir): incremental reads.

Edge of the analyzer (network I/O through :class:`~analyzer.sources.promhttp.PromHttp`).
Keeps each query's window in memory (:class:`~analyzer.sources.matrix.SeriesMatrix`) and
fetches only ``(last_end - overlap, now]`` each cycle; a full-window backfill only at start,
after a gap longer than the window, or when time goes backwards (``--replay``). Queries are
the declarative :data:`~analyzer.sources.queries.QUERIES`, run at most ``parallel`` at a time,
each with its own timeout and retries. A query that still fails degrades the cycle: its data
is missing from the window (``Window.missing`` says which) and the cycle goes on; only when
every query fails is the read an error.
"""

from __future__ import annotations

import asyncio
import math
import operator
import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace

import numpy as np

from analyzer.sources import SourceError
from analyzer.sources.dialects.discover import (
    RECHECK,
    Discovered,
    discovery_expr,
    foreign_only_exprs,
    hostless_expr,
    parse,
    query_set,
    without,
)
from analyzer.sources.dialects.identity import NodeMap, identity_label, identity_matchers
from analyzer.sources.featureread import covered_expr, moved_exprs
from analyzer.sources.features import FEATURES, Feature
from analyzer.sources.matrix import Key, SeriesMatrix
from analyzer.sources.place import assemble
from analyzer.sources.promhttp import (
    AiohttpProm,
    Parsed,
    PromHttp,
    QueryStats,
    decode,
    with_retries,
)
from analyzer.sources.queries import QUERIES, Gate, Query, quote_value, rows_matchers
from analyzer.sources.topology import (
    Sharing,
    Topology,
    dialect_base,
    fabric_expr,
    foreign_host_queries,
    foreign_jobs_expr,
    foreign_nodes_expr,
    jobs_expr,
    node_matcher,
    nodes_expr,
    topology_window,
)
from analyzer.window import Window
from exporter import catalog


class PrometheusSource:
    name = "prometheus"

    def __init__(
        self,
        url: str,
        window: float = 600.0,
        step: float = 15.0,
        http: PromHttp | None = None,
        leaf_of: Mapping[str, str] | None = None,
        queries: Sequence[Query] = QUERIES,
        timeout: float = 30.0,
        retries: int = 2,
        parallel: int = 4,
        lookback: float = 300.0,
        overlap: int = 0,  # grid points already read to read again (0: a settled point is final)
        settle: float = 5.0,
        timer: Callable[[], float] = time.perf_counter,
        gzip: bool = False,
        discover: bool = False,
        node_map: NodeMap | None = None,
        features: Sequence[Feature] = FEATURES,
    ) -> None:
        self.url = url.rstrip("/")
        self.span, self.step = window, step
        self.T = round(window / step) + 1
        self.http: PromHttp = http or AiohttpProm(self.url, timeout, gzip)
        self.leaf_of = dict(leaf_of or {})
        self.queries = tuple(queries)
        self.retries, self.lookback, self.overlap = retries, lookback, overlap
        self.settle = settle  # a grid point is read once it is this old (its scrapes are in)
        self.timer = timer
        self.parallel = max(parallel, 1)
        self.mats = {q: SeriesMatrix(self.T) for q in self.queries}
        self.end: float | None = None
        # dialects (analyzer.sources.dialects): which exporters' names the server holds,
        # looked up at the first cycle and every RECHECK seconds after
        self.discover, self.node_map = discover, node_map or NodeMap()
        self.found: Discovered | None = None
        self._found_at = -math.inf
        self._blank = True  # no node in the last window: look again next cycle (a new server)
        self.stats = QueryStats()
        self.errors: dict[str, str] = {}
        self.gated: dict[str, set[Key]] = {}
        self._last_rows: dict[str, tuple[SeriesMatrix, int, list[dict[str, str]], np.ndarray]] = {}
        self._gate_reads: dict[
            Gate, asyncio.Future[tuple[Parsed, Parsed]]
        ] = {}  # this cycle  # per gated query: the GPUs whose rows are held
        # the rule engine's moved-counter checks (alerts/features/) over this window, read for
        # the nodes it covers (analyzer.sources.featureread); none covered: raw scans only
        self.moved_features = {
            f.metric.name: f for f in features if f.kind == "moved" and f.span == window
        }
        self.present = next((f for f in features if f.kind == "present"), None)
        self.covered: set[str] = set()
        self.known: set[str] = set()  # the nodes of the last window
        # the sharded mode (analyzer.replicas): given the fleet's topology, the nodes this
        # replica owns this cycle; None: the whole fleet. ``scoped``: the nodes whose rows the
        # native matrices hold over the whole window (None: any node); ``owned``: this cycle's
        self.scope: Callable[[Window], Collection[str]] | None = None
        self.scoped: frozenset[str] | None = None
        self.owned: frozenset[str] | None = None
        self.topology: Window | None = None  # this cycle's, read for the scope
        # this cycle's way to the topology another replica read (None: read it here)
        self.share: Sharing | None = None
        self._sel = ""  # the node matcher of the pass being read ("": every node)
        self._nodes: frozenset[str] | None = None  # the nodes of that pass (None: every node)
        # per foreign exporter, the labels its hosts were named by in this cycle's topology
        self._host_labels: Mapping[str, frozenset[str]] = {}

    # ------------------------------------------------------------------ cycle
    async def read(self, now: float) -> Window:
        t0 = self.timer()
        end = math.floor((now - self.settle) / self.step) * self.step
        if self.end is not None and end < self.end:  # time went backwards: start over
            self.mats = {q: SeriesMatrix(self.T) for q in self.queries}
            self.end, self.scoped, self.gated = None, None, {}
        k = self.T if self.end is None else round((end - self.end) / self.step)
        for m in self.mats.values():
            m.slide(k)
        self.end = end
        self.stats.cycle_bytes = self.stats.cycle_samples = 0.0
        if self.discover and (self._blank or not 0 <= end - self._found_at < RECHECK):
            await self._discover(end)
        grid = end - self.step * np.arange(self.T - 1, -1, -1)
        if self.scope is None:
            if self.scoped is not None:  # the rows held are a replica's: read the fleet afresh
                self._reset(tuple(q for q in self.queries if self._narrows(q)))
            self.owned = self.scoped = self.topology = None
            await self._coverage(end, "")
            failed = await self._pass(self.queries, self.mats, end, None)
        else:
            failed = await self._scoped(end, grid)
        if failed and len(failed) == len(self.queries):
            raise SourceError(f"every query failed; first: {self.errors[failed[0]]}")
        items = [(q, self._owned_rows(q, self.mats[q])) for q in self.queries]
        w = await asyncio.to_thread(assemble, items, grid, self.step, self.leaf_of, failed)
        # no node to read: look again next cycle (of a replica: none in the whole fleet)
        self._blank = not (w.nodes if self.topology is None else self.topology.nodes)
        self.known = set(w.nodes)
        self.stats.series = {q.name: float(len(m)) for q, m in items}
        self.stats.cycle_seconds = self.timer() - t0
        self.stats.cycles += 1
        return w

    async def _pass(self, queries: Sequence[Query], mats: Mapping[Query, SeriesMatrix],
                    end: float, nodes: frozenset[str] | None) -> tuple[str, ...]:  # fmt: skip
        """Fetch ``queries`` into ``mats``, narrowed to ``nodes`` (None: the whole fleet): a
        native family by its ``node`` label, a foreign one by the labels its node is derived
        from (:meth:`_foreign`); the names of those that failed."""
        sem = asyncio.Semaphore(self.parallel)
        self._gate_reads, self._nodes = {}, nodes
        self._sel = "" if nodes is None else node_matcher(nodes)

        async def one(q: Query) -> str | None:
            async with sem:
                try:
                    await self._fetch(q, end, mats[q])
                    return None
                except SourceError as e:
                    self.stats.fail(q.name)
                    self.errors[q.name] = str(e)
                    return q.name

        return tuple(f for f in await asyncio.gather(*(one(q) for q in queries)) if f)

    # ------------------------------------------------------------------ a replica's read
    async def _scoped(self, end: float, grid: np.ndarray) -> tuple[str, ...]:
        """The sharded mode: the fleet's topology (small instant queries), the nodes
        :attr:`scope` says this replica owns, then the window of only those nodes. A node
        whose rows are held from the last cycle is read incrementally; a node newly owned
        has no rows held and is read over the whole window, like a cold start narrowed to
        it (anchors, moved checks of every shard, gated rows whole), then joins the rows
        held. A node no longer owned is forgotten. A foreign dialect's family is narrowed by
        the labels its node is derived from (``Hostname``, ``instance``...), under a node map
        with a pattern by the pattern around the owned nodes, except where that is not proven
        a superset (:mod:`.dialects.hostpattern`): then it is read whole and narrowed in
        memory."""
        assert self.scope is not None
        parted = tuple(q for q in self.queries if self._narrows(q))
        whole = tuple(q for q in self.queries if not self._narrows(q))
        topo = await self._shared_topology(end, grid)
        self._host_labels = topo.host_labels
        failed = await self._pass(whole, self.mats, end, None) if whole else ()
        own = frozenset(self.scope(topo.window))
        self.topology = topo.window
        self.owned = own
        kept = own if self.scoped is None else own & self.scoped
        fresh = own - kept
        if not kept:  # nothing held is of use: the owned nodes' whole window
            self._reset(parted)
            kept, fresh = fresh, frozenset()
        else:
            self._forget(parted, kept)
        await self._coverage(end, node_matcher(own) if own else None)
        if kept:
            failed += await self._pass(parted, self.mats, end, kept)
        scoped = kept
        if fresh:
            held, self.gated = self.gated, {}
            mats = {q: SeriesMatrix(self.T) for q in parted}
            bad = await self._pass(parted, mats, end, fresh)
            for name, units in held.items():
                self.gated[name] = units | self.gated.get(name, set())
            for q in parted:  # (a family never read yet stays cold: read whole next cycle)
                _join(self.mats[q], mats[q])
            failed += bad
            if not bad:  # else read them whole again next cycle
                scoped = own
        self.scoped = scoped
        return tuple(dict.fromkeys(failed))

    def _narrows(self, q: Query) -> bool:
        """Whether a replica's read of ``q`` is narrowed to its nodes on the server."""
        return not q.dialect or self.node_map.selectable

    def _foreign(self, q: Query) -> list[str]:
        """The matcher sets (or-ed) that narrow the foreign family ``q`` to the pass's nodes
        (on the labels its node is derived from: :func:`.identity.identity_matchers`);
        ``[""]``: the whole fleet."""
        if self._nodes is None or not self._narrows(q):
            return [""]
        # only the labels this exporter's hosts are named by (each is one more selection of
        # every selector: dcgm-exporter's Hostname, not also hostname and node), all of them
        # where the topology saw none of its hosts
        seen = self._host_labels.get(dialect_base(q))
        labels = [x for x in q.by if x in seen] if seen else q.by
        return identity_matchers(labels, self._nodes, self.node_map) or [""]

    def _reset(self, queries: Sequence[Query]) -> None:
        for q in queries:
            self.mats[q] = SeriesMatrix(self.T)
            self.gated.pop(q.name, None)

    def _forget(self, queries: Sequence[Query], kept: frozenset[str]) -> None:
        """Drop the rows (and held gate units) of nodes outside ``kept``."""
        for q in queries:
            if "node" not in q.labels:
                continue
            i, m = q.labels.index("node"), self.mats[q]
            if any(k[i] not in kept for k in m.keys):
                m.keep_only({k for k in m.keys if k[i] in kept})
            if q.gate is not None and q.name in self.gated:
                g = q.gate.labels.index("node")
                self.gated[q.name] = {u for u in self.gated[q.name] if u[g] in kept}

    def _owned_rows(self, q: Query, m: SeriesMatrix) -> SeriesMatrix:
        """``m`` narrowed to the owned nodes (a foreign family's read selects a superset)."""
        if self.owned is None or "node" not in q.labels or not len(m):
            return m
        i = q.labels.index("node")
        keep = np.fromiter((k[i] in self.owned for k in m.keys), bool, len(m))
        return m if keep.all() else m.subset(keep)

    async def _shared_topology(self, at: float, grid: np.ndarray) -> Topology:
        """This cycle's topology: the one :attr:`share` hands over (the leader's, read at
        ``at`` over ``grid``), else read here (and left for the others, if this replica
        leads)."""
        if self.share is not None:
            got = await asyncio.to_thread(self.share.shared, at, grid)
            if got is not None:
                return got
        topo = await self._topology(at, grid)
        if self.share is not None:
            await asyncio.to_thread(self.share.read, at, topo)
        return topo

    async def _topology(self, at: float, grid: np.ndarray) -> Topology:
        """The fleet's nodes, jobs and NVLink domains now (:mod:`analyzer.sources.topology`),
        with the hosts and jobs the foreign families name, fleet-wide. A failure fails the
        read: without the topology no replica can tell what it owns."""

        async def ask(expr: str) -> Parsed:
            async def go() -> Parsed:
                raw = await self.http.post("/api/v1/query", {"query": expr, "time": f"{at:.3f}"})
                got = decode(raw, "topology")
                self.stats.add("topology", len(raw), got.samples, 0.0)
                return got

            return await with_retries(go, self.retries)

        span = self.span + self.lookback
        hosts = foreign_host_queries(self.queries)
        jobs_of = [q for q in self.queries if q.dialect and q.metric is catalog.GPU_ALLOCATION_INFO
                   and "job_id" in q.labels]  # fmt: skip
        try:
            present, alloc, fabric, *foreign = await asyncio.gather(
                ask(nodes_expr(span)), ask(jobs_expr()), ask(fabric_expr()),
                *(ask(foreign_nodes_expr(q, span)) for q in hosts),
                *(ask(foreign_jobs_expr(q)) for q in jobs_of),
            )  # fmt: skip
        except SourceError as e:
            self.stats.fail("topology")
            raise SourceError(f"topology: {e}") from None
        nodes = {lab.get("node", "") for lab in present.labels}
        jobs = [(lab.get("node", ""), lab.get("job_id", "")) for lab in alloc.labels]
        host_labels: dict[str, set[str]] = {}
        for i, (q, got) in enumerate(zip((*hosts, *jobs_of), foreign, strict=True)):
            assert q.relabel is not None  # a foreign host's node, as the family's reader names it
            named = [q.relabel(dict(lab)) for lab in got.labels]
            if i < len(hosts):
                nodes.update(x.get("node", "") for x in named)
                by = host_labels.setdefault(dialect_base(q), set())
                by.update(identity_label(lab) for lab in got.labels)
                by.discard("")
            else:
                jobs += [(x.get("node", ""), x.get("job_id", "")) for x in named]
        counts = np.ones(len(fabric.labels))
        counts[fabric.series_of_samples()] = fabric.values
        votes = []
        for lab, n in zip(fabric.labels, counts, strict=True):
            row = (lab.get("node", ""), lab.get("cluster_uuid", ""), lab.get("clique_id", ""))
            votes += [row] * max(int(n), 1)
        window = topology_window(grid, self.step, nodes, jobs, votes, self.leaf_of)
        return Topology(window, {k: frozenset(v) for k, v in host_labels.items()})

    async def _coverage(self, at: float, extra: str | None) -> None:
        """The nodes whose feature rules ran (their ``present`` feature at ``at``, of those
        ``extra`` selects; None: no node to read); on a failure, none: every node is scanned
        raw this cycle."""
        self.covered = set()
        if not self.moved_features or self.present is None or extra is None:
            return
        try:
            form = {"query": covered_expr(self.present, extra), "time": f"{at:.3f}"}
            raw = await self.http.post("/api/v1/query", form)
            got = decode(raw, "features")
            self.stats.add("features", len(raw), got.samples, 0.0)
        except SourceError as e:
            self.errors["features"] = str(e)
            return
        self.covered = {lab.get("node", "") for lab in got.labels} - {""}

    async def _discover(self, at: float) -> None:
        """Which dialects hold series now; the query set follows (rows of queries that stay
        are kept; a query new to the set backfills its window like a cold start)."""

        async def ask(expr: str) -> Parsed:
            async def go() -> Parsed:
                raw = await self.http.post("/api/v1/query", {"query": expr, "time": f"{at:.3f}"})
                self.stats.add("discovery", len(raw), 0, 0.0)
                return decode(raw, "discovery")

            return await with_retries(go, self.retries)

        try:
            got = await ask(discovery_expr())
            found = parse(lab.get("__name__", "") for lab in got.labels)
            hostless = hostless_expr(found)
            if hostless is not None:  # no answer: every dcgm series names its host
                found = replace(found, dcgm_hostname=not (await ask(hostless)).labels)
            for dialect, expr in foreign_only_exprs(found).items():
                if not (await ask(expr)).labels:  # every node of it is read natively
                    found = without(found, dialect)
        except SourceError as e:
            self.errors["discovery"] = str(e)
            return
        self._found_at = at
        if found == self.found:
            return
        self.found = found
        old = {q.name: q for q in self.queries}
        queries = tuple(old.get(q.name, q) for q in query_set(found, self.node_map))
        mats = {q: self.mats.get(q) for q in queries}
        self.queries = queries
        self.mats = {q: SeriesMatrix(self.T) if m is None else m for q, m in mats.items()}

    # ------------------------------------------------------------------ one query
    async def _fetch(self, q: Query, end: float, m: SeriesMatrix) -> None:
        sel = "" if q.dialect else self._sel  # a foreign family's: self._foreign(q)
        start = end - self.step * (self.T - 1)
        behind = self.span if m.end is None else end - m.end  # since this query last succeeded
        cold = behind >= self.span
        # the grid points after the last one read (and `overlap` already read ones again)
        first = 0 if cold else max(self.T - round(behind / self.step) - self.overlap, 0)
        if q.every:
            if cold or m.end is None or end - m.end >= q.every - self.step / 2:
                got = await self._instant(q, q.identity_expr(sel), end)
                m.keep_only(set())
                rows = m.rows(_keys(q.labels, got.labels))
                votes = np.ones(len(rows))
                votes[got.series_of_samples()] = got.values
                m.vals[:, :] = np.nan
                m.vals[rows, -1] = votes
            else:
                return  # the rows hold until the next identity read (m.end: that read's time)
        elif q.gate is not None:
            await self._gated(q, m, start, end, cold, first, sel)
        elif q.moved_only and q.dialect:
            if cold:
                m.keep_only(set())
            m.clear(first)
            m.keep_only(await self._moved_foreign(q, m, start, end, first))
        elif q.moved_only:
            if cold:
                m.keep_only(set())
            m.clear(first)  # every row kept is fetched again from `first` (or whole, if new)
            m.keep_only(await self._moved(q, m, start, end, cold, first, base=sel))
        else:
            pad = self.lookback if (cold and q.anchored) else 0.0
            expr = " or ".join(q.expr(x) for x in self._foreign(q)) if q.dialect else q.expr(sel)
            got = await self._range(q, expr, start + first * self.step - pad, end)
            m.clear(first)
            self._merge(q, m, got, start)
            if not q.anchored:
                m.prune()
        m.end = end

    async def _gated(self, q: Query, m: SeriesMatrix, start: float, end: float, cold: bool,
                     first: int, sel: str = "") -> None:  # fmt: skip
        """Only the units (GPUs, ports) the gate names: of a moved-only counter, their series
        that moved; of a sparse gauge, their rows (new points of the units already held, the
        whole window of those just named). Units that serve no gate series are read as without
        a gate."""
        assert q.gate is not None
        g = q.gate
        read = self._gate_reads.get(g)  # queries sharing a gate (IB counters) read it once
        if read is None:
            read = self._gate_reads[g] = asyncio.ensure_future(asyncio.gather(
                self._instant(q, g.uncovered_expr(self.span, sel), end),
                self._instant(q, g.expr(self.span, sel), end),
            ))  # fmt: skip
        uncovered, named = await asyncio.shield(read)
        loose, hot = set(_keys(g.labels, uncovered.labels)), set(_keys(g.labels, named.labels))
        if cold:
            m.keep_only(set())
        m.clear(first)  # every row kept is fetched again from `first` (or whole, if new)
        at = [q.labels.index(x) for x in g.labels]
        keep: set[Key] = set()
        if q.moved_only:
            sels = rows_matchers(g.labels, sorted(hot)) if hot else []
            keep = await self._moved_keys(q, [q.moved_expr(self.span, mt) for mt in sels], end)
            await self._refresh(q, m, keep, start, end, first)
            if loose:
                scope = rows_matchers(g.labels, sorted(loose))
                keep |= await self._moved(q, m, start, end, cold, first, scope,
                                          lambda k: tuple(k[i] for i in at) in loose)  # fmt: skip
        else:
            units, held = hot | loose, set() if cold else self.gated.get(q.name, set())
            for part, since in ((sorted(units & held), first), (sorted(units - held), 0)):
                if part and since < self.T:
                    got = await self._rows(q, part, start + since * self.step, end, g.labels)
                    self._merge(q, m, got, start)
            keep = {k for k in m.keys if tuple(k[i] for i in at) in units}
            self.gated[q.name] = units
        m.keep_only(keep)
        if not q.moved_only:
            m.prune()

    async def _moved(self, q: Query, m: SeriesMatrix, start: float, end: float, cold: bool,
                     first: int, scope: list[str] | None = None,
                     inside: Callable[[Key], bool] | None = None,
                     base: str = "") -> set[Key]:  # fmt: skip
        """Which series moved within the window ending now (small instant queries, over one
        shard of the GPUs per cycle, all at a cold start), then :meth:`_refresh` them.
        ``scope``: only the series these matcher sets select (the rows ``inside`` says);
        ``base``: the matcher of the nodes read (without a ``scope``). Returns the rows to keep (the caller cleared ``first..`` of every row)."""
        shards = range(q.moved_shards) if cold else (self.stats.cycles,)
        sels = [
            ",".join(x for x in (q.shard_matcher(s), sc) if x)
            for s in shards
            for sc in (scope if scope is not None else [base])
        ]
        feature = None if cold or q.dialect else self.moved_features.get(q.name)
        exprs = moved_exprs(q, feature, sels, self.span, self.covered, self.known)
        keys = await self._moved_keys(q, exprs, end)
        if not cold and q.moved_shards > 1:  # rows of the shards not checked now stay held
            checked = re.compile(q.shard_matcher(self.stats.cycles).split('"')[1])
            g = q.labels.index("gpu")
            keys |= {
                k for k in m.keys if (inside is None or inside(k)) and not checked.fullmatch(k[g])
            }  # fmt: skip
        await self._refresh(q, m, keys, start, end, first)
        return keys

    async def _moved_foreign(self, q: Query, m: SeriesMatrix, start: float, end: float,
                             first: int) -> set[Key]:  # fmt: skip
        """A foreign counter family: the series that moved within the window (one instant
        query, answered in the foreign labels, of the pass's nodes), then the new points of
        those already held and the whole window of the others, each selected by its own
        foreign labels (the catalogue's ``node`` exists only after relabelling)."""
        assert q.relabel is not None
        check = " or ".join(q.moved_expr(self.span, x) for x in self._foreign(q))
        moved = await self._call(q, "/api/v1/query", {"query": check, "time": f"{end:.3f}"},
                                 relabel=False)  # fmt: skip
        raw: dict[Key, str] = {}
        for lab, k in zip(moved.labels, _keys(q.labels, [q.relabel(dict(x)) for x in moved.labels]),
                          strict=True):  # fmt: skip
            raw[k] = ",".join(f'{n}="{quote_value(v)}"' for n, v in sorted(lab.items()))
        have = set(m.keys)
        for rows, since in ((sorted(raw.keys() & have), first), (sorted(raw.keys() - have), 0)):
            if not rows or since >= self.T:
                continue
            for i in range(0, len(rows), 200):
                expr = " or ".join(q.expr(raw[k]) for k in rows[i : i + 200])
                self._merge(q, m, await self._range(q, expr, start + since * self.step, end), start)
        return set(raw)

    async def _moved_keys(self, q: Query, exprs: list[str], at: float) -> set[Key]:
        """The rows that the moved-checks ``exprs`` return (or-ed, 200 per instant query)."""
        keys: set[Key] = set()
        for i in range(0, len(exprs), 200):
            moved = await self._instant(q, " or ".join(exprs[i : i + 200]), at)
            keys.update(_keys(q.labels, moved.labels))
        return keys

    async def _refresh(self, q: Query, m: SeriesMatrix, keys: set[Key], start: float,
                       end: float, first: int) -> None:  # fmt: skip
        """The new points of the rows already held, the whole window of the others."""
        have = set(m.keys)
        held, new = sorted(keys & have), sorted(keys - have)
        if held and first < self.T:
            self._merge(q, m, await self._rows(q, held, start + first * self.step, end), start)
        if new:
            self._merge(q, m, await self._rows(q, new, start, end), start)

    async def _rows(self, q: Query, rows: list[Key], start: float, end: float,
                    labels: tuple[str, ...] | None = None) -> Parsed:  # fmt: skip
        """The points of exactly these rows (keyed by ``labels``, the query's by default): a
        selector per node or per label combination, or-ed, 200 per query."""
        labels = labels or q.labels
        matchers = rows_matchers(labels, rows)
        parts = []
        for i in range(0, len(matchers), 200):
            expr = " or ".join(q.expr(mt) for mt in matchers[i : i + 200])
            parts.append(await self._range(q, expr, start, end))
        got = parts[0] if len(parts) == 1 else Parsed.concat(parts)
        want = set(rows)
        return got.only([j for j, k in enumerate(_keys(labels, got.labels)) if k in want])

    def _merge(self, q: Query, m: SeriesMatrix, got: Parsed, start: float) -> None:
        """Place every sample of ``got`` in one vectorised assignment (no per-series numpy)."""
        rows = self._row_index(q, m, got)[got.series_of_samples()]
        cols = np.rint((got.times - start) / self.step).astype(np.int64)
        inside = (cols >= 0) & (cols < self.T)
        m.vals[rows[inside], cols[inside]] = got.values[inside]
        if q.anchored and not inside.all():  # samples before the window: the anchors
            before = cols < 0
            r, c, v = rows[before], cols[before], got.values[before]
            ok = ~np.isnan(v)
            order = np.lexsort((c[ok], r[ok]))  # by row, then time: the last per row wins
            m.anchor[r[ok][order]] = v[ok][order]

    def _row_index(self, q: Query, m: SeriesMatrix, got: Parsed) -> np.ndarray:
        """The matrix row of each series of ``got``. A steady-state answer lists the same
        series in the same order as the last one (Prometheus sorts a matrix by labels): then
        the last answer's rows serve again (comparing the label dicts is C-level and ~10x
        cheaper than keying and looking up each series)."""
        last = self._last_rows.get(q.name)
        if last is not None and last[0] is m and last[1] == m.version and last[2] == got.labels:
            return last[3]
        rows = m.rows(_keys(q.labels, got.labels))
        self._last_rows[q.name] = (m, m.version, got.labels, rows)
        return rows

    # ------------------------------------------------------------------ HTTP
    async def _range(self, q: Query, expr: str, start: float, end: float) -> Parsed:
        form = {
            "query": expr,
            "start": f"{start:.3f}",
            "end": f"{end:.3f}",
            "step": f"{self.step:g}",
        }
        return await self._call(q, "/api/v1/query_range", form)

    async def _instant(self, q: Query, expr: str, at: float) -> Parsed:
        return await self._call(q, "/api/v1/query", {"query": expr, "time": f"{at:.3f}"})

    async def _call(self, q: Query, path: str, form: Mapping[str, str],
                    relabel: bool = True) -> Parsed:  # fmt: skip
        async def go() -> Parsed:
            t0 = self.timer()
            raw = await self.http.post(path, form)
            got = decode(raw, q.name)  # on the loop: a thread only adds GIL hand-offs
            if relabel and q.relabel is not None:  # a foreign dialect's labels -> the catalogue's
                got.labels = [q.relabel(lab) for lab in got.labels]
            self.stats.add(q.name, len(raw), got.samples, self.timer() - t0)
            if got.warnings:  # kept (a partial answer beats none), and counted
                self.stats.warn(q.name)
            return got

        return await with_retries(go, self.retries)

    async def close(self) -> None:
        close = getattr(self.http, "close", None)
        if close is not None:
            await close()


def _join(into: SeriesMatrix, rows: SeriesMatrix) -> None:
    """The rows of ``rows`` (other nodes') added to ``into``, values and anchors."""
    if not len(rows):
        return
    at = into.rows(rows.keys)
    into.vals[at] = rows.vals
    into.anchor[at] = rows.anchor


def _keys(names: tuple[str, ...], labels: Sequence[Mapping[str, str]]) -> list[Key]:
    """Each series' key (its values of ``names``, "" where absent): the hot loop of a read,
    one C-level itemgetter per series, the per-label path only for a series lacking one."""
    pick = operator.itemgetter(*names)
    out: list[Key] = []
    for lab in labels:
        try:
            k = pick(lab)
        except KeyError:
            k = tuple(lab.get(x, "") for x in names)
        out.append(k if isinstance(k, tuple) else (k,))
    return out
