"""A fleet's scraped history split across Prometheus shards, and the global layer over them.

Sharded Prometheus at scale (issue 33): each shard scrapes only the nodes whose
``gpuwarden_shard`` target label (the ``hashmod`` relabel of
``alerts/generate_feature_rules.py``) is its own, and a global Prometheus with no data of its
own reads every shard through ``remote_read`` (``read_recent: true``, so even the newest
samples come from the shards): the querying layer the job-domain rules need.

:func:`split_openmetrics` turns one OpenMetrics history of the whole fleet (as
:class:`gpuwarden.lab.openmetrics.ScrapeRecorder` writes it) into one file per shard, each
sample routed by its ``node`` label and labelled with its shard as the relabel would have
labelled it at scrape time, ready for ``promtool tsdb create-blocks-from openmetrics``.
:func:`global_config` is the global Prometheus's configuration. Rule groups that read
another group's records (the job z-scores read the recorded job statistics) run in
:func:`stages`; :func:`backfill_records` has ``promtool tsdb create-blocks-from rules`` evaluate
a stage against a Prometheus and write its records as blocks, so that the next stage's instant
queries find them where a ruler would have recorded them.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from analyzer.sources.features import SHARD_LABEL

_NODE = 'node="'


def round_robin(nodes: Sequence[str], shards: int) -> dict[str, int]:
    """Node ``k`` of the fleet to shard ``k % shards``: every shard holds the same number of
    nodes (±1) and every multi-node job (the simulator places a job on adjacent nodes) spans
    shards, as it does under the relabel's hash."""
    if shards < 1:
        raise ValueError(f"shards={shards}: at least 1")
    return {n: k % shards for k, n in enumerate(nodes)}


def split_openmetrics(src: Path, outs: Sequence[Path], shard_of: Mapping[str, int]) -> list[int]:
    """Write each sample of ``src`` to ``outs[shard_of[node]]`` with ``gpuwarden_shard`` set;
    every ``#`` line (TYPE, EOF) goes to every file. Returns the samples per shard. A sample
    without a ``node`` label, or of a node ``shard_of`` does not know, is an error (nothing
    is guessed): the partial files are removed."""
    wrong = sorted({s for s in shard_of.values() if not 0 <= s < len(outs)})
    if wrong:
        raise ValueError(f"shard_of names shards {wrong}, outside 0..{len(outs) - 1}")
    counts = [0] * len(outs)
    prefix = {s: f'{{{SHARD_LABEL}="{s}",' for s in range(len(outs))}
    files = [p.open("w") for p in outs]
    ok = False
    try:
        with src.open() as f:
            for lineno, line in enumerate(f, 1):
                if line.startswith("#"):
                    for o in files:
                        o.write(line)
                    continue
                if not line.strip():
                    continue
                brace = line.find("{")
                a = line.find("{" + _NODE)
                a = a if a >= 0 else line.find("," + _NODE)  # not e.g. peer_node="
                b = line.find('"', a + 1 + len(_NODE)) if a >= 0 else -1
                if brace < 0 or a < brace or b < 0:
                    raise ValueError(
                        f"{src}:{lineno}: a sample without a node label: {line[:120]!r}"
                    )
                node = line[a + 1 + len(_NODE) : b]
                s = shard_of.get(node)
                if s is None:
                    raise ValueError(f"{src}:{lineno}: node {node!r} is in no shard")
                files[s].write(line.replace("{", prefix[s], 1))
                counts[s] += 1
        ok = True
    finally:
        for o in files:
            o.close()
        if not ok:
            for p in outs:
                p.unlink(missing_ok=True)
    return counts


def global_config(shard_urls: Sequence[str], scrape_interval: float = 15.0) -> str:
    """The global Prometheus: no scrapes, every shard read through ``remote_read``."""
    return yaml.safe_dump(
        {
            "global": {"scrape_interval": f"{scrape_interval:g}s"},
            "scrape_configs": [],
            "remote_read": [
                {"name": f"shard-{i}", "url": f"{u.rstrip('/')}/api/v1/read", "read_recent": True}
                for i, u in enumerate(shard_urls)
            ],
        },
        sort_keys=False,
    )


Group = tuple[str, list[tuple[str, str]]]  # (name, [(record, expr)])


def stages(groups: Sequence[Group]) -> list[list[Group]]:
    """The groups in evaluation order: a group that reads a record of another group comes in a
    later stage than it (by the record's name in the expression). A cycle is an error."""
    made = {record: name for name, rules in groups for record, _ in rules}
    needs = {
        name: {made[r] for r in made for _, e in rules if r in e and made[r] != name}
        for name, rules in groups
    }
    out: list[list[Group]] = []
    done: set[str] = set()
    left = list(groups)
    while left:
        ready = [g for g in left if needs[g[0]] <= done]
        if not ready:
            raise ValueError(f"groups read each other's records: {sorted(g[0] for g in left)}")
        out.append(ready)
        done |= {g[0] for g in ready}
        left = [g for g in left if g[0] not in done]
    return out


def backfill_records(
    promtool: str, url: str, groups: Sequence[Group], start: float, end: float, step: float,
    data: Path,
) -> None:  # fmt: skip
    """Evaluate ``groups`` against the Prometheus at ``url`` every ``step`` seconds from
    ``start`` to ``end`` and add their records to the TSDB ``data`` as blocks (the Prometheus
    serving ``data`` must be restarted to see them)."""
    doc = {
        "groups": [
            {"name": n, "interval": f"{step:g}s",
             "rules": [{"record": r, "expr": e} for r, e in rules]}
            for n, rules in groups
        ]
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="gpuwarden-records-") as d:
        rules = Path(d) / "rules.yml"
        rules.write_text(yaml.safe_dump(doc, sort_keys=False, width=100000))
        out = Path(d) / "blocks"
        argv = [promtool, "tsdb", "create-blocks-from", "rules", f"--url={url}",
                f"--start={int(start)}", f"--end={int(end)}", f"--eval-interval={step:g}s",
                f"--output-dir={out}", "--quiet", str(rules)]  # fmt: skip
        r = subprocess.run(argv, capture_output=True, timeout=3600, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"promtool create-blocks-from rules: {r.stderr.decode()[-600:]}")
        for b in out.iterdir() if out.exists() else ():
            if (b / "meta.json").exists():
                shutil.copytree(b, data / b.name)
