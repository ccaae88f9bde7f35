"""``gpuwarden evaluate --via prometheus``: the evaluation through a real Prometheus.

One simulation per seed feeds both paths: the direct one (frames into the analyzer's
:class:`~analyzer.sources.frames.FrameBuffer`, as ``gpuwarden evaluate`` always does) and a
:class:`~gpuwarden.lab.openmetrics.ScrapeRecorder` that writes what Prometheus would have
scraped at the same interval (missed scrapes and down nodes absent). ``promtool tsdb
create-blocks-from openmetrics`` backfills a TSDB from it, a real Prometheus serves it, and the
analyzer reads it with its real :class:`~analyzer.sources.prometheus.PrometheusSource`
(incremental reads, moved-only counters, anchors) at the same cycle times; both finding streams
are scored against the same truth.

Staleness: a live Prometheus writes a staleness marker into every series of a target whose
scrape failed, and into a series that disappears, so a query at that step returns nothing.
Backfilled blocks cannot carry markers (OpenMetrics has no stale value), so this Prometheus runs
with ``--query.lookback-delta`` of half the scrape interval: at every grid point a series
answers only with the sample scraped at that point, which is what the markers give a live
server. Simulated time is placed at ``epoch`` (whole 2-hour blocks in the past).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from analyzer.detectors import default_detectors
from analyzer.engine import Engine
from analyzer.sources.prometheus import PrometheusSource
from exporter import catalog as c
from exporter import catalog_amd
from gpuwarden.lab.dcgm_openmetrics import DcgmScrapeRecorder
from gpuwarden.lab.dme_openmetrics import DmeScrapeRecorder
from gpuwarden.lab.evaluation_metrics import Episode, EpisodeTracker, Truth, score
from gpuwarden.lab.openmetrics import ScrapeRecorder
from gpuwarden.processes import Supervisor, free_port
from simulator.model import SKUS
from simulator.telemetry import AMD_DME, DCGM, DCGM_DEFAULTS, dcgm_fields
from simulator.topology import gpu_uuid

BLOCK = 7200.0
MIXED_AMD = "mixed-amd"  # two racks of H100 beside two of MI300X (evaluate.mixed_amd_fleet)


# dcgm-exporter: the commonly enabled fields; :defaults: default-counters.csv's alone;
# +clock-events: commonly enabled plus the one commented-out CSV line the throttling detector
# needs; +reasons: commonly enabled plus DCGM's clock-event reasons bitmask (its legacy name
# DCGM_FI_DEV_CLOCK_THROTTLE_REASONS) and the power/thermal violation counters
REASONS = "dcgm-exporter+reasons"
BITMASK = c.DCGM_CLOCK_THROTTLE_REASONS.name
TELEMETRIES = ("gpuwarden", DCGM, DCGM_DEFAULTS, "dcgm-exporter+clock-events", REASONS, AMD_DME)


class Recorder:
    """The ``tap`` of :func:`gpuwarden.lab.evaluate.run_seed`: keeps the fleet (for its truth)
    and records every frame as scraped, in gpuwarden's telemetry (``om``) and, when asked, as
    a dcgm-exporter + node_exporter fleet would have served it (``dcgm``)."""

    def __init__(self, epoch: float, workdir: Path, dcgm: bool = False,
                 clock_events: bool = False, fields: frozenset[str] | None = None,
                 reasons: bool = False, dme: bool = False, dme_prefix: str = "") -> None:  # fmt: skip
        self.epoch, self.workdir, self.want_dcgm = epoch, workdir, dcgm
        self.clock_events, self.fields, self.reasons = clock_events, fields, reasons
        self.want_dme, self.dme_prefix = dme, dme_prefix
        self.om: ScrapeRecorder | None = None
        self.dcgm: DcgmScrapeRecorder | None = None
        # ``dme``: NVIDIA nodes (and every NIC) native, the AMD nodes' GPUs as DME serves them
        self.dme_native: ScrapeRecorder | None = None
        self.dme: DmeScrapeRecorder | None = None
        self.fleet: Any = None

    def __call__(self, fleet: Any, frame: Any, jobs: Any, missed: np.ndarray) -> None:
        if self.om is None:
            self.fleet = fleet
            names = [SKUS[k].name for k in fleet.sku_of]
            self.om = ScrapeRecorder(fleet.nodes, gpu_uuid, names, self.epoch, self.workdir)
            if self.want_dcgm:
                self.dcgm = DcgmScrapeRecorder(fleet.nodes, gpu_uuid, names, self.epoch,
                                               self.workdir, clock_events=self.clock_events,
                                               fields=self.fields,
                                               clock_reasons=BITMASK if self.reasons else "",
                                               violations=self.reasons)  # fmt: skip
            if self.want_dme:
                amd = fleet.amd
                self.dme_native = ScrapeRecorder(fleet.nodes, gpu_uuid, names, self.epoch,
                                                 self.workdir, native_gpus=~amd)  # fmt: skip
                self.dme = DmeScrapeRecorder(fleet.nodes, amd, self.epoch, self.workdir,
                                             self.dme_prefix, catalog_amd.read_fields())  # fmt: skip
        self.om.push(frame, jobs, missed)
        if self.dcgm is not None:
            self.dcgm.push(frame, jobs, missed)
        if self.dme is not None and self.dme_native is not None:
            self.dme_native.push(frame, jobs, missed)
            self.dme.push(frame, jobs, missed)

    def write_dme(self, path: Path) -> Path:
        """The DME path's OpenMetrics: the native part and DME's (disjoint families)."""
        assert self.dme is not None and self.dme_native is not None
        self.dme_native.write(path)
        with path.open("r+b") as f:  # drop the native part's "# EOF": DME's families follow
            f.truncate(path.stat().st_size - len(b"# EOF\n"))
        self.dme.write(path)
        return path


def epoch_for(horizon: float) -> float:
    """Virtual time 0 as a Unix time: whole blocks before now, the run ending a block early."""
    return (time.time() // BLOCK - math.ceil(horizon / BLOCK) - 2) * BLOCK


def backfill(om: Path, tsdb: Path) -> float:
    """``promtool tsdb create-blocks-from openmetrics``; returns seconds taken."""
    promtool = shutil.which("promtool")
    if promtool is None:
        raise RuntimeError("promtool not installed (Debian package prometheus; make system-deps)")
    t0 = time.perf_counter()
    argv = [promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(tsdb)]
    r = subprocess.run(argv, capture_output=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"promtool backfill failed: {r.stderr.decode()[-600:]}")
    return time.perf_counter() - t0


@contextlib.contextmanager
def prometheus(tsdb: Path, step: float, workdir: Path) -> Iterator[str]:
    """A real Prometheus serving ``tsdb`` (no scrapes), staleness as described above."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise RuntimeError("prometheus not installed (Debian package; make system-deps)")
    (workdir / "prometheus.yml").write_text(f"global: {{scrape_interval: {step:g}s}}\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    sup = Supervisor(workdir)
    try:
        sup.start("prometheus", [
            binary, f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={tsdb}", f"--web.listen-address=127.0.0.1:{port}",
            f"--query.lookback-delta={int(step * 500)}ms", "--storage.tsdb.retention.time=100y",
            "--log.level=warn",
        ], ready_url=f"{url}/-/ready", timeout=60)  # fmt: skip
        yield url
    finally:
        sup.stop_all()


async def _cycles(url: str, fleet: Any, epoch: float, times: Sequence[float], step: float,
                  gap: float) -> tuple[list[Episode], int]:  # fmt: skip
    leaf = {n: fleet.leaf_of[i] for i, n in enumerate(fleet.nodes)}
    src = PrometheusSource(url, window=600.0, step=step, leaf_of=leaf, timeout=60.0,
                           discover=True)  # fmt: skip
    engine = Engine(default_detectors())
    tracker = EpisodeTracker(gap=gap)
    degraded = 0
    try:
        for t in times:
            w = await src.read(epoch + t + src.settle)
            degraded += bool(w.missing)
            found = engine.cycle(w)
            tracker.observe(t, found)
    finally:
        await src.close()
    return tracker.episodes(), degraded


def run_seed_via_prometheus(seed: int, nodes: int, horizon: float, step: float = 15.0,
                            cycle: float = 30.0, per_kind: int = 2, controls: int = 2,
                            missed_scrapes: float = 0.01, telemetry: str = "gpuwarden",
                            fleet: str = "", dme_prefix: str = "") -> dict[str, Any]:  # fmt: skip
    """One seed through both paths: the direct run's results and the Prometheus run's, each
    with per-class figures (:func:`per_class`). ``telemetry="dcgm-exporter"``: a third path,
    the same fleet scraped as dcgm-exporter + node_exporter would serve it (``dcgm``), with the
    commonly enabled fields, or (``dcgm-exporter:defaults``) default-counters.csv's alone."""
    from gpuwarden.lab.evaluate import run_seed

    if telemetry not in TELEMETRIES:
        raise ValueError(f"telemetry {telemetry!r} is not one of {TELEMETRIES}")
    if fleet not in ("", MIXED_AMD) or (telemetry == AMD_DME) != (fleet == MIXED_AMD):
        raise ValueError(f"telemetry {AMD_DME} goes with the fleet {MIXED_AMD}, and only it")
    amd = fleet == MIXED_AMD
    epoch = epoch_for(horizon)
    with tempfile.TemporaryDirectory(prefix="gpuwarden-eval-prom-") as tmp:
        work = Path(tmp)
        rec = Recorder(epoch, work, dcgm=telemetry not in ("gpuwarden", AMD_DME),
                       clock_events=telemetry.endswith("+clock-events"),
                       fields=dcgm_fields(telemetry), reasons=telemetry == REASONS,
                       dme=amd, dme_prefix=dme_prefix)  # fmt: skip
        t0 = time.perf_counter()
        direct = run_seed(seed, nodes, horizon, step, cycle, per_kind, controls, compare=False,
                          missed_scrapes=missed_scrapes, tap=rec, amd=amd)  # fmt: skip
        eps_direct = direct.pop("episodes")
        assert rec.om is not None
        sim_s = time.perf_counter() - t0
        times = [cycle * k for k in range(1, int(horizon / cycle + 1e-9) + 1)]
        paths: dict[str, list[Episode]] = {"direct": eps_direct}
        seconds = {"simulate_and_record": sim_s}
        samples, degraded = 0, {}
        for path, om_rec in (("prometheus", rec.om), ("dcgm", rec.dcgm), ("dme", rec.dme)):
            if om_rec is None:
                continue
            if path == "dme":
                om = rec.write_dme(work / "dme.om")
                assert rec.dme_native is not None
                samples += rec.dme_native.samples
                rec.dme_native.close()
            else:
                om = om_rec.write(work / f"{path}.om")
            samples += om_rec.samples
            om_rec.close()
            seconds[f"promtool_backfill_{path}"] = backfill(om, work / f"tsdb-{path}")
            om.unlink()
            t1 = time.perf_counter()
            with prometheus(work / f"tsdb-{path}", step, work) as url:
                paths[path], degraded[path] = asyncio.run(
                    _cycles(url, rec.fleet, epoch, times, step, 2 * cycle)
                )
            seconds[f"cycles_{path}"] = time.perf_counter() - t1
    truth = [Truth.from_json(d, horizon) for d in rec.fleet.truth()]
    node_days = nodes * horizon / 86400.0
    out: dict[str, Any] = {
        "seed": seed, "nodes": nodes, "horizon_s": horizon, "missed_scrapes": missed_scrapes,
        "telemetry": telemetry, "fleet": fleet, "direct": direct["results"]["gpuwarden"],
        "samples": samples, "degraded_cycles": sum(degraded.values()), "cycles": len(times),
        "seconds": seconds,
    }  # fmt: skip
    for path in paths:
        if path == "direct":
            continue
        s = score(paths[path], truth, node_days)
        out[path] = {"summary": s.summary(), "per_kind": s.per_kind(), "faults": s.faults,
                     "false_positives": s.fp_kinds}  # fmt: skip
    out["classes"] = per_class(paths, truth, node_days)
    return out


def per_class(paths: dict[str, list[Episode]], truth: Sequence[Truth],
              node_days: float) -> dict[str, dict[str, dict[str, float]]]:  # fmt: skip
    """Per fault class (injected kind): precision, recall and F1 of each path. A class's
    episodes are those of the finding kinds that ever matched a fault of that class (on either
    path), less those matching a fault of another class; its truth is its faults plus the
    negative controls. The same rule on both paths, so their gap is like for like."""
    hw = [t for t in truth if t.hardware]
    kinds = sorted({t.kind for t in hw})
    finding_kinds: dict[str, set[str]] = {k: set() for k in kinds}
    from gpuwarden.lab.evaluation_metrics import _matches

    for eps in paths.values():
        for ep in eps:
            for t in hw:
                if _matches(ep, t, 180.0):
                    finding_kinds[t.kind].add(ep.kind)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for k in kinds:
        mine = [t for t in truth if t.kind == k or not t.hardware]
        others = [t for t in hw if t.kind != k]
        out[k] = {}
        for name, eps in paths.items():
            sel = [ep for ep in eps if ep.kind in finding_kinds[k]
                   and (any(_matches(ep, t, 180.0) for t in mine if t.hardware)
                        or not any(_matches(ep, t, 180.0) for t in others))]  # fmt: skip
            s = score(sel, mine, node_days).summary()
            out[k][name] = {"precision": s["precision"], "recall": s["recall"], "f1": s["f1"]}
    return out


def _f(x: float) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x:.3f}"


