"""The relay: capture journal changes into the outbox, then deliver the outbox in order.

Where it sits: beside the worker in the remediation service (its own task, so a slow or
dead receiver never delays a decision), or alone (``python -m remediation.events``) on the
same journal; run one relay per journal. Each cycle: capture (capture.py), then rounds of
delivery of each partition's head (outbox.heads) until nothing is due. The outcome of a
send decides:

- 2xx: delivered (committed before the next event of that node is sent);
- 400, 413, 415, 422: the receiver refuses this event as it is; dead-lettered at once;
- anything else (no answer, 5xx, 408, 429, 401/403/404): a receiver or configuration
  problem, not the event's: the event waits with exponential backoff (equal jitter) and the
  whole sink is held back as long, so a down receiver gets one try per backoff, not one per
  node. With ``max_attempts`` set, an event that failed that often is dead-lettered.

A restart resumes from the outbox: pending rows keep their attempts and next try time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from typing import Any

from remediation.events import capture, cloudevent, otlp, outbox
from remediation.events.config import EventsConfig
from remediation.events.sink import Reply, Sink
from remediation.journal import Journal

log = logging.getLogger("gpuwarden.remediation.events")
POISON = frozenset({400, 413, 415, 422})
PRUNE_EVERY_S = 600.0


def backoff(attempt: int, base_s: float, max_s: float, u: float) -> float:
    """The wait after the ``attempt``-th failure (1, 2, ...): base * 2^(attempt-1), capped,
    with equal jitter (half fixed, half ``u`` in [0, 1))."""
    d = min(max_s, base_s * 2 ** min(max(attempt - 1, 0), 60))
    return d / 2 + d / 2 * u


def wire(row: outbox.Row, cfg: EventsConfig) -> tuple[dict[str, str], bytes]:
    """The HTTP request for one outbox row: its position as ``sequence``, then the mode
    (CloudEvents binary or structured, or an OTLP log record)."""
    event = {**row.event, "sequence": cloudevent.sequence(row.seq)}
    event.setdefault("source", cfg.source)
    if cfg.mode == "otlp":
        return otlp.logs(event, time.time_ns())
    return cloudevent.MODES[cfg.mode](event)


def reason(reply: Reply) -> str:
    return "connection" if reply.status is None else str(reply.status)


class Relay:
    def __init__(
        self,
        journal: Journal,
        cfg: EventsConfig,
        sink: Sink,
        now: Callable[[], float] = time.time,
        metrics: Any = None,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.journal, self.cfg, self.sink, self.now = journal, cfg, sink, now
        self.metrics, self.rng = metrics, rng
        self.gate_until = 0.0  # the sink is held back until then (after a sink failure)
        self.streak = 0  # sink failures in a row
        self.last_prune = 0.0
        self.wake = asyncio.Event()
        self.last_error = ""
        self.stopping = False  # set by the service's shutdown: no further send

    def capture(self) -> int:
        total, more = 0, True
        while more:
            n, more = capture.capture(self.journal, self.cfg.source, self.cfg.keep, self.now)
            total += n
        return total

    def _record(self, row: outbox.Row, reply: Reply, now: float) -> bool:
        """Record one send's outcome; True when the sink itself is failing (hold it back)."""
        if reply.ok:
            outbox.delivered(self.journal, row.seq, now)
            self.streak = 0
            if self.metrics is not None:
                self.metrics.events_delivered.labels(row.kind).inc()
            return False
        if self.metrics is not None:
            self.metrics.events_failures.labels(reason(reply)).inc()
        attempt = row.attempts + 1
        refused = reply.status in POISON
        dead = refused or (0 < self.cfg.max_attempts <= attempt)
        wait = 0.0 if refused else backoff(attempt, self.cfg.backoff_s, self.cfg.backoff_max_s,
                                           self.rng())  # fmt: skip
        error = f"{reason(reply)} {reply.error}".strip()
        outbox.failed(self.journal, row.seq, error, now + wait, dead, now)
        self.last_error = error
        log.warning("event %s (%s): %s%s", row.id, row.partition or "cluster", error,
                    " (dead-lettered)" if dead else f" (next try in {wait:.1f}s)")  # fmt: skip
        if refused:
            return False
        self.streak += 1
        self.gate_until = now + backoff(self.streak, self.cfg.backoff_s, self.cfg.backoff_max_s,
                                        self.rng())  # fmt: skip
        return True

    def deliver(self) -> int:
        """Rounds of heads until none is due or the sink is held back; events delivered."""
        sent = 0
        while self.now() >= self.gate_until and not self.stopping:
            heads = outbox.heads(self.journal, self.now())
            if not heads:
                break
            for row in heads:
                if self.stopping:  # what is not sent now goes out after the restart
                    return sent
                headers, body = wire(row, self.cfg)
                reply = self.sink.send(headers, body)
                sent += int(reply.ok)
                if self._record(row, reply, self.now()):
                    return sent
        return sent

    def cycle(self) -> tuple[int, int]:
        """Capture, deliver, prune now and then; (captured, delivered)."""
        captured = self.capture()
        delivered = self.deliver()
        now = self.now()
        if now - self.last_prune >= PRUNE_EVERY_S:
            outbox.prune(self.journal, now - self.cfg.retention_s)
            self.last_prune = now
        self.refresh()
        return captured, delivered

    def refresh(self) -> None:
        """Gauges from the outbox (the read-only connection; they survive a restart)."""
        if self.metrics is None:
            return
        counts = outbox.counts(self.journal)
        self.metrics.events_pending.set(sum(counts[outbox.PENDING].values()))
        for kind in cloudevent.KINDS:
            self.metrics.events_dead.labels(kind).set(counts[outbox.DEAD].get(kind, 0))
        oldest = outbox.oldest_pending(self.journal)
        self.metrics.events_oldest.set(0.0 if oldest is None else max(0.0, self.now() - oldest))

    async def run(self) -> None:
        """The service's loop: a cycle every ``interval_s`` (sooner when woken)."""
        while True:
            try:
                await asyncio.to_thread(self.cycle)
            except Exception:  # a bug or a locked journal must not end the relay
                log.exception("events relay cycle failed")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.cfg.interval_s):
                    await self.wake.wait()
            self.wake.clear()
