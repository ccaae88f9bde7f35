"""Parsers for the outputs of the active checks a quarantined node runs before release.

Pure functions from a tool's stdout to a :class:`ToolResult`: per-check outcomes (pass,
fail, skip, with the GPUs they concern and the warning text) and numeric measurements
(bandwidths in GB/s). Formats, with fixtures in ``fixtures/validation/`` (origins there):

- ``dcgmi diag -r N``: the box table (category rows ``|-----  Stress  ---``; result cells
  ``Pass - All``, ``Fail - GPU: 3``, ``Pass - GPUs: 0, 1``, ``Warn``, ``Skip``, ``Not Run``;
  continuation and ``Warning`` rows; a result cell after a warning is a result, not its text).
- ``dcgmi diag -r N -j``: ``{"DCGM GPU Diagnostic": {"test_categories": [{"category",
  "tests": [{"name", "results": [{"gpu_id"|"gpu_ids", "status", "warnings"}]}]}]}}``.
- nccl-tests ``all_reduce_perf``: the size table (out-of-place and in-place ``busbw``) and
  ``# Avg bus bandwidth : X``; ``#wrong`` > 0 is a failed check.
- ``nvbandwidth``: ``Running <case>.``, a matrix of GB/s with ``N/A`` on the diagonal, and
  ``SUM <case> <GB/s>``.
- rccl-tests (AMD's nccl-tests): the nccl-tests format; RVS and TransferBench (AMD's) in
  :mod:`remediation.validation.parsers_amd`.
- perftest ``ib_write_bw``: the ``#bytes #iterations BW peak[MB/sec|Gb/sec] BW average ...``
  row (MB/sec is 10^6 bytes/s).
- NVIDIA Health Validation's JSON ``NodeVerdict``: in :mod:`remediation.validation.parsers_hv`.

Anything unreadable raises :class:`ParseError` with the reason: an output we cannot read is
never a pass. So does an output that ends early (the tool was killed, the pod log or the
file was cut): each format's end marker must be there (nccl-tests' ``# Avg bus bandwidth``
after a table reaching ``maxBytes``; nvbandwidth's ``SUM`` of every case it started;
ib_write_bw's closing rule after its rows; dcgmi's closing ``+---+`` border), so a
measurement taken at a smaller size than the thresholds name is never judged.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from remediation.validation.parsers_amd import parse_rvs, parse_transferbench
from remediation.validation.parsers_hv import parse_health_validation
from remediation.validation.results import STATUSES as STATUSES
from remediation.validation.results import Check as Check
from remediation.validation.results import ParseError as ParseError
from remediation.validation.results import ToolResult as ToolResult


def _status(word: str) -> str:
    w = word.strip().lower()
    if w.startswith("pass"):
        return "pass"
    if w.startswith("fail"):
        return "fail"
    if w.startswith("skip") or w.startswith("not run"):
        return "skip"
    if w.startswith("warn"):
        return "warn"
    raise ParseError(f"unknown diagnostic status {word.strip()!r}")


def _gpu_list(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text))


# -- dcgmi diag (text) -----------------------------------------------------------------

_ROW = re.compile(r"^\|\s*(?P<name>[^|]*?)\s*\|\s*(?P<value>.*?)\s*\|$")
_CATEGORY = re.compile(r"^[|+]-----\s+(?P<cat>[A-Za-z ]+?)\s+-+\+")
_RESULT = re.compile(r"^(?P<st>Pass|Fail|Skip|Warn|Not Run)(?:\s*-\s*(?P<who>.*))?$", re.I)
_META_CATEGORIES = {"metadata"}


def parse_dcgmi_diag_text(text: str) -> ToolResult:
    if "Diagnostic" not in text or "|" not in text:
        raise ParseError("not a dcgmi diag table (no 'Diagnostic' header)")
    checks: list[Check] = []
    category = ""
    current: str | None = None
    warning: list[str] = []
    meta: dict[str, float] = {}

    def flush_warning() -> None:
        if warning and checks:
            last = checks[-1]
            checks[-1] = Check(last.name, last.status, last.gpus, " ".join(warning).strip())
        warning.clear()

    for raw in text.splitlines():
        line = raw.rstrip()
        m = _CATEGORY.match(line)
        if m:
            flush_warning()
            category = m.group("cat").strip().lower()
            current = None
            continue
        m = _ROW.match(line)
        if not m or category in ("",):
            continue
        name, value = m.group("name"), m.group("value")
        if category in _META_CATEGORIES:
            if name == "DCGM Version":
                meta["dcgm_version_major"] = float(value.split(".")[0] or 0)
            continue
        if name == "Warning":
            warning.append(value)
            continue
        if not name and warning:
            if not _RESULT.match(value):  # the warning's next line
                warning.append(value)
                continue
            flush_warning()  # another result cell of the same test, after a warning

        if name:
            flush_warning()
            current = name
        if current is None:
            continue
        r = _RESULT.match(value)
        if not r:
            if value:  # a result cell we cannot read is an error, never skipped as a pass
                _status(value.split(" - ")[0])
            continue
        who = (r.group("who") or "").strip()
        gpus = () if who.lower() in ("", "all") else _gpu_list(who)
        checks.append(Check(current, _status(r.group("st")), gpus))
    flush_warning()
    if not checks:
        raise ParseError("dcgmi diag table has no test results")
    tail = [line.strip() for line in text.splitlines() if line.strip()]
    if not tail or not re.fullmatch(r"\+[-+]+\+", tail[-1]):
        raise ParseError(f"dcgmi diag table cut off after {checks[-1].name!r} (no closing border)")
    return ToolResult("dcgmi-diag", tuple(_merge(checks)), meta)


def _merge(checks: Iterable[Check]) -> list[Check]:
    """One check per (name, status); a test reported as pass for some GPUs and fail for
    others stays two checks, so the failed GPUs are never hidden by a pass."""
    out: dict[tuple[str, str], Check] = {}
    for c in checks:
        key = (c.name, c.status)
        if key in out:
            prev = out[key]
            out[key] = Check(
                c.name,
                c.status,
                tuple(sorted(set(prev.gpus) | set(c.gpus))),
                " ".join(x for x in (prev.detail, c.detail) if x),
            )
        else:
            out[key] = c
    return list(out.values())


# -- dcgmi diag -j -----------------------------------------------------------------------


def parse_dcgmi_diag_json(text: str) -> ToolResult:
    try:
        doc = json.loads(text[text.find("{") :] if "{" in text else text)
    except json.JSONDecodeError as e:
        raise ParseError(f"dcgmi diag -j output is not JSON: {e}") from None
    body = doc.get("DCGM GPU Diagnostic") if isinstance(doc, dict) else None
    if not isinstance(body, dict) or not isinstance(body.get("test_categories"), list):
        raise ParseError("dcgmi diag -j output has no 'DCGM GPU Diagnostic.test_categories'")
    checks: list[Check] = []
    for cat in body["test_categories"]:
        for test in (cat.get("tests") or []) if isinstance(cat, dict) else []:
            if not isinstance(test, dict):
                raise ParseError(f"dcgmi diag -j: a test entry is not an object: {test!r:.60}")
            name = str(test.get("name", "?"))
            for res in test.get("results", []) or []:
                checks.append(_json_result(name, res))
    if not checks:
        raise ParseError("dcgmi diag -j output has no test results")
    return ToolResult("dcgmi-diag", tuple(_merge(checks)), {})


def _json_result(name: str, res: Any) -> Check:
    if not isinstance(res, dict) or "status" not in res:
        raise ParseError(f"dcgmi diag -j: result of {name!r} has no status")
    gpu = res.get("gpu_id", res.get("gpu_ids", res.get("entity_id", "")))
    gpus = _gpu_list(str(gpu)) if gpu not in ("", None) else ()
    warnings = res.get("warnings") or []
    detail = " ".join(str(w.get("warning", w)) if isinstance(w, dict) else str(w) for w in warnings)
    return Check(name, _status(str(res["status"])), gpus, detail)


def parse_dcgmi_diag(text: str) -> ToolResult:
    """Text or ``-j`` JSON, whichever the output is."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return parse_dcgmi_diag_json(text)
    return parse_dcgmi_diag_text(text)