def class_rows(
    runs: Sequence[dict[str, Any]],
) -> list[tuple[str, float, float, float, float, float]]:
    """Per class, over the seeds: mean F1 direct, through Prometheus, their gap, and the two
    recalls."""
    rows = []
    for k in sorted({k for r in runs for k in r["classes"]}):
        cls = [r["classes"][k] for r in runs if k in r["classes"]]

        def m(path: str, key: str, cls: list[Any] = cls) -> float:
            v = [c[path][key] for c in cls if not math.isnan(c[path][key])]
            return float(np.mean(v)) if v else math.nan

        fd, fp = m("direct", "f1"), m("prometheus", "f1")
        gap = float(abs(np.nan_to_num(fd) - np.nan_to_num(fp)))
        rows.append((k, fd, fp, gap, m("direct", "recall"), m("prometheus", "recall")))
    return rows


def worst_gap(runs: Sequence[dict[str, Any]]) -> float:
    return max((r[3] for r in class_rows(runs)), default=0.0)


def table(runs: Sequence[dict[str, Any]]) -> str:
    """The P/R/F1/TTD table of both paths side by side, then the F1 gap per class."""
    lines = ["| path | precision | recall | F1 | TTD median s | TTD p95 s | localisation |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for path in ("direct", "prometheus"):
        summ = [r[path]["summary"] for r in runs]

        def mean(key: str, summ: list[dict[str, Any]] = summ) -> float:
            v = [s[key] for s in summ if s[key] is not None and not math.isnan(s[key])]
            return float(np.mean(v)) if v else math.nan

        label = "direct frames" if path == "direct" else "through Prometheus"
        lines.append(f"| {label} | {_f(mean('precision'))} | {_f(mean('recall'))} | "
                     f"{_f(mean('f1'))} | {_s(mean('ttd_median_s'))} | {_s(mean('ttd_p95_s'))} | "
                     f"{_f(mean('localisation'))} |")  # fmt: skip
    lines += ["", "| fault class | F1 direct | F1 Prometheus | gap | recall direct | "
              "recall Prometheus |", "|---|---|---|---|---|---|"]  # fmt: skip
    rows = class_rows(runs)
    for k, fd, fp, gap, rd, rp in rows:
        lines.append(f"| {k} | {_f(fd)} | {_f(fp)} | {gap:.3f} | {_f(rd)} | {_f(rp)} |")
    deg = sum(r["degraded_cycles"] for r in runs)
    worst = max((r[3] for r in rows), default=0.0)
    lines += ["", f"largest F1 gap per class: {worst:.3f} (target <= 0.01); "
              f"samples backfilled {sum(r['samples'] for r in runs):,}; "
              f"degraded cycles {deg} of {sum(r['cycles'] for r in runs)}; "
              f"missed scrapes {runs[0]['missed_scrapes']:.1%}"]  # fmt: skip
    if all("dcgm" in r for r in runs):
        lines += ["", *telemetry_table(runs)]
    if all("dme" in r for r in runs):
        lines += [
            "",
            *telemetry_table(
                runs,
                "dme",
                ("gpuwarden-exporter on every node", "H100 gpuwarden-exporter, MI300X DME"),
            ),
        ]
    return "\n".join(lines)


def _mean(vals: Sequence[float]) -> float:
    v = [x for x in vals if x is not None and not math.isnan(x)]
    return float(np.mean(v)) if v else math.nan


def telemetry_table(runs: Sequence[dict[str, Any]], other: str = "dcgm",
                    labels: tuple[str, str] = ("gpuwarden-exporter",
                                               "dcgm-exporter + node_exporter"),
                    ) -> list[str]:  # fmt: skip
    """gpuwarden's telemetry vs another's (``other``: dcgm-exporter + node_exporter's, or the
    MI300X nodes on AMD's DME), both through Prometheus: the summary, then recall and F1 per
    fault class."""
    lines = ["| telemetry (through Prometheus) | precision | recall | F1 | TTD median s | "
             "false drains |", "|---|---|---|---|---|---|"]  # fmt: skip
    for path, label in (("prometheus", labels[0]), (other, labels[1])):
        summ = [r[path]["summary"] for r in runs]
        lines.append(f"| {label} | {_f(_mean([x['precision'] for x in summ]))} | "
                     f"{_f(_mean([x['recall'] for x in summ]))} | "
                     f"{_f(_mean([x['f1'] for x in summ]))} | "
                     f"{_s(_mean([x['ttd_median_s'] for x in summ]))} | "
                     f"{sum(int(x['false_drains']) for x in summ)} |")  # fmt: skip
    lines += ["", f"| fault class | recall gpuwarden | recall {other} | F1 gpuwarden | "
              f"F1 {other} | TTD gpuwarden s | TTD {other} s |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
    for k in sorted({k for r in runs for k in r["classes"]}):
        cls = [r["classes"][k] for r in runs if k in r["classes"]]

        def ttd(path: str, k: str = k) -> float:
            return _mean([f["ttd"] for r in runs for f in r[path]["faults"]
                          if f["kind"] == k and f["detected"]])  # fmt: skip

        lines.append(
            f"| {k} | {_f(_mean([c['prometheus']['recall'] for c in cls]))} | "
            f"{_f(_mean([c[other]['recall'] for c in cls]))} | "
            f"{_f(_mean([c['prometheus']['f1'] for c in cls]))} | "
            f"{_f(_mean([c[other]['f1'] for c in cls]))} | {_s(ttd('prometheus'))} | "
            f"{_s(ttd(other))} |"
        )
    return lines


def _s(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.0f}"
