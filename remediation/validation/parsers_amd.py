"""Parsers for AMD's validation tools: the ROCm Validation Suite (RVS) and TransferBench.

Pure functions from stdout to a :class:`~remediation.validation.results.ToolResult`, as the
other parsers; fixtures in ``fixtures/validation/`` (origins in its README). rccl-tests has the
nccl-tests format and is read by :func:`remediation.validation.parsers.parse_rccl_tests`.

- ``rvs`` (RVS 1.3+): the closing summary (``ROCm Validation Suite (RVS) Summary``): the GPU
  table, cells ``<name> - <GPU ID>`` over ``<index> - <node id> - <BDF>``, and one row per
  action ``| <action> | <MODULE> | PASS|FAIL |`` closed by a ``+---+`` border. The summary is the
  end marker: an output without it was cut short (or comes from an RVS before 1.3), and is
  never a pass. Per-GPU ``[RESULT]`` lines that say ``pass: FALSE`` (or ``met: FALSE``) name
  the GPU by its RVS GPU ID (``[RESULT][<ts>][<action>] gst <gpu id> Gflop: <max> ... pass:
  <pass>``, RVS's GST documentation), mapped to its index through the summary's GPU table, so a
  failed action says which GPU; GST's ``Gflop:`` values give ``gst_min_gflops``.
- ``transferbench`` (its ``p2p`` preset): ``Unidirectional copy peak bandwidth GB/s ...``, a
  header ``SRC+EXE\\DST CPU 00 ... GPU 07`` and rows ``GPU 03 -> <GB/s per column>``, closed by
  ``Averages (During UniDir): ...``; then ``Bidirectional copy peak bandwidth GB/s ...`` with
  ``->``, ``<-`` and ``<->`` rows per source, ``N/A`` on the diagonal. Measurements:
  ``unidir_gpu_min_gbps`` and ``bidir_gpu_min_gbps`` (the slowest GPU-to-GPU pair: one bad
  XGMI link shows there long before it moves an average), ``unidir_gpu_avg_gbps``; the
  slowest pair is named in a check's detail and GPUs.
"""

from __future__ import annotations

import re

from remediation.validation.results import Check, ParseError, ToolResult

# -- RVS -------------------------------------------------------------------------------------

_SUMMARY = "ROCm Validation Suite (RVS) Summary"
_CELLS = re.compile(r"^\|(?P<cells>.*)\|\s*$")
_GPU_NAME_ID = re.compile(r"^(?P<name>.+?) - (?P<id>\d+)$")
_GPU_INDEX = re.compile(r"^(?P<index>\d+) - (?P<node>\d+) - (?P<bdf>[0-9A-Fa-f:.]+)$")
_BORDER = re.compile(r"^\+[-=]+\+\s*$")
_RESULT = re.compile(
    r"^\[RESULT\s*\]\s*\[[^\]]*\]\s*\[?(?P<action>[^\]\s]+)\]?\s+(?P<module>[a-z]+)\s+"
    r"(?P<gpu>\d+)\b(?P<rest>.*)$"
)
_VERDICT = re.compile(r"\b(?:pass|met):\s*(?P<ok>TRUE|FALSE)\b", re.I)
_GFLOP = re.compile(r"\bGflop:\s*(?P<v>[0-9.]+)")
_RVS_STATUS = {"PASS": "pass", "FAIL": "fail", "SKIP": "skip", "SKIPPED": "skip"}


def _cells(line: str) -> list[str] | None:
    m = _CELLS.match(line.strip())
    return None if m is None else [c.strip() for c in m.group("cells").split("|")]


def _rvs_gpus(rows: list[list[str]]) -> dict[int, int]:
    """RVS GPU ID -> GPU index, from the summary's two-line GPU cells."""
    out: dict[int, int] = {}
    pending: list[int | None] = []
    for cells in rows:
        names = [_GPU_NAME_ID.match(c) for c in cells]
        if any(names):
            pending = [int(m.group("id")) if m else None for m in names]
            continue
        for col, cell in enumerate(cells):
            m = _GPU_INDEX.match(cell)
            if m and col < len(pending) and pending[col] is not None:
                out[pending[col]] = int(m.group("index"))  # type: ignore[index]
        pending = []
    return out


def _rvs_summary(text: str) -> tuple[dict[int, int], list[tuple[str, str, str]]]:
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if _SUMMARY in ln), None)
    if start is None:
        raise ParseError("no RVS summary table (RVS 1.3+ ends with it: cut short, or older RVS)")
    gpu_rows: list[list[str]] = []
    actions: list[tuple[str, str, str]] = []
    in_actions = closed = False
    for line in lines[start + 1 :]:
        cells = _cells(line)
        if cells is None:
            if _BORDER.match(line.strip()) and in_actions and actions:
                closed = True
                break
            continue
        if cells[:3] == ["Action Name", "Module", "Result"]:
            in_actions = True
        elif in_actions and len(cells) == 3:
            actions.append((cells[0], cells[1], cells[2]))
        elif not in_actions:
            gpu_rows.append(cells)
    if not actions:
        raise ParseError("RVS summary without action rows")
    if not closed:
        raise ParseError(f"RVS summary cut off after action {actions[-1][0]!r}")
    return _rvs_gpus(gpu_rows), actions


