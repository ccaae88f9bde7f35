"""A node_pattern turned into a server-side selection of some nodes' host names (issue 33), without
a server: the pattern around the nodes selects every host name the mapping turns into one of
them, and a pattern where that is not proven gives none (read whole). Through a real Prometheus
(RE2): test_replicas_read_dcgm.py."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from analyzer.sources.dialects.hostpattern import literal, selector, split
from analyzer.sources.dialects.identity import NodeMap, identity_matchers

# pieces of the patterns sites write: before, as and after the node's group
_AROUND = st.sampled_from([
    "", "gpu-", "gpu-node-", r"rack\d-", r"(?:rack\d+-)?", r"[a-z]+-", r"[^.]+\.", r"\w{2}",
    r"(?:ib|eth)-", "x.y", r"\.example\.com", r"(?:\.ib)?", r"-\d{1,3}", r"\s?", r".*?", "-(a|b)",
    r"[A-Fa-f0-9]", r"\D", r"(?:-[0-9]+)*", r"\W", "é",
])  # fmt: skip
_HEAD = _AROUND | st.just(r"(?P<site>[a-z]{3})-")  # a named group before the node's
_GROUP = st.sampled_from([
    r"\d+", r"[a-z0-9-]+", r"\w+", r".+", r".*", r"[^.]+", r"gpu-\d{2,4}", r"(?:a|b)\d?",
    r"[a-z]+(?:-\d+)?", r"\S+", "",
])  # fmt: skip


@st.composite
def _patterns(draw) -> str:
    head, tail = draw(_HEAD), draw(_AROUND)
    body = f"{head}({draw(_GROUP)}){tail}"
    return draw(st.sampled_from([body, f"^{body}$", f"(?:{body})", f"^(?:{body})$"]))


@settings(
    max_examples=300, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
@given(data=st.data())
def test_every_host_a_pattern_maps_to_an_owned_node_is_selected_by_the_pattern_around_them(data):
    pattern = data.draw(_patterns())
    nm = NodeMap(pattern, {})
    assert nm.selectable
    hosts = data.draw(st.lists(st.from_regex(pattern, fullmatch=True), min_size=1, max_size=4))
    others = data.draw(st.lists(st.text("abc-.019", max_size=6), max_size=3))
    owned = {nm(h) for h in hosts[:2]} | set(others)
    rx = re.compile(nm.raw_regex(owned) or "")
    for h in hosts + others:  # mapped by the pattern, or passing through unchanged
        if nm(h) in owned:
            assert rx.fullmatch(h), (pattern, h, nm(h), rx.pattern)


@given(names=st.dictionaries(st.text("abc-.", min_size=1, max_size=4),
                             st.text("nmxy.", min_size=1, max_size=3), max_size=4),
       hosts=st.lists(st.text("abcnmxy-.(7", max_size=8), max_size=6),
       owned=st.sets(st.text("nmxy.7", min_size=1, max_size=3), min_size=1, max_size=3))  # fmt: skip
def test_names_mapped_first_and_names_passing_through_are_selected_under_a_pattern_too(
    names, hosts, owned
):
    nm = NodeMap(r"a(\d)", names)
    rx = re.compile(nm.raw_regex(owned) or "")
    for h in [*hosts, *names, *owned, "a7"]:
        if nm(h) in owned:
            assert rx.fullmatch(h), (h, nm(h), rx.pattern)


def test_the_selection_is_the_pattern_around_the_nodes_and_selects_no_other_node_s_hosts():
    nm = NodeMap(r"^gpu-node-(\d+)\.ib$", {"odd-host": "007"})
    assert split(nm.pattern) == ("gpu-node-(?:", r")\.ib")
    rx = re.compile(nm.raw_regex({"003", "007"}) or "")
    assert rx.pattern == r"003|007|odd-host|gpu-node-(?:003|007)\.ib"
    for h in ("gpu-node-003.ib", "gpu-node-007.ib", "odd-host", "003"):
        assert rx.fullmatch(h), h
    for h in ("gpu-node-004.ib", "gpu-node-003", "gpu-node-0037.ib", "gpu-node-003xib", "odd-hos"):
        assert not rx.fullmatch(h), h
    assert nm.raw_regex(()) is None  # no node: nothing to select by the pattern


def test_node_names_are_literals_in_the_selection_and_classes_widen_to_every_non_ascii_character():
    assert literal("a.b(c)*\n") == r"a\.b\(c\)\*\x0a"
    got = selector(r"[a-z]\d-(\w+)", {"n.1"})
    assert got is not None and got.startswith("[a-z\\x80-")
    rx = re.compile(got)
    assert rx.fullmatch("x٣-n.1")  # Python's \d matches an Arabic-Indic digit: so must RE2's part
    assert not rx.fullmatch("x3-nx1") and not rx.fullmatch("X3-n.1")


@pytest.mark.parametrize("pattern", [
    r"(x)+", r"(x)?", r"(x){2}", r"(?:(x)-)*", r"(?:a|(b))", r"(a)|b", r"(a)\1",
    r"(?P<a>x)(?P=a)", r"(?=a)(a)", r"(?!b)(a)", r"(?<=a)(b)", r"(a)(?<!b)", r"(a)(?#c)(?(1)b|c)",
    r"(?i)(a)", r"(?i:x)(a)", r"(?m)(a)$", r"(a)\Z", r"\A(a)", r"\b(a)", r"(a)\B", r"(a)b*+",
    r"(?>a)(b)", r"(a)b{1001}", r"(a)$b", r"(a)\ud800", r"(a)(?s:.)",
])  # fmt: skip
def test_a_pattern_not_proven_to_select_a_superset_gives_no_selection_and_is_read_whole(pattern):
    assert split(pattern) is None
    nm = NodeMap(pattern, {})
    assert not nm.selectable and nm.raw_regex({"a"}) is None
    assert identity_matchers(("Hostname", "instance"), {"a"}, nm) is None


@pytest.mark.parametrize("pattern", [r"((a)b)c", r"(?:x(\d))", r"(?x) gpu - (\d+)  # comment",
                                     r"(.*?)-(.*)", r"(a)b{1000}", r"((?=g)\w+)x(?#c)",
                                     r"((a)\2)"])  # fmt: skip
def test_group_one_in_plain_groups_whatever_it_holds_and_free_spacing_are_selected(pattern):
    parts = split(pattern)
    assert parts is not None
    assert not re.search(r"\(\?[=!<#P(>]|\\[0-9AZbB]", "".join(parts))  # only RE2's syntax left


@pytest.mark.filterwarnings("ignore::FutureWarning")
@settings(max_examples=300)
@given(st.text("()[]{}?*+|\\^$.:=!<>#PdwA1a-", max_size=12))
def test_any_text_either_gives_a_selection_or_none_and_a_node_map_refuses_it_with_value_error(text):
    assert split(text) is None or isinstance(split(text), tuple)  # never an exception
    try:
        nm = NodeMap(text, {})
    except ValueError as e:
        assert str(e).startswith("node_pattern")
        return
    assume(nm.selectable)
    assert re.compile(nm.raw_regex({"n"}) or "")  # a selection always compiles


def test_under_a_pattern_each_identity_label_selects_the_pattern_around_the_nodes():
    nm = NodeMap(r"gpu-(\d+)\.x", {})
    got = identity_matchers(("Hostname", "instance"), {"07"}, nm)
    assert got == [
        'Hostname=~"07|gpu-(?:07)\\\\.x"',
        'instance=~"(?:07|gpu-(?:07)\\\\.x)(?::[0-9]+)?|\\\\[(?:07|gpu-(?:07)\\\\.x)\\\\].*"',
    ]
    quoted = identity_matchers(("Hostname",), {"07"}, NodeMap(r'(\d+)"q', {}))
    assert quoted == ['Hostname=~"07|(?:07)\\\\x22q"']  # no bare quote ends the string
