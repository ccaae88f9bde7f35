"""Log records captured without pytest's logging plugin (``make mutation`` runs pytest with
``-p no:logging``, where the ``caplog`` fixture does not exist)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


class _Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def captured(logger: str, level: int = logging.WARNING) -> Iterator[list[logging.LogRecord]]:
    """The records ``logger`` (and its children) emit at ``level`` or above inside the block."""
    log = logging.getLogger(logger)
    keep, old = _Keep(), log.level
    keep.setLevel(level)
    log.addHandler(keep)
    if log.getEffectiveLevel() > level:
        log.setLevel(level)
    try:
        yield keep.records
    finally:
        log.removeHandler(keep)
        log.setLevel(old)
