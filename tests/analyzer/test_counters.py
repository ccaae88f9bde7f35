"""Counter semantics: a missing first sample or a series that starts after a gap is a
baseline, never an XID event; births while the node is scraped, resets and gaps are read as
Prometheus would; a gap is never read as a healthy PCIe link."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.detectors.pcie import PcieDetector
from analyzer.sources.build import RawSeries, build_window
from analyzer.sources.counters import counter_increases
from exporter import catalog as c

from .synth import healthy, keys, window

T = 10
GRID = 1000.0 + 15.0 * np.arange(T)
NAN = float("nan")


def _series(name, labels, row):
    row = np.asarray(row, dtype=float)
    ok = np.flatnonzero(~np.isnan(row))
    return RawSeries(name, labels, ok, row[ok])


def _xids(xid_row, up_row):
    up = _series(c.GPU_UP.name, {"node": "n0", "gpu": "3"}, up_row)
    xid = _series(c.GPU_XID_ERRORS.name, {"node": "n0", "gpu": "3", "xid": "79"}, xid_row)
    w = build_window([up, xid], GRID, 15.0)
    return [(e.t, e.count) for e in w.xids]


def test_an_xid_counter_whose_first_grid_point_is_missing_yields_no_event():
    # a repaired GPU with 5 old XIDs; the window's first scrape was missed
    assert _xids([NAN] + [5.0] * 9, [NAN] + [1.0] * 9) == []


def test_an_xid_counter_first_seen_after_a_node_gap_counts_when_the_node_was_scraped_without_it():
    # scraped without the series at 0 and 1: it did not exist; born during the gap (a node
    # that went down with XIDs), its value counts
    up = [1, 1, NAN, NAN, NAN, 1, 1, 1, 1, 1]
    assert _xids([NAN] * 5 + [7.0] * 5, up) == [(GRID[5], 7)]


def test_an_xid_counter_born_just_after_a_missed_scrape_still_counts():
    # the scrape before the first XID was missed (1 % of scrapes at a large site): the series
    # was absent at every earlier scrape, so it was born, not found (the evaluation through
    # Prometheus lost an XID 119 this way)
    up = [1, 1, 1, 1, 1, NAN, 1, 1, 1, 1]
    assert _xids([NAN] * 6 + [1.0] * 4, up) == [(GRID[6], 1)]


def test_an_xid_counter_on_a_node_never_scraped_before_it_in_the_window_is_a_baseline():
    up = [NAN, NAN, NAN, 1, 1, 1, 1, 1, 1, 1]
    assert _xids([NAN] * 3 + [4.0] * 7, up) == []


def test_an_xid_counter_born_while_its_node_was_scraped_counts_its_first_value():
    assert _xids([NAN] * 6 + [1.0] * 4, [1.0] * T) == [(GRID[6], 1)]


def test_a_counter_reset_counts_the_new_value_and_a_gap_is_bridged():
    row = [2, 2, NAN, 2, 3, 0, 1, 1, NAN, 1]
    assert _xids(row, [1.0] * T) == [(GRID[4], 1), (GRID[6], 1)]


def test_an_anchor_from_before_the_window_makes_the_first_sample_an_increase():
    inc = counter_increases(np.array([NAN, 6.0, 6.0]), anchor=5.0)
    assert np.isnan(inc[0]) and inc[1] == 1.0 and inc[2] == 0.0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=2, max_size=30),
    st.lists(st.booleans(), min_size=30, max_size=30),
    st.integers(0, 20),
)
def test_counter_increases_sum_to_the_true_increase_whatever_the_gaps(steps, seen, start):
    """A counter that only grows: the increases read from its sampled values sum to
    last_seen - anchor, for any pattern of missed samples."""
    true = start + np.cumsum(steps)
    row = np.where(np.array(seen[: len(true)]), true, np.nan)
    got = counter_increases(row, anchor=float(start))
    seen_vals = row[~np.isnan(row)]
    want = (seen_vals[-1] - start) if len(seen_vals) else 0.0
    assert np.nansum(got) == want


def test_a_gap_is_never_read_as_a_healthy_pcie_link():
    d = healthy(nodes=2, T=12)
    width = d["metrics"][c.GPU_PCIE_WIDTH.name]
    width[:, 1, 4] = 8.0
    width[-2:, 1, 4] = np.nan  # the last two scrapes missed: still downgraded as far as we know
    assert ("node-01", "gpu=4", "pcie_downgrade") in keys(PcieDetector().detect(window(d)))


def test_a_pcie_link_seen_healthy_after_a_gap_is_healthy():
    d = healthy(nodes=2, T=12)
    width = d["metrics"][c.GPU_PCIE_WIDTH.name]
    width[:-4, 1, 4] = 8.0
    width[-4:-2, 1, 4] = np.nan
    assert PcieDetector().detect(window(d)) == []