# -- nccl-tests ----------------------------------------------------------------------------

_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<v>[0-9.]+)", re.M)
# nccl-tests' own verdict on the values: "# Out of bounds values : 3 FAILED" (else "0 OK")
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*\d+\s+FAILED", re.M)
_MAX_BYTES = re.compile(
    r"maxBytes\s+(?P<max>\d+)\s+step:\s*(?P<step>\d+)\((?P<kind>factor|bytes)\)"
)


def _nccl_complete(text: str, rows: list[list[str]], avg: re.Match[str] | None) -> None:
    """Raise when the table ends before the header's maxBytes or has no closing line."""
    largest = max(int(r[0]) for r in rows)
    if avg is None:
        raise ParseError(
            f"nccl-tests output cut off after size {largest} (no '# Avg bus bandwidth' line)"
        )
    m = _MAX_BYTES.search(text)
    if m is None:
        return
    top, step = int(m.group("max")), max(1, int(m.group("step")))
    following = largest * step if m.group("kind") == "factor" and step > 1 else largest + step
    if following <= top:
        raise ParseError(f"nccl-tests table ends at size {largest}, before maxBytes {top}")


def parse_nccl_tests(text: str) -> ToolResult:
    """``max_busbw_gbps`` (largest of out-of-place and in-place over all sizes),
    ``busbw_at_max_size_gbps``, ``avg_busbw_gbps``; a check ``data correctness``."""
    rows: list[list[str]] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 13 and parts[0].isdigit() and not line.lstrip().startswith("#"):
            rows.append(parts)
    avg = _AVG_BUSBW.search(text)
    if not rows and not avg:
        raise ParseError("no nccl-tests result rows and no '# Avg bus bandwidth' line")
    out: dict[str, float] = {}
    wrong = 0
    if rows:
        try:
            busbw = [max(float(r[7]), float(r[11])) for r in rows]
            wrong = sum(int(r[8]) + int(r[12]) for r in rows if r[8].isdigit())
            out["max_busbw_gbps"] = max(busbw)
            out["busbw_at_max_size_gbps"] = busbw[
                max(range(len(rows)), key=lambda i: int(rows[i][0]))
            ]
        except (ValueError, IndexError) as e:
            raise ParseError(f"nccl-tests row not understood: {e}") from None
    if rows:
        _nccl_complete(text, rows, avg)
    if avg:
        out["avg_busbw_gbps"] = float(avg.group("v"))
    check = Check("data correctness", "fail" if wrong else "pass", (), f"#wrong={wrong}")
    if _OUT_OF_BOUNDS.search(text):  # not any FAILED (NCCL WARN lines say it too)
        check = Check("data correctness", "fail", (), "out of bounds values")
    return ToolResult("nccl-tests", (check,), out)


