"""A hand-written fake of the Prometheus HTTP API for the incremental-read property tests.

Evaluates exactly the PromQL shapes :mod:`analyzer.sources.queries` renders (``max by``,
``!= v``, vector ``!=`` / ``unless`` / ``or``, ``offset``, ``changes(...[Ns]) > 0``,
``max_over_time(...[Ns]) > 0``, the gates' uncovered units, ``=~`` matchers) over series whose
samples sit on the step grid; a missing sample is a stale series at that step (no lookback),
as after a failed scrape. ``offset`` looks back exactly that far. The real server is exercised by test_prometheus.py.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping

Labels = tuple[tuple[str, str], ...]

_SEL = re.compile(r"([\w:]+)(?:\{(.*?)\})?")
_MATCH = re.compile(r'(\w+)(=~|!=|=)"((?:[^"\\]|\\.)*)"')


class FakeProm:
    def __init__(self) -> None:
        self.data: dict[tuple[str, Labels], dict[float, float]] = {}
        self.calls: list[str] = []
        self.fail: set[str] = set()  # metric names whose queries answer HTTP 503
        # metric names whose answers carry a warning (Thanos Query: a store was unreachable)
        self.warn: set[str] = set()

    def add(self, name: str, labels: Mapping[str, str], t: float, v: float) -> None:
        self.data.setdefault((name, tuple(sorted(labels.items()))), {})[round(t, 3)] = v

    def _select(self, sel: str) -> list[tuple[Labels, dict[float, float]]]:
        m = _SEL.fullmatch(sel.strip())
        assert m, sel
        name, matchers = m.group(1), _MATCH.findall(m.group(2) or "")
        out = []
        for (n, labels), samples in self.data.items():
            d = dict(labels)
            if n == name and all(
                re.fullmatch(v.replace("\\\\", "\\"), d.get(k, ""))
                if op == "=~"
                else (d.get(k, "") != v if op == "!=" else d.get(k) == v)
                for k, op, v in matchers
            ):
                out.append((labels, samples))
        return out

    def _window(self, sel: str, t: float, rng: str) -> list[tuple[Labels, list[float]]]:
        """Each selected series' values within [t - range, t] (Prometheus 2.x: inclusive)."""
        lo = round(t - float(rng), 3)
        out = []
        for labels, samples in self._select(sel):
            vals = [v for ts, v in sorted(samples.items()) if lo <= ts <= round(t, 3)]
            if vals:
                out.append((labels, vals))
        return out

    def _vector(self, expr: str, t: float) -> dict[Labels, float]:
        expr = expr.strip()
        un = re.fullmatch(
            r"\(max by \(([\w,]+)\) \(count_over_time\((\w+)\[(\d+)s\]\)\)"
            r" > on \(\1\) max by \(\1\) \(count_over_time\((\w+)\[\3s\]\)\)\)"
            r" or \(.* unless on .*\)",
            expr,
        )
        if un:  # units with fewer gate samples than presence samples in the range, or none
            by = un.group(1).split(",")

            def counts(sel: str) -> dict[tuple[tuple[str, str], ...], int]:
                out: dict[tuple[tuple[str, str], ...], int] = {}
                for labels, vals in self._window(sel, t, un.group(3)):
                    key = tuple((k, dict(labels).get(k, "")) for k in by)
                    out[key] = max(out.get(key, 0), len(vals))
                return out

            seen, gated = counts(un.group(2)), counts(un.group(4))
            return {k: 1.0 for k, n in sorted(seen.items()) if n > gated.get(k, 0)}
        if expr.startswith("(") and ") or (" in expr:  # (A != B) or (A unless B)
            left, right = expr[1:-1].split(") or (", 1)
            out = self._vector(right, t)
            out.update(self._vector(left, t))
            return out
        if expr.startswith("max by") and " or max by" in expr:  # one selector per node, or-ed
            out = {}
            for part in expr.split(" or max by"):
                out.update(self._vector(part if part.startswith("max by") else "max by" + part, t))
            return out
        for op in (" != max by", " unless max by"):
            if op in expr:
                a, b = expr.split(op, 1)
                va, vb = self._vector(a, t), self._vector("max by" + b, t)
                if op.startswith(" !="):
                    return {k: v for k, v in va.items() if k in vb and vb[k] != v}
                return {k: v for k, v in va.items() if k not in vb}
        cnt = re.fullmatch(r"count by \(([\w,]+)\) \((.*)\)", expr)
        if cnt:  # an identity read: how many series name each row now
            counted: dict[Labels, float] = {}
            for labels, samples in self._select(cnt.group(2)):
                if round(t, 3) in samples:
                    key = tuple((k, dict(labels).get(k, "")) for k in cnt.group(1).split(","))
                    counted[key] = counted.get(key, 0.0) + 1.0
            return counted
        m = re.fullmatch(r"max by \(([\w,]+)\) \((.*)\)", expr)
        assert m, expr
        by, inner = m.group(1).split(","), m.group(2)
        ch = re.fullmatch(r"(changes|max_over_time)\((.*)\[(\d+)s\]\) > 0", inner)
        if ch:  # series whose value changed / was above 0 within [t - range, t]
            moved: dict[Labels, float] = {}
            for labels, vals in self._window(ch.group(2), t, ch.group(3)):
                if ch.group(1) == "changes":
                    n = float(sum(a != b for a, b in itertools.pairwise(vals)))
                else:
                    n = max(vals)
                if n > 0:
                    key = tuple((k, dict(labels).get(k, "")) for k in by)
                    moved[key] = max(moved.get(key, n), n)
            return moved
        off = re.search(r" offset (\d+)s$", inner)
        if off:  # the value one window earlier
            t, inner = t - float(off.group(1)), inner[: off.start()]
        rows: dict[Labels, float] = {}
        ne = re.fullmatch(r"(.*) != (\S+)", inner)
        sel = ne.group(1) if ne else inner
        for labels, samples in self._select(sel):
            if round(t, 3) not in samples:
                continue
            val = samples[round(t, 3)]
            if ne and val == float(ne.group(2)):
                continue
            key = tuple((k, dict(labels).get(k, "")) for k in by)
            rows[key] = max(rows.get(key, val), val)
        return rows

    async def post(self, path: str, form: Mapping[str, str]) -> bytes:
        from analyzer.sources import SourceError

        q = form["query"]
        self.calls.append(q)
        if any(name in q for name in self.fail):
            raise SourceError(f"HTTP 503 for {q[:40]}")
        if path.endswith("query_range"):
            start, end, step = float(form["start"]), float(form["end"]), float(form["step"])
            series: dict[Labels, list[list[object]]] = {}
            n = round((end - start) / step)
            for i in range(n + 1):
                t = round(start + i * step, 3)
                for k, v in self._vector(q, t).items():
                    series.setdefault(k, []).append([t, repr(v)])
            result = [{"metric": dict(k), "values": v} for k, v in series.items()]
            return self._body(q, "matrix", result)
        t = float(form["time"])
        result = [{"metric": dict(k), "value": [t, repr(v)]} for k, v in self._vector(q, t).items()]
        return self._body(q, "vector", result)

    def _body(self, q: str, kind: str, result: list[dict[str, object]]) -> bytes:
        body: dict[str, object] = {"status": "success",
                                   "data": {"resultType": kind, "result": result}}  # fmt: skip
        if any(name in q for name in self.warn):
            body["warnings"] = ['fetch series for {replica="b"}: connection refused']
        return json.dumps(body).encode()
