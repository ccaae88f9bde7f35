"""The edges of alert ordering: equal times, unreadable times, Go's zero time and the
boundary of the Unix epoch, more than one resolve seen, and the arrival-order fallback.
Each case is a delivery sequence Alertmanager can produce (retries, clock text in other
spellings), and each pins one comparison of remediation/ordering.py."""

from __future__ import annotations

import math

import pytest

from remediation import ordering

T0 = "2026-11-29T10:00:00Z"
T0_OFFSET = "2026-11-29T12:00:00+02:00"  # the same instant, spelled with an offset
T1 = "2026-11-29T10:05:00Z"
T2 = "2026-11-29T10:10:00Z"
ZERO = "0001-01-01T00:00:00Z"


def test_times_are_read_whatever_their_spelling_and_never_guessed() -> None:
    assert ordering.ts(T0) == ordering.ts(T0_OFFSET) == 1_795_946_400.0
    assert ordering.ts(" 2026-11-29t10:00:00z ") == ordering.ts(T0)  # lower case, padded
    assert ordering.ts("2026-11-29T10:00:00.1234567Z") == ordering.ts("2026-11-29T10:00:00.123456Z")
    assert ordering.ts("2026-11-29T10:00:00.123456Z") != ordering.ts(T0)  # microseconds kept
    assert ordering.ts("2026-11-29T10:00:00.5Z") == ordering.ts(T0) + 0.5
    for bad in (None, "", "tomorrow", "2026-13-01T00:00:00Z", 1_795_946_400):
        assert math.isnan(ordering.ts(bad))  # type: ignore[arg-type]


def test_an_end_is_read_only_after_the_first_day_of_the_epoch() -> None:
    assert math.isnan(ordering.ended(ZERO))  # Go's zero time: a firing's hidden end
    assert math.isnan(ordering.ended("1970-01-01T00:00:00Z"))
    assert math.isnan(ordering.ended("1970-01-02T00:00:00Z"))  # the boundary itself
    assert ordering.ended("1970-01-02T00:00:01Z") == 86_401.0
    assert ordering.ended(T1) == ordering.ts(T1)
    assert math.isnan(ordering.ended(None)) and math.isnan(ordering.ended("garbage"))


def test_only_a_firing_can_be_stale() -> None:
    assert ordering.stale("firing", T0, [T1])
    assert not ordering.stale("resolved", T0, [T1])
    assert not ordering.stale("resolved", T0, [T0])
    assert not ordering.stale("", T0, [(T0, T1)])


def test_a_firing_is_stale_against_a_resolve_of_the_same_or_a_later_instance_only() -> None:
    assert ordering.stale("firing", T0, [T0])  # its own instance (equal startsAt)
    assert ordering.stale("firing", T0, [T0_OFFSET])  # the same instant, other text
    assert ordering.stale("firing", T0, [T1])  # a later instance was resolved already
    assert not ordering.stale("firing", T1, [T0])  # newer than that resolve's instance
    assert not ordering.stale("firing", T1, [(T0, "")])
    assert not ordering.stale("firing", T1, [])


def test_a_resolves_end_makes_stale_only_what_began_strictly_before_it() -> None:
    assert ordering.stale("firing", T1, [(T0, T2)])  # began while that one ran
    assert not ordering.stale("firing", T2, [(T0, T2)])  # began as it ended: new
    assert not ordering.stale("firing", "2026-11-29T10:10:00.000001Z", [(T0, T2)])
    assert ordering.stale("firing", "2026-11-29T10:09:59.999999Z", [(T0, T2)])
    assert not ordering.stale("firing", T1, [(T0, ZERO)])  # no end: by startsAt alone


def test_unreadable_times_are_one_instance_only_by_their_exact_text() -> None:
    assert ordering.stale("firing", "garbage", ["garbage"])
    assert ordering.stale("firing", "garbage", [("garbage", T2)])
    assert not ordering.stale("firing", "garbage", ["other garbage"])
    assert not ordering.stale("firing", "garbage", [T0])  # unreadable is never "older"
    assert not ordering.stale("firing", "garbage", [(T0, T2)])
    assert not ordering.stale("firing", T1, ["garbage"])
    assert not ordering.stale("firing", T1, [("garbage", "garbage")])