def parse_rccl_tests(text: str) -> ToolResult:
    """rccl-tests (ROCm/rccl-tests, AMD's port of nccl-tests): the same header, size table,
    ``#wrong`` columns, ``# Out of bounds values`` and ``# Avg bus bandwidth`` lines (it adds
    ``rccl-tests: Version ...`` and ``# Collective test concluded: <test>``), so the same
    reading, the same measurement names (thresholds per GPU model) and the same end markers."""
    result = parse_nccl_tests(text)
    return ToolResult("rccl-tests", result.checks, result.measurements)


# -- nvbandwidth -----------------------------------------------------------------------------

_RUNNING = re.compile(r"^Running (?P<case>\S+?)\.?$")
_SUM = re.compile(r"^SUM (?P<case>\S+) (?P<v>[0-9.]+)")


def parse_nvbandwidth(text: str) -> ToolResult:
    """Per test case ``<case>.sum_gbps`` and ``<case>.min_gbps`` (the slowest pair: one bad
    NVLink shows here long before it moves the sum)."""
    out: dict[str, float] = {}
    case: str | None = None
    cells: list[float] = []
    for line in text.splitlines():
        m = _RUNNING.match(line.strip())
        if m:
            case, cells = m.group("case"), []
            continue
        m = _SUM.match(line.strip())
        if m:
            out[f"{m.group('case')}.sum_gbps"] = float(m.group("v"))
            if cells:
                out[f"{m.group('case')}.min_gbps"] = min(cells)
            case = None
            continue
        if case is None:
            continue
        parts = line.split()
        if len(parts) >= 2 and parts[0].isdigit() and not all(p.isdigit() for p in parts):
            for p in parts[1:]:
                if p != "N/A":
                    try:
                        cells.append(float(p))
                    except ValueError:
                        raise ParseError(f"nvbandwidth matrix cell {p!r} in {case}") from None
    if case is not None:
        raise ParseError(f"nvbandwidth output cut off in {case} (no SUM line)")
    if not out:
        raise ParseError("no 'SUM <testcase> <GB/s>' line in nvbandwidth output")
    return ToolResult("nvbandwidth", (), out)


# -- ib_write_bw -----------------------------------------------------------------------------

_IB_HEAD = re.compile(r"BW peak\[(?P<unit>MB/sec|Gb/sec)\]\s+BW average\[(?P=unit)\]")


def parse_ib_write_bw(text: str) -> ToolResult:
    """``bw_peak_gbps`` and ``bw_average_gbps`` in GB/s (bytes), whatever unit was printed,
    at the largest message size (``-a`` prints one row per size); ``device`` is not numeric
    and stays out. The rows must end with perftest's closing rule (else: cut off)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _IB_HEAD.search(line)
        if not m:
            continue
        rows, closed = [], False
        for row in lines[i + 1 :]:
            parts = row.split()
            if len(parts) >= 4 and parts[0].isdigit():
                rows.append(parts)
            elif row.strip().startswith("---"):
                closed = True
                break
        if not rows:
            break
        if not closed:
            raise ParseError(
                f"ib_write_bw output cut off after size {rows[-1][0]} (no closing rule)"
            )
        last = max(rows, key=lambda r: int(r[0]))
        try:
            peak, avg = float(last[2]), float(last[3])
        except ValueError:
            raise ParseError(f"ib_write_bw row not understood: {' '.join(last)}") from None
        scale = 1e-3 if m.group("unit") == "MB/sec" else 1 / 8
        return ToolResult(
            "ib_write_bw", (), {"bw_peak_gbps": peak * scale, "bw_average_gbps": avg * scale}
        )
    raise ParseError("no ib_write_bw result row (#bytes #iterations BW peak ...)")


PARSERS = {
    "dcgmi-diag": parse_dcgmi_diag,
    "nccl-tests": parse_nccl_tests,
    "nvbandwidth": parse_nvbandwidth,
    "ib_write_bw": parse_ib_write_bw,
    # AMD Instinct nodes (remediation.validation.parsers_amd)
    "rccl-tests": parse_rccl_tests,  # the nccl-tests format
    "rvs": parse_rvs,
    "transferbench": parse_transferbench,
    # NVIDIA Health Validation's node verdict (remediation.validation.parsers_hv)
    "health-validation": parse_health_validation,
}