def parse_rvs(text: str) -> ToolResult:
    """One check per RVS action (its module and result), with the GPUs whose ``[RESULT]``
    lines failed; ``gst_min_gflops`` when GST results are printed."""
    gpus, actions = _rvs_summary(text)
    failed: dict[str, set[int]] = {}
    gflops: list[float] = []
    for line in text.splitlines():
        m = _RESULT.match(line.strip())
        if m is None:
            continue
        verdict = _VERDICT.search(m.group("rest"))
        if verdict and verdict.group("ok").upper() == "FALSE":
            gpu = int(m.group("gpu"))
            failed.setdefault(m.group("action"), set()).add(gpus.get(gpu, gpu))
        if m.group("module") == "gst" and (g := _GFLOP.search(m.group("rest"))):
            gflops.append(float(g.group("v")))
    checks = []
    for action, module, result in actions:
        status = _RVS_STATUS.get(result.upper())
        if status is None:
            raise ParseError(f"RVS action {action!r}: unknown result {result!r}")
        who = tuple(sorted(failed.get(action, ()))) if status == "fail" else ()
        checks.append(Check(f"{action} ({module.lower()})", status, who))
    out = {"gst_min_gflops": min(gflops)} if gflops else {}
    return ToolResult("rvs", tuple(checks), out)


# -- TransferBench ---------------------------------------------------------------------------

_TB_UNI = "Unidirectional copy peak bandwidth GB/s"
_TB_BI = "Bidirectional copy peak bandwidth GB/s"
_TB_DEVICE = re.compile(r"\b(CPU|GPU)\s+(\d+)\b")
_TB_ROW = re.compile(r"^\s*(?P<kind>CPU|GPU)\s+(?P<i>\d+)\s+(?P<dir><->|->|<-)\s+(?P<vals>.*)$")
_TB_UNI_END = re.compile(r"Averages \(During UniDir\):\s+(?P<vals>[0-9.\s]+)$")


def _tb_table(lines: list[str], title: str) -> tuple[list[tuple[str, int]], dict, bool]:
    """(columns, {(src, dir): [GB/s or None]}, whether the UniDir averages line closed it)."""
    start = next((i for i, ln in enumerate(lines) if title in ln), None)
    if start is None:
        return [], {}, False
    columns: list[tuple[str, int]] = []
    rows: dict[tuple[tuple[str, int], str], list[float | None]] = {}
    for line in lines[start + 1 :]:
        if "copy peak bandwidth" in line:
            break
        if not columns and "DST" in line:
            columns = [(k, int(i)) for k, i in _TB_DEVICE.findall(line)]
            continue
        if _TB_UNI_END.search(line):
            return columns, rows, True
        m = _TB_ROW.match(line)
        if m and columns:
            vals = m.group("vals").split()
            if len(vals) != len(columns):
                raise ParseError(f"TransferBench row with {len(vals)} values for "
                                 f"{len(columns)} columns: {line.strip()!r}")  # fmt: skip
            try:
                nums = [None if v == "N/A" else float(v) for v in vals]
            except ValueError:
                raise ParseError(f"TransferBench row not understood: {line.strip()!r}") from None
            rows[((m.group("kind"), int(m.group("i"))), m.group("dir"))] = nums
    return columns, rows, False


def _gpu_pairs(columns: list[tuple[str, int]], rows: dict, direction: str) -> dict:
    """(src GPU, dst GPU) -> GB/s over every off-diagonal GPU pair; raise if any is missing."""
    gpus = [c for c in columns if c[0] == "GPU"]
    out: dict[tuple[int, int], float] = {}
    for src in gpus:
        row = rows.get((src, direction))
        if row is None:
            raise ParseError(f"TransferBench table has no {src[0]} {src[1]:02d} {direction} row")
        for col, dst in enumerate(columns):
            if dst[0] == "GPU" and dst != src and row[col] is not None:
                out[(src[1], dst[1])] = float(row[col])  # type: ignore[arg-type]
    return out


def parse_transferbench(text: str) -> ToolResult:
    """The p2p preset's GPU-to-GPU bandwidths (see the module docstring)."""
    lines = text.splitlines()
    columns, uni, closed = _tb_table(lines, _TB_UNI)
    if not columns:
        raise ParseError(f"no TransferBench '{_TB_UNI}' table (run its p2p preset)")
    if not closed:
        raise ParseError("TransferBench unidirectional table cut off (no 'Averages' line)")
    pairs = _gpu_pairs(columns, uni, "->")
    if not pairs:
        raise ParseError("TransferBench table has no GPU-to-GPU value (one GPU?)")
    out = {"unidir_gpu_min_gbps": min(pairs.values()),
           "unidir_gpu_avg_gbps": sum(pairs.values()) / len(pairs)}  # fmt: skip
    (a, b), slowest = min(pairs.items(), key=lambda kv: kv[1])
    checks = [Check("slowest GPU pair (unidirectional)", "pass", (a, b),
                    f"GPU {a} -> GPU {b} {slowest:g} GB/s")]  # fmt: skip
    bi_columns, bi, _ = _tb_table(lines, _TB_BI)
    if bi_columns:  # printed after the unidirectional table; when started, it must be whole
        both = _gpu_pairs(bi_columns, bi, "<->")
        _gpu_pairs(bi_columns, bi, "->")
        _gpu_pairs(bi_columns, bi, "<-")
        if both:
            out["bidir_gpu_min_gbps"] = min(both.values())
    return ToolResult("transferbench", tuple(checks), out)