def test_every_resolve_seen_is_weighed_not_only_the_first() -> None:
    assert ordering.stale("firing", T1, [(T0, ""), (T0, T2)])
    assert ordering.stale("firing", T1, [T0, T2])
    assert ordering.stale("firing", "garbage", ["x", "y", "garbage"])
    assert not ordering.stale("firing", T2, [T0, T1, (T0, T1)])


def test_the_same_instance_stays_resolved_whatever_arrives_after() -> None:
    assert ordering.firing([("a", T0, "firing")]) == {"a"}
    assert ordering.firing([("a", T0, "resolved")]) == set()
    assert ordering.firing([("a", T0, "firing"), ("a", T0, "resolved")]) == set()
    assert ordering.firing([("a", T0, "resolved", T1), ("a", T0, "firing", "")]) == set()
    assert ordering.firing([("a", T0, "firing"), ("a", T0, "firing")]) == {"a"}


def test_between_instances_the_newer_news_wins_in_either_arrival_order() -> None:
    old_resolve, new_firing = ("a", T0, "resolved", T1), ("a", T2, "firing", "")
    assert ordering.firing([old_resolve, new_firing]) == {"a"}
    assert ordering.firing([new_firing, old_resolve]) == {"a"}
    new_resolve, old_firing = ("a", T1, "resolved", T2), ("a", T0, "firing", "")
    assert ordering.firing([new_resolve, old_firing]) == set()
    assert ordering.firing([old_firing, new_resolve]) == set()
    # two firings of different instances: still firing, whichever came last
    assert ordering.firing([("a", T0, "firing"), ("a", T1, "firing")]) == {"a"}
    assert ordering.firing([("a", T1, "firing"), ("a", T0, "firing")]) == {"a"}


def test_a_resolve_without_a_readable_end_is_news_as_of_its_start() -> None:
    # the resolve of the instance at T1 (end unreadable) after a firing at T0: newer, so ends
    assert ordering.firing([("a", T0, "firing", ""), ("a", T1, "resolved", ZERO)]) == set()
    # the resolve of an instance at T0 (no end) after a firing at T1: older news
    assert ordering.firing([("a", T1, "firing", ""), ("a", T0, "resolved", "x")]) == {"a"}


def test_equal_times_go_to_the_later_arrival_unless_a_resolves_end_touches_a_firing() -> None:
    # a firing at T0 and a resolve, news as of T0 by its start (no end): the resolve wins
    assert ordering.firing([("a", T0, "firing"), ("a", T0_OFFSET, "resolved")]) == set()
    # a resolve whose end is exactly a firing's start does not end that firing
    assert ordering.firing([("a", T1, "firing", ""), ("a", T0, "resolved", T1)]) == {"a"}


def test_unreadable_times_between_instances_fall_back_to_arrival_order() -> None:
    assert ordering.firing([("a", T0, "resolved"), ("a", "garbage", "firing")]) == {"a"}
    assert ordering.firing([("a", "garbage", "firing"), ("a", T0, "resolved")]) == set()
    assert ordering.firing([("a", T2, "firing"), ("a", "x", "resolved", "y")]) == set()


def test_fingerprints_are_ordered_each_on_its_own() -> None:
    rows = [("a", T1, "firing"), ("b", T0, "firing"), ("a", T0, "resolved", T0),
            ("b", T0, "resolved"), ("c", T2, "resolved"), ("c", T1, "firing")]  # fmt: skip
    assert ordering.firing(rows) == {"a"}


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([("a", T0, "firing", ""), ("a", T1, "resolved", T2), ("a", T2, "firing", "")], {"a"}),
        ([("a", T0, "firing", ""), ("a", T2, "firing", ""), ("a", T1, "resolved", T2)], {"a"}),
        ([("a", T2, "firing", ""), ("a", T0, "resolved", T1), ("a", T2, "resolved", "")], set()),
    ],
)
def test_three_notifications_in_any_delivery_order_end_on_the_newest(
    rows: list[tuple[str, str, str, str]], expected: set[str]
) -> None:
    assert ordering.firing(rows) == expected
