"""XID interpretation: application XIDs alone never drain; fatal ones report their action."""

from analyzer.detectors.xid import XidDetector
from analyzer.window import XidEvent
from analyzer.xidcat import load_catalog, parse_duration

from .synth import healthy, keys, window


def run(events, jobs=None, overrides=None, t0=10_000.0):
    det = XidDetector(load_catalog(overrides=overrides))
    d = healthy(nodes=2, T=5, t0=t0)
    return det, det.detect(window(d, tuple(events), jobs=jobs))


def test_a_single_application_xid_is_no_finding():
    for xid in (13, 31, 43):
        _, out = run([XidEvent(10_050.0, 0, 3, xid)])
        assert out == []


def test_fatal_xid_is_reported_with_the_catalogue_action():
    _, out = run([XidEvent(10_050.0, 1, 2, 79)])
    assert keys(out) == {("node-01", "gpu=2", "xid_fatal")}
    assert out[0].action == "drain" and out[0].severity == "critical"
    assert out[0].evidence["xid"] == 79


def test_burst_of_identical_xids_is_one_incident():
    _, out = run([XidEvent(10_050.0 + i, 0, 1, 48) for i in range(4)])
    assert len(out) == 1 and out[0].evidence["events"] == 4


def test_chain_48_then_63_is_one_incident_led_by_the_double_bit_error():
    _, out = run([XidEvent(10_050.0, 0, 1, 48), XidEvent(10_050.01, 0, 1, 63)])
    assert len(out) == 1 and out[0].evidence["xid"] == 48 and out[0].evidence["xids"] == 2


def test_repeated_application_xids_across_jobs_escalate_to_hardware():
    det = XidDetector(load_catalog())
    out = []
    for i, job in enumerate(("a", "b", "c")):
        d = healthy(nodes=2, T=5, t0=10_000.0 + 600 * i)
        ev = (XidEvent(10_050.0 + 600 * i, 0, 5, 13),)
        out = det.detect(window(d, ev, jobs={job: (0, 1)}))
    assert ("node-00", "gpu=5", "xid_repeated_application") in keys(out)


def test_repeated_application_xids_in_one_job_stay_quiet():
    det = XidDetector(load_catalog())
    out = []
    for i in range(3):
        d = healthy(nodes=2, T=5, t0=10_000.0 + 600 * i)
        out = det.detect(window(d, (XidEvent(10_050.0 + 600 * i, 0, 5, 13),), jobs={"a": (0, 1)}))
    assert out == []


def test_same_fatal_xid_after_reboots_escalates_to_inspect_replace():
    det = XidDetector(load_catalog())
    out = []
    for i in range(3):
        t = 10_000.0 + 3600 * i
        d = healthy(nodes=2, T=5, t0=t)
        out = det.detect(window(d, (XidEvent(t + 10, 0, 0, 119),)))
        d2 = healthy(nodes=2, T=5, t0=t + 100)
        out = det.detect(window(d2))
    recurring = [f for f in out if f.kind == "xid_recurring"]
    assert recurring and recurring[0].evidence["incidents"] == 3


def test_site_override_changes_an_xid_action():
    _, out = run(
        [XidEvent(10_050.0, 0, 0, 63)], overrides={63: {"action": "drain", "severity": "critical"}}
    )
    assert out and out[0].action == "drain"


def test_events_already_seen_in_an_earlier_window_are_not_counted_twice():
    det = XidDetector(load_catalog())
    d = healthy(nodes=1, T=5)
    ev = (XidEvent(10_050.0, 0, 0, 48),)
    det.detect(window(d, ev))
    out = det.detect(window(d, ev))
    assert out[0].evidence["events"] == 1


def test_durations_parse():
    assert parse_duration("1h") == 3600 and parse_duration("5s") == 5 and parse_duration(30) == 30
