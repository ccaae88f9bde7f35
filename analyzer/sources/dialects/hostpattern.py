"""Which host names a ``node_pattern`` may turn into given nodes: the server-side selection of a
replica's foreign read under a pattern (issue 33).

Pure. :class:`.identity.NodeMap` maps a host name matched in full by the site's pattern to the
pattern's first group. Its inverse for some nodes is the pattern with the first group's content
replaced by the alternation of those nodes: every host name the mapping turns into one of them
matches it. That holds only where the first group captures exactly once, wherever the pattern
matches (not under a quantifier or inside an alternation), and nothing outside the group depends
on what it captured (no backreferences, lookarounds, conditionals). The pattern is therefore
re-written from Python's own parse of it (``re._parser``), whitelisting the constructs whose
meaning Prometheus' RE2 (Go ``regexp``, anchored in full) shares, and each character class is
widened to every non-ASCII character: Python's ``\\d``, ``\\w``, ``\\s`` are Unicode-aware, Go's
are ASCII, and a wider selection stays a superset. Anything else has no selection (None): the
family is read whole, as before.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

_META = r"\.+*?()|[]{}^$"
_NON_ASCII = "\\x80-\U0010ffff"  # every non-ASCII character, in a class (Python and Go alike)
_MAX_COUNT = 1000  # Go's regexp refuses a repeat count above 1000
# the ASCII characters each of Python's class escapes matches (the non-ASCII ones: all, widened)
_CATEGORY_ASCII = {
    cat: frozenset(i for i in range(128) if re.fullmatch(esc, chr(i)))
    for cat, esc in (
        (sre.CATEGORY_DIGIT, r"\d"),
        (sre.CATEGORY_NOT_DIGIT, r"\D"),
        (sre.CATEGORY_SPACE, r"\s"),
        (sre.CATEGORY_NOT_SPACE, r"\S"),
        (sre.CATEGORY_WORD, r"\w"),
        (sre.CATEGORY_NOT_WORD, r"\W"),
    )
}
_FLAGS_OK = sre.SRE_FLAG_UNICODE | sre.SRE_FLAG_VERBOSE | sre.SRE_FLAG_DOTALL | sre.SRE_FLAG_ASCII


class _Unsafe(Exception):
    """A construct whose re-written selection would not provably be a superset."""


def literal(s: str) -> str:
    """``s`` as a literal in a regex (Python's and RE2's alike): the escapes
    :func:`analyzer.sources.queries.regex_literal` makes, without its PromQL string layer, and
    ASCII control characters as ``\\xHH`` (a PromQL string holds no raw newline)."""
    return "".join("\\" + ch if ch in _META else _control(ch) for ch in s)


def _control(ch: str) -> str:
    return f"\\x{ord(ch):02x}" if ord(ch) < 128 and not ch.isprintable() else ch


def _char(c: int) -> str:
    if c < 128:
        ch = chr(c)
        if ch in _META:
            return "\\" + ch
        return ch if ch.isprintable() and ch != '"' else f"\\x{c:02x}"
    if 0xD800 <= c <= 0xDFFF:  # a lone surrogate: no UTF-8, no RE2
        raise _Unsafe("surrogate")
    return chr(c)


def _member(c: int) -> str:
    return chr(c) if chr(c).isalnum() else f"\\x{c:02x}"


def _klass(ascii_in: Iterable[int]) -> str:
    """A class of the given ASCII characters (runs as ranges) and every non-ASCII one."""
    out, codes = [], sorted(set(ascii_in))
    while codes:
        n = 1
        while n < len(codes) and codes[n] == codes[0] + n:
            n += 1
        lo, hi = codes[0], codes[n - 1]
        out.append(_member(lo) if n == 1 else f"{_member(lo)}-{_member(hi)}")
        codes = codes[n:]
    return "[" + "".join(out) + _NON_ASCII + "]"


def _in_ascii(items: list[tuple[Any, Any]]) -> set[int]:
    """The ASCII characters a parsed class (``IN``) matches."""
    out: set[int] = set()
    negate = False
    for op, av in items:
        if op is sre.NEGATE:
            negate = True
        elif op is sre.LITERAL:
            out.add(av)
        elif op is sre.RANGE:
            out.update(range(av[0], min(av[1], 127) + 1))
        elif op is sre.CATEGORY and av in _CATEGORY_ASCII:
            out |= _CATEGORY_ASCII[av]
        else:
            raise _Unsafe(str(op))
    return set(range(128)) - out if negate else {c for c in out if c < 128}


def _items(seq: Any, first: bool = False, last: bool = False) -> str:
    """A parsed sequence re-written; ``first``/``last``: it begins/ends the whole pattern, where
    a leading ``^`` and a trailing ``$`` match nothing under a match in full (and are dropped)."""
    items = list(seq)
    if first and items and items[0] == (sre.AT, sre.AT_BEGINNING):
        items = items[1:]
    if last and items and items[-1] == (sre.AT, sre.AT_END):
        items = items[:-1]
    return "".join(_item(op, av) for op, av in items)


def _item(op: Any, av: Any) -> str:
    if op is sre.LITERAL:
        return _char(av)
    if op is sre.NOT_LITERAL:
        return _klass(set(range(128)) - {av})
    if op is sre.ANY:
        return "(?s:.)"
    if op is sre.IN:
        return _klass(_in_ascii(av))
    if op is sre.SUBPATTERN:
        _, add, drop, sub = av
        if add or drop:  # an inline flag: (?i:...) and the like
            raise _Unsafe("inline flag")
        return f"(?:{_items(sub)})"
    if op is sre.BRANCH:
        return "(?:" + "|".join(_items(b) for b in av[1]) + ")"
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT):  # a lazy one selects the same strings
        lo, hi, sub = av
        if lo > _MAX_COUNT or (hi is not sre.MAXREPEAT and hi > _MAX_COUNT):
            raise _Unsafe("repeat count")
        count = f"{{{lo},}}" if hi is sre.MAXREPEAT else f"{{{lo},{hi}}}"
        return f"(?:{_items(sub)}){count}"
    raise _Unsafe(str(op))  # backreferences, lookarounds, conditionals, atomic, possessive...


def _around(seq: Any, top: bool) -> tuple[str, str] | None:
    """The re-written text before and after group 1, where it is found in ``seq`` outside any
    quantifier or alternation (inside plain groups only); None where it is not there."""
    for i, (op, av) in enumerate(seq):
        if op is not sre.SUBPATTERN:
            continue
        group, add, drop, sub = av
        if add or drop:
            raise _Unsafe("inline flag")
        inner = ("", "") if group == 1 else _around(sub, False)
        if inner is None:
            continue
        head = _items(seq[:i], first=top)
        tail = _items(seq[i + 1 :], last=top)
        return head + "(?:" + inner[0], inner[1] + ")" + tail
    return None


def split(pattern: str) -> tuple[str, str] | None:
    """``pattern`` as the regex text before and after its first group's content (Python's and
    RE2's alike), such that ``before + X + after`` matches in full every host name the pattern
    matches in full with a first group that ``X`` matches; None where no such text is proven."""
    try:
        parsed = sre_parse.parse(pattern)
        if parsed.state.flags & ~_FLAGS_OK or parsed.state.groups < 2:
            return None
        return _around(parsed, True)
    except (_Unsafe, re.error, RecursionError, TypeError, ValueError, AttributeError, IndexError):
        return None  # (the last four: a parse shaped otherwise, by another Python: unsure)


def fill(parts: tuple[str, str], nodes: Iterable[str]) -> str:
    """The pattern :func:`split` into ``parts`` with the alternation of ``nodes`` (literals)
    for its first group's content."""
    return parts[0] + "|".join(literal(n) for n in sorted(set(nodes))) + parts[1]


def selector(pattern: str, nodes: Iterable[str]) -> str | None:
    """A regex matching in full (a superset of) the host names ``pattern`` turns into one of
    ``nodes``; None where the pattern gives none (:func:`split`) or no node is given."""
    parts = split(pattern)
    names = set(nodes)
    return None if parts is None or not names else fill(parts, names)
