"""``nvidia-smi -q`` text, read: the reset job's verification output (``verify_command``,
default ``nvidia-smi -q -i {index}``) as the GPU blocks it holds, each a tree of sections
and ``key : value`` fields by indentation. Pure; the verdict (``verdict.py``) judges it.

The layout is the one every driver branch prints (R470 to R570 recorded under
``fixtures/gpureset/``): a header (``Driver Version``, ``Attached GPUs``), then one block per
GPU opened by ``GPU <PCI bus id>`` at the left margin; a line without `` : `` opens a section
(``Remapped Rows``), a field is ``Name  : value`` (``Remapped Rows : N/A`` where the GPU has
no such feature). Keys repeat across sections (``Pending`` under ``MIG Mode``, ``ECC Mode``,
``Remapped Rows``), so a field is only ever read through its section.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

GPU_LINE = re.compile(r"^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
FIELD = re.compile(r"^(?P<key>\S.*?)\s*:(?:\s+(?P<value>.*))?$")


@dataclass
class Section:
    """A section: its fields (the last one wins where a key repeats) and sub-sections."""

    fields: dict[str, str] = field(default_factory=dict)
    sections: dict[str, Section] = field(default_factory=dict)


@dataclass(frozen=True)
class Report:
    driver: str  # "" when the header was not printed
    gpus: tuple[tuple[str, Section], ...]  # (PCI bus id, its block)


def parse(text: str) -> Report:
    driver, gpus = "", []
    stack: list[tuple[int, Section]] = []  # (indent of the section's own fields, section)
    for raw in text.splitlines():
        line = raw.rstrip()
        body = line.lstrip()
        if not body or body.startswith("="):
            continue
        indent = len(line) - len(body)
        if GPU_LINE.match(body):
            block = Section()
            gpus.append((body[4:], block))
            stack = [(-1, block)]
            continue
        m = FIELD.match(body)
        if not stack:  # the header
            if m and m.group("key") == "Driver Version":
                driver = (m.group("value") or "").strip()
            continue
        while len(stack) > 1 and indent <= stack[-1][0]:
            stack.pop()
        parent = stack[-1][1]
        if m is None:  # a section opens; its fields sit deeper than its own line
            child = Section()
            parent.sections[body] = child
            stack.append((indent, child))
        else:
            parent.fields[m.group("key")] = (m.group("value") or "").strip()
    return Report(driver, tuple(gpus))
