"""`gpuwarden placement backtest --since 7d`: which nodes the placement tiers would have
de-preferred, and for how long, on the history in Prometheus (the analyzer's marginal
findings). Replays the same ttl rules as the service (``tiers``): a tier starts with the
first firing sample, is refreshed while it fires, expires ttl after the last one, and each
earlier episode of the node within the recurrence window doubles the ttl. The placement
budget is not replayed (Prometheus does not know the partitions); the report says so.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace

from exporter import catalog
from remediation.placement import tiers
from remediation.placement.config import PlacementPolicy

QUERY = f'max by (node) ({catalog.FINDING.name}{{kind="marginal", action="avoid"}})'
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True)
class Episode:
    node: str
    start: float
    last_evidence: float
    end: float  # when the tier would have expired (or the end of the history)
    ttl_s: float
    recurrences: int

    @property
    def hours(self) -> float:
        return (self.end - self.start) / 3600.0


def seconds(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhdw])", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration like 90s, 30m, 24h, 7d")
    return float(m.group(1)) * UNITS[m.group(2)]


def episodes(firing: Mapping[str, Sequence[float]], p: PlacementPolicy, end: float
             ) -> list[Episode]:  # fmt: skip
    """``firing``: node -> the times its avoid finding was seen (Prometheus samples)."""
    out = []
    for node, times in sorted(firing.items()):
        mine: list[Episode] = []
        cur: tiers.Entry | None = None
        rec = 0
        for t in sorted(times):
            if cur is not None and tiers.expired(cur, p, t):
                mine.append(_close(node, cur, p, rec))
                cur = None
            if cur is None:
                rec = sum(e.start >= t - p.recurrence_window_s for e in mine)
                cur = tiers.Entry(node, "marginal", "backtest", t, t, tiers.ttl_for(p, rec))
            else:  # seen again: fresh evidence (the ttl runs from the last sample)
                cur = replace(cur, last_evidence=t)
        if cur is not None:
            last = _close(node, cur, p, rec)
            mine.append(Episode(node, last.start, last.last_evidence, min(last.end, end),
                                last.ttl_s, rec))  # fmt: skip
        out += mine
    return out


def _close(node: str, e: tiers.Entry, p: PlacementPolicy, rec: int) -> Episode:
    return Episode(node, e.since, e.last_evidence, e.until(p), e.ttl_s, rec)


def fetch(url: str, start: float, end: float, step: float, timeout: float = 30.0
          ) -> dict[str, list[float]]:  # fmt: skip
    q = urllib.parse.urlencode({"query": QUERY, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{url.rstrip('/')}/api/v1/query_range?{q}", timeout=timeout) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"Prometheus: {body.get('error', 'query failed')}")
    out: dict[str, list[float]] = {}
    for s in body["data"]["result"]:
        node = s["metric"].get("node", "")
        out[node] = [float(t) for t, v in s["values"] if float(v) >= 1]
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpuwarden placement", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("backtest", help="replay the placement tiers on Prometheus history")
    b.add_argument("--prometheus", default=os.environ.get("GPUWARDEN_PROMETHEUS_URL",
                                                          "http://127.0.0.1:9090"))  # fmt: skip
    b.add_argument("--since", type=seconds, default=7 * 86400.0)
    b.add_argument("--step", type=seconds, default=300.0)
    b.add_argument("--policy", help="remediation policy file (its placement: block)")
    b.add_argument("--json", action="store_true")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    from common.settings import SettingsError
    from remediation import policy as policy_mod

    try:
        p = policy_mod.load(args.policy).placement
    except SettingsError as e:
        print(f"gpuwarden placement: {e}", file=sys.stderr)
        return 2
    end = time.time()
    try:
        seen = fetch(args.prometheus, end - args.since, end, args.step)
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        print(f"gpuwarden placement: cannot query {args.prometheus}: {e}", file=sys.stderr)
        return 2
    eps = episodes(seen, p, end)
    if args.json:
        print(json.dumps([{**asdict(ep), "hours": round(ep.hours, 2)} for ep in eps], indent=2))
        return 0
    for ep in eps:
        when = time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime(ep.start))
        print(f"{ep.node:<20} marginal {when} for {ep.hours:6.1f} h "
              f"(ttl {ep.ttl_s / 3600:.0f} h, {ep.recurrences} earlier)")  # fmt: skip
    nodes = len({ep.node for ep in eps})
    print(f"{len(eps)} episode(s) on {nodes} node(s); the placement budget is not replayed")
    return 0
