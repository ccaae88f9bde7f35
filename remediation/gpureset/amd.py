"""The GPU reset on AMD Instinct nodes: which nodes are AMD's, and what ``amd-smi`` says after.

The rung itself is vendor-neutral (``Engine._reset_rung``: the alert's ``reset_suffices`` label
from its fault catalogue, a ``gpu`` label, a rule allowing ``reset_gpu``); only the two commands
and the verdict differ. A node is an AMD node when its alert says ``vendor="amd"`` or the
topology gives it an AMD ``gpu_model`` ("AMD Instinct MI300X"). Reset: ``amd-smi reset
--gpureset -g <index>`` (ROCm/amdsmi ``amdsmi_cli``: ``-G, --gpureset  Reset the specified
GPU``). Verification: ``amd-smi bad-pages -g <index> --json``: it exits 0 only where the GPU
answers amdsmi again, and lists the GPU's retired, pending and unreservable pages.

The verdict reads that JSON as the CLI writes it (``amdsmi_cli/amdsmi_commands.py``
``bad_pages`` and ``amdsmi_logger.py``; fixtures/gpureset/amd/ README): a list with one object
per GPU (newer releases wrap it as ``{"gpu_data": [...]}``), keys ``gpu``, ``retired``,
``pending``, ``un_res``, each ``"No bad pages found."``, ``"N/A"`` (not supported there), one
page ``{"page_address", "page_size", "status"}`` or a list of them. Pending pages left after a
reset mean it did not complete the retirement; unreservable pages mean the GPU cannot retire
more (AMD's bad-page threshold: RMA). Fail closed: unreadable JSON, no GPU or several, a key
missing or a value of another shape fail the reset with what was found.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

NONE = ("No bad pages found.", "N/A")
VENDOR_LABEL = "vendor"


def is_amd(labels: Mapping[str, str], gpu_model: str | None) -> bool:
    if labels.get(VENDOR_LABEL, "").lower() == "amd":
        return True
    return (gpu_model or "").upper().startswith("AMD")


def _pages(value: Any) -> list[Any] | None:
    """The pages a bad-pages field lists ([] for none), or None when it is not understood."""
    if value in NONE:
        return []
    if isinstance(value, dict) and "page_address" in value:
        return [value]
    if isinstance(value, list) and all(isinstance(v, dict) for v in value):
        return value
    return None


def judge_output(text: str) -> tuple[list[str], dict[str, Any]]:
    """What in ``amd-smi bad-pages --json`` says the GPU still needs more than the reset gave;
    the fields read (evidence). Empty list: nothing pending."""
    try:
        data = json.loads(text)
    except ValueError:
        return ["amd-smi bad-pages output is not JSON"], {}
    if isinstance(data, dict):
        data = data.get("gpu_data")
    if not isinstance(data, list) or len(data) != 1 or not isinstance(data[0], dict):
        n = len(data) if isinstance(data, list) else 0
        return [f"expected one GPU in amd-smi bad-pages output, found {n}"], {}
    gpu = data[0]
    state: dict[str, Any] = {"gpu": gpu.get("gpu")}
    bad: list[str] = []
    for key, meaning in (("pending", "pages wait for retirement (a reset did not complete it)"),
                         ("un_res", "pages the GPU cannot retire (bad-page threshold: RMA)"),
                         ("retired", "")):  # fmt: skip
        pages = _pages(gpu.get(key))
        state[key] = "missing" if key not in gpu else (len(pages) if pages is not None else "?")
        if pages is None:
            bad.append(f"{key}: {gpu.get(key)!r} (unknown: not judged healthy)")
        elif pages and meaning:
            bad.append(f"{key}: {len(pages)} ({meaning})")
    return bad, state
