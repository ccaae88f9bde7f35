"""AMD's Device Metrics Exporter dialect (analyzer.sources.dialects.amd) without a server: names
from DME's vendored field enum, discovery behind any prefix, identity, the AFID gauge's
semantics, and the AMD detectors on windows built by hand (the real-Prometheus path:
test_amd_prometheus.py)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from analyzer.afidcat import load_catalog
from analyzer.detectors.afid import AfidDetector
from analyzer.detectors.ras import RasDetector
from analyzer.detectors.xgmi import XgmiDetector
from analyzer.findings import Finding
from analyzer.sources.dialects import AMD, DCGM, amd, coverage, discover
from analyzer.window import RAS_BLOCKS, RAS_ERROR_TYPES, AfidEvent, Window
from exporter import catalog as c
from exporter import catalog_amd as dme

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "amd-dme"
ENUM = {line.split("\t")[1].strip() for line in (FIXTURES / "gpu-metric-fields.tsv").open()}
LABELS = set((FIXTURES / "labels.txt").read_text().split())
SCRAPE = (FIXTURES / "scrape-mi300x-prefixed.txt").read_text().splitlines()
_LINE = re.compile(r"^(\w+)\{(.*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _scrape() -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in SCRAPE:
        m = _LINE.match(line)
        if m:
            out.append((m.group(1), dict(_LABEL.findall(m.group(2))), float(m.group(3))))
    return out


def test_every_field_the_reader_reads_is_a_field_of_dmes_enum_lower_cased():
    assert {f.upper() for f in dme.read_fields()} <= ENUM
    assert len(ENUM) == 194


def test_every_identity_label_the_reader_uses_is_one_dme_names():
    used = {dme.HOSTNAME, dme.SERIAL, dme.GPU_ID, dme.GPU_UUID, dme.MODEL, dme.JOB_ID, dme.POD,
            dme.NAMESPACE}  # fmt: skip
    assert used <= LABELS


@pytest.mark.parametrize(
    ("name", "split"),
    [
        ("amd_gpu_health", ("amd_", "gpu_health")),
        ("gpu_health", ("", "gpu_health")),
        ("site_amd_gpu_ecc_uncorrect_umc", ("site_amd_", "gpu_ecc_uncorrect_umc")),
        ("amd_pcie_max_speed", ("amd_", "pcie_max_speed")),  # not pcie_speed behind "amd_max_"?
        (c.PREFIX + "gpu_health", None),
        (c.DCGM_PRESENCE_FIELDS[0], None),
        ("amdgpu_health", None),  # no separator before the field
    ],
)
def test_a_dme_name_splits_into_its_prefix_and_field(name, split):
    assert amd.split(name) == split


def test_discovery_asks_for_every_field_behind_any_prefix_and_finds_the_scrapes_names():
    rx = re.compile(amd.discovery_regex())
    names = {name for name, _, _ in _scrape()}
    assert all(rx.fullmatch(n) for n in names)
    assert not rx.fullmatch(c.GPU_UP.name) and not rx.fullmatch("node_load1")
    found = discover.parse(names)
    assert found.dialects == (AMD,) and found.names == names
    assert amd.discovery_regex() in discover.discovery_expr()


def test_only_the_fields_present_are_read_each_under_its_own_prefix():
    found = discover.parse({"amd_gpu_health", "amd_gpu_gfx_activity", "gpu_gfx_activity",
                            "amd_gpu_ecc_uncorrect_umc"})  # fmt: skip
    qs = discover.query_set(found)
    util = [q for q in qs if q.dialect == AMD and q.metric is c.GPU_UTILIZATION]
    assert len(util) == 1 and util[0].source == "amd_gpu_gfx_activity or gpu_gfx_activity"
    assert util[0].divide == 100.0
    ras = [q for q in qs if q.dialect == AMD and q.metric is c.GPU_RAS_ERRORS]
    assert [(q.source, q.moved_only) for q in ras] == [("amd_gpu_ecc_uncorrect_umc", True)]
    assert not [q for q in qs if q.dialect == AMD and q.metric is c.GPU_XGMI_TRANSMIT]


def test_a_dme_fleet_beside_dcgm_keeps_each_readers_names_when_one_is_dropped():
    found = discover.parse({"amd_gpu_health", c.DCGM_PRESENCE_FIELDS[0], c.DCGM_LAST_XID.name})
    assert found.dialects == (DCGM, AMD)
    assert discover.without(found, DCGM).names == frozenset({"amd_gpu_health"})
    assert discover.without(found, AMD).dialects == (DCGM,)


def test_the_scrapes_series_relabel_to_hostname_and_gpu_id_in_the_catalogues_units():
    found = discover.parse({n for n, _, _ in _scrape()})
    qs = [q for q in discover.query_set(found) if q.dialect == AMD]
    got = {}
    for name, labels, v in _scrape():
        for q in qs:
            if q.relabel is not None and re.search(rf"\b{name}\b", q.source):
                lab = q.relabel(dict(labels))
                got.setdefault((q.metric.name, lab["gpu"]), []).append((v / q.divide, lab))
    (temp, lab), *_ = got[(c.GPU_TEMPERATURE.name, "1")]
    assert temp == 61.0 and lab["node"] == "mi300x-07"
    assert got[(c.GPU_UTILIZATION.name, "0")][0][0] == pytest.approx(0.93)
    clocks = [v for v, _ in got[(c.GPU_SM_CLOCK.name, "1")]]
    assert pytest.approx(1.42e9) in clocks  # the system clock, MHz -> Hz
    xgmi = [(lab["link"], v) for v, lab in got[(c.GPU_XGMI_TRANSMIT.name, "0")]]
    assert ("0", 0.0) in xgmi and dict(xgmi)["1"] == pytest.approx((3.64e9 + 1e7) * 1024)
    ras = [lab for v, lab in got[(c.GPU_RAS_ERRORS.name, "1")] if v > 0]
    assert {(x["block"], x["error_type"]) for x in ras} == {("umc", "uncorrectable"),
                                                             ("umc", "deferred")}  # fmt: skip
    (afid, lab), *_ = got[(c.GPU_RAS_EVENTS.name, "1")]
    assert afid == 22.0 and (lab["afid"], lab["severity"]) == ("0", "non_fatal_uncorrected")


def test_the_system_clock_is_read_as_dme_labels_it_before_and_after_1_5_0():
    (q,) = [q for q in amd.queries() if q.metric is c.GPU_SM_CLOCK]
    assert q.source == 'gpu_clock{clock_type=~"system|GPU_CLOCK_TYPE_SYSTEM"}'
    assert q.divide == 1e-6  # MHz -> Hz


def test_violation_residency_names_the_cap_apart_from_thermal_and_prefers_the_percentage():
    src = amd.violation_source(frozenset({"amd_gpu_violation_ppt_residency_percentage",
                                          "amd_gpu_violation_ppt_residency_accumulated",
                                          "amd_gpu_violation_hbm_thermal_residency_accumulated"}))  # fmt: skip
    assert '"reason", "sw_power_cap"' in src and '"reason", "sw_thermal_slowdown"' in src
    assert "increase(amd_gpu_violation_ppt" not in src  # the share says more than the counter
    assert "increase(amd_gpu_violation_hbm_thermal_residency_accumulated[90s])" in src
    assert dme.VIOLATIONS["ppt"] == "sw_power_cap"


def _afids(rows: list[list[float]], severity: list[str], anchor: list[float] | None = None,
           born: bool = False) -> list[tuple[float, int, str]]:  # fmt: skip
    vals = np.array(rows, dtype=float)
    T = vals.shape[1]
    present = np.ones((T, 1), dtype=bool) if born else np.zeros((T, 1), dtype=bool)
    got = amd.last_afid_events(vals, np.array(anchor or [np.nan] * len(rows)),
                               np.zeros(len(rows), int), np.zeros(len(rows), int),
                               np.array(severity), np.arange(T, dtype=float) * 15, present)  # fmt: skip
    assert all(e.last_only for e in got)
    return [(e.t, e.afid, e.severity) for e in got]


N = np.nan


def test_a_new_afid_list_is_one_event_each_afid_and_a_held_list_is_not_repeated():
    rows = [[N, N, 30, 30, 30], [N, N, 25, 25, 25]]
    got = _afids(rows, ["fatal", "fatal"], born=True)
    assert got == [(30.0, 30, "fatal"), (30.0, 25, "fatal")]  # in afid_index order


def test_a_repeat_of_the_same_list_is_invisible_and_a_different_one_is_an_event():
    rows = [[20, 20, 20, 22, 22]]
    assert _afids(rows, ["fatal"], anchor=[20.0]) == [(45.0, 22, "fatal")]


def test_a_list_already_there_when_nothing_is_known_before_is_a_baseline():
    assert _afids([[27, 27, 27]], ["fatal"]) == []


def _window(**arrays: np.ndarray) -> Window:
    T = next(iter(arrays.values())).shape[0]
    return Window(t=np.arange(T, dtype=float) * 15, nodes=("mi300x-a",),
                  metrics={getattr(c, k).name: v for k, v in arrays.items()},
                  dialect_of={0: AMD})  # fmt: skip


def _xgmi(flat: tuple[int, int] | None = None, idle: bool = False) -> np.ndarray:
    T, G, L = 20, 8, 8
    a = np.zeros((T, 1, G, L))
    for g in range(G):
        for k in range(L):
            if k == g:
                continue  # the GPU's own index: 0 throughout
            rate = 0.0 if idle else 1e9
            a[:, 0, g, k] = 1e12 + rate * np.arange(T)
            if flat == (g, k):  # flat for longer than the detector's span (180 s)
                a[5:, 0, g, k] = a[4, 0, g, k]
    return a


def test_an_xgmi_link_gone_flat_while_its_siblings_rise_is_lost():
    w = _window(GPU_XGMI_TRANSMIT=_xgmi((5, 2)), GPU_XGMI_RECEIVE=_xgmi((5, 2)))
    (f,) = XgmiDetector().detect(w)
    assert (f.subject, f.kind, f.action) == ("link=gpu5/2", "xgmi_link_lost", "drain")
    assert f.evidence["sibling_links_rising"] == 6.0


def test_the_gpus_own_index_and_an_idle_gpu_are_not_lost_links():
    assert XgmiDetector().detect(_window(GPU_XGMI_TRANSMIT=_xgmi())) == []
    assert XgmiDetector().detect(_window(GPU_XGMI_TRANSMIT=_xgmi(idle=True))) == []


def test_a_link_flat_in_one_direction_but_moving_in_the_other_is_not_lost():
    w = _window(GPU_XGMI_TRANSMIT=_xgmi((5, 2)), GPU_XGMI_RECEIVE=_xgmi())
    assert XgmiDetector().detect(w) == []


def _ras(block: str, error_type: str, rise_at: int, by: float) -> np.ndarray:
    a = np.zeros((20, 1, 8, len(RAS_BLOCKS), len(RAS_ERROR_TYPES)))
    a[rise_at:, 0, 3, RAS_BLOCKS.index(block), RAS_ERROR_TYPES.index(error_type)] = by
    return a


def test_xgmi_wafl_errors_on_the_gpu_corroborate_a_lost_link():
    w = _window(GPU_XGMI_TRANSMIT=_xgmi((3, 1)), GPU_RAS_ERRORS=_ras("xgmi_wafl", "uncorrectable",
                                                                     12, 4))  # fmt: skip
    (f,) = XgmiDetector().detect(w)
    assert f.evidence["xgmi_wafl_errors"] == 4.0 and f.confidence > 0.9


def test_deferred_errors_are_named_by_block_and_cordon_the_gpu():
    (f,) = RasDetector().detect(_window(GPU_RAS_ERRORS=_ras("umc", "deferred", 8, 3)))
    assert (f.subject, f.kind, f.action) == ("gpu=3", "ras_deferred", "cordon")
    assert "umc (HBM)" in f.summary and f.evidence["deferred"] == 3.0


def test_an_uncorrectable_error_alone_is_the_memory_detectors_not_a_deferred_finding():
    assert RasDetector().detect(_window(GPU_RAS_ERRORS=_ras("umc", "uncorrectable", 8, 1))) == []


def _afid_window(*events: AfidEvent) -> Window:
    return Window(t=np.arange(5, dtype=float) * 15, nodes=("mi300x-a",), metrics={},
                  afids=events, dialect_of={0: AMD})  # fmt: skip


def test_a_fatal_afid_drains_and_says_dmes_gauge_keeps_the_last_event_only():
    det = AfidDetector(load_catalog())
    (f,) = det.detect(_afid_window(AfidEvent(30.0, 0, 2, 27, "fatal", last_only=True)))
    assert (f.kind, f.severity, f.action) == ("afid_fatal", "critical", "drain")
    assert f.evidence["last_event_only"] == 1.0 and "AMDGPUWatchdogTimeoutWdt" in f.summary


def test_a_counted_afid_says_nothing_was_lost_and_a_corrected_one_is_not_reported():
    det = AfidDetector(load_catalog())
    got = det.detect(_afid_window(AfidEvent(30.0, 0, 2, 22, "non_fatal_uncorrected"),
                                  AfidEvent(30.0, 0, 4, 24, "non_fatal_corrected")))  # fmt: skip
    assert [(f.subject, f.kind, f.action) for f in got] == [("gpu=2", "afid_event", "cordon")]
    assert "last_event_only" not in got[0].evidence


def test_an_afid_event_is_judged_once_and_held_until_its_hold_ends():
    det = AfidDetector(load_catalog(), hold=60.0)
    e = AfidEvent(30.0, 0, 2, 20, "fatal")
    assert len(det.detect(_afid_window(e))) == 1
    later = Window(t=np.arange(5, dtype=float) * 15 + 120, nodes=("mi300x-a",), metrics={},
                   afids=(e,))  # fmt: skip
    assert det.detect(later) == []


def test_an_uncorrectable_ecc_finding_on_an_amd_gpu_names_the_block():
    w = _window(GPU_RAS_ERRORS=_ras("umc", "uncorrectable", 8, 1))
    f = Finding("mi300x-a", "gpu=3", "ecc_uncorrectable", "critical", "drain", "memory", 1.0, 0.0,
                {}, "uncorrectable ECC errors")  # fmt: skip
    (out,) = coverage.annotate([f], w)
    assert out.summary == "uncorrectable ECC errors [in umc (HBM)]"


def test_coverage_tells_an_amd_group_how_to_enable_afids_and_why_it_has_no_power_limit():
    w = _window(GPU_UP=np.ones((5, 1, 8)))
    rep = coverage.report(w)
    (group,) = rep["groups"]
    det = {d["detector"]: d for d in group["detectors"]}
    assert "AMD_METRICS_EXPORTER_ENABLE_CPER" not in str(det["afid"])  # AMD nodes read afids
    assert det["afid"]["state"] == "full"
    power = [x for x in det["peer"]["cannot"] if x["input"].startswith("power limit")]
    assert power and "PPT violation residency" in power[0]["enable"]
    assert "GPU_ECC_UNCORRECT_TOTAL" in str(det["memory"]["cannot"])


def _fields_up_to(tag: str) -> set[str]:
    order = ("v1.1.0", "v1.2.0", "v1.4.0", "v1.5.0", "v1.5.1")
    rows = [line.split("\t") for line in (FIXTURES / "read-fields-by-version.tsv").open()
            if not line.startswith("#")]  # fmt: skip
    return {f for f, first in rows if order.index(first.strip()) <= order.index(tag)}


def test_every_field_the_reader_reads_is_served_by_some_dme_release():
    assert _fields_up_to("v1.5.1") == set(dme.read_fields())


@pytest.mark.parametrize("tag", ["v1.1.0", "v1.4.0", "v1.5.0", "v1.5.1"])
def test_each_dme_release_is_found_and_read_in_exactly_the_fields_it_serves(tag):
    names = {"amd_" + f for f in _fields_up_to(tag)}
    found = discover.parse(names)
    assert found.dialects == (AMD,)
    qs = [q for q in discover.query_set(found) if q.dialect.startswith(AMD)]
    read = {n for q in qs for n in re.findall(r"\bamd_\w+", q.source)}
    # the AFID gauge is the one field read before it is served: DME serves it from a GPU's first
    # RAS event on, so its absence cannot tell a release without it from a healthy fleet
    assert read - names <= {"amd_" + dme.AFID_ERRORS}
    metrics = {q.metric.name for q in qs}
    afid_served = [q for q in qs if q.metric is c.GPU_RAS_EVENTS and q.source in names]
    assert bool(afid_served) is (tag >= "v1.5.0")  # GPU_AFID_ERRORS: 1.5.0
    assert c.GPU_RAS_EVENTS.name in metrics  # read before it is served (above)
    assert (c.GPU_XGMI_TRANSMIT.name in metrics) is (tag >= "v1.4.0")
    deferred = [q for q in qs if q.metric is c.GPU_RAS_ERRORS and "deferred" in q.source]
    assert bool(deferred) is (tag == "v1.5.1")


def test_a_config_files_afid_overrides_reach_the_afid_detector_and_a_bad_key_stops_the_start(
    tmp_path,
):
    from analyzer.detectors import default_detectors
    from analyzer.settings import AnalyzerSettings
    from common.settings import SettingsError, load

    cfg = tmp_path / "a.yaml"
    cfg.write_text("prometheus: http://p:9090\nafid_overrides: {22: {action: drain}}\n")
    s = load(AnalyzerSettings, {}, env={}, config_file=cfg)
    (det,) = [d for d in default_detectors(s.detector_config()) if d.name == "afid"]
    assert isinstance(det, AfidDetector) and det.catalog.get(22).action == "drain"
    with pytest.raises(SettingsError, match="afid_overrides"):
        AnalyzerSettings(prometheus="http://p:9090", afid_overrides={"hbm": {}})


def test_a_dme_series_job_is_slurms_job_id_or_its_pod_without_the_rank():
    qs = [q for q in amd.queries() if q.metric is c.GPU_ALLOCATION_INFO]
    assert {q.by[-1] for q in qs} == {dme.JOB_ID, dme.NAMESPACE}
    labels = {"hostname": "mi300x-07", "gpu_id": "3", "job_id": "4711", "pod": "llama-worker-3",
              "namespace": "ml"}  # fmt: skip
    got = {q.dialect: q.relabel(dict(labels))["job_id"] for q in qs if q.relabel is not None}
    assert got == {AMD: "4711", AMD + "/pod": "ml/llama"}


def test_recorded_dme_series_carry_dmes_label_names_and_relabel_to_hostname_and_gpu_id():
    lines = [x for x in (FIXTURES / "recorded-lines.txt").read_text().splitlines()
             if x and not x.startswith("#")]  # fmt: skip
    gpu_line, prefixed = (_LINE.match(x) for x in lines)
    assert gpu_line is not None and prefixed is not None
    labels = dict(_LABEL.findall(gpu_line.group(2)))
    assert set(labels) <= LABELS  # DME's label enum, lower-cased
    assert amd.AmdRelabel()(labels) == {"node": "18ab41be1b15", "gpu": "0"}
    assert labels[dme.JOB_ID] == labels[dme.POD] == ""  # what the job queries' != "" skip
    assert prefixed.group(1).startswith("amd_")  # the GPU Operator's DME: prefix amd_
