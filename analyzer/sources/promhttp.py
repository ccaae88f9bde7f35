"""The Prometheus HTTP API as the analyzer uses it: POST ``query_range`` / ``query``, decoded
with msgspec, with a per-request timeout, bounded retries and per-query accounting.

Edge of the analyzer (network I/O). :class:`PromHttp` is the seam: the real client is
:class:`AiohttpProm`; tests hand in a fake that returns recorded or generated bodies. A
malformed body or an error status raises :class:`~analyzer.sources.SourceError` with the
reason; a single bad sample is skipped.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec
import numpy as np

from analyzer.sources import SourceError


class PromHttp(Protocol):
    async def post(self, path: str, form: Mapping[str, str]) -> bytes: ...


class ClientError(SourceError):
    """The server rejected the query (4xx): retrying will not help."""


class AiohttpProm:
    """The real client: one aiohttp session; form-encoded POST (long node matchers fit)."""

    def __init__(self, base: str, timeout: float = 30.0, gzip: bool = False) -> None:
        self.base, self.timeout = base.rstrip("/"), timeout
        # identity unless asked: Prometheus gzips whatever the client accepts, and on a LAN
        # the CPU of compressing and inflating ~10 MB a cycle costs more than the bytes
        self.headers = {"Accept-Encoding": "gzip" if gzip else "identity"}
        self._session: Any = None

    async def post(self, path: str, form: Mapping[str, str]) -> bytes:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        url = f"{self.base}{path}"
        try:
            async with self._session.post(url, data=dict(form), headers=self.headers) as r:
                body = await r.read()
        except (aiohttp.ClientError, TimeoutError) as e:
            raise SourceError(f"{url}: {type(e).__name__}: {e}") from None
        if r.status >= 500:
            raise SourceError(f"{url}: HTTP {r.status}: {body[:200]!r}")
        if r.status >= 400 and r.status != 422:  # 400/422 carry the PromQL error in the body
            raise ClientError(f"{url}: HTTP {r.status}: {body[:200]!r}")
        return bytes(body)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


# gc=False: an answer is hundreds of thousands of these; tracked, they set off full garbage
# collections that walk every object the analyzer holds (measured: most of a 4,096-node cycle)
class _Series(msgspec.Struct, gc=False):
    metric: dict[str, str]
    values: list[tuple[float, float]] = []
    value: tuple[float, float] | None = None


class _Data(msgspec.Struct, gc=False):
    resultType: str
    result: list[_Series]


class _Body(msgspec.Struct, gc=False):
    status: str
    data: _Data | None = None
    error: str = ""
    # a success that may be incomplete: Thanos Query's partial response names each store it
    # could not reach here (a shard whose every replica is down leaves only this trace)
    warnings: list[str] = []
    # VictoriaMetrics cluster's partial response: vmselect answers success without the
    # vmstorage nodes it could not reach, saying so only here (-search.denyPartialResponse off)
    isPartial: bool = False


PARTIAL = "isPartial: the answer lacks the series of storage nodes that did not answer"


def _warnings(warnings: list[str], partial: bool) -> list[str]:
    """The answer's warnings, VictoriaMetrics' ``isPartial`` counted as one."""
    return [*warnings, PARTIAL] if partial else warnings


_DECODER = msgspec.json.Decoder(_Body, strict=False)  # strict=False: "1.5" -> 1.5


@dataclass
class Parsed:
    """One answer, flat: per series its labels and how many samples it has; every sample's
    timestamp and value in one array each (series after series); the server's warnings."""

    labels: list[dict[str, str]] = field(default_factory=list)
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    times: np.ndarray = field(default_factory=lambda: np.zeros(0))
    values: np.ndarray = field(default_factory=lambda: np.zeros(0))
    warnings: list[str] = field(default_factory=list)

    @property
    def samples(self) -> int:
        return len(self.values)

    def series_of_samples(self) -> np.ndarray:
        """For each sample, the index of its series."""
        return np.repeat(np.arange(len(self.labels)), self.counts)

    @staticmethod
    def concat(parts: list[Parsed]) -> Parsed:
        return Parsed([lab for p in parts for lab in p.labels],
                      np.concatenate([p.counts for p in parts]),
                      np.concatenate([p.times for p in parts]),
                      np.concatenate([p.values for p in parts]),
                      [w for p in parts for w in p.warnings])  # fmt: skip

    def only(self, keep: list[int]) -> Parsed:
        """The series at these indexes."""
        sel = np.zeros(len(self.labels), dtype=bool)
        sel[keep] = True
        per_sample = np.repeat(sel, self.counts)
        return Parsed([self.labels[i] for i in keep], self.counts[sel],
                      self.times[per_sample], self.values[per_sample], self.warnings)  # fmt: skip


def _flat(labels: list[dict[str, str]], pairs: list[Any]) -> Parsed:
    counts = np.fromiter(map(len, pairs), dtype=np.int64, count=len(pairs))
    flat = itertools.chain.from_iterable(itertools.chain.from_iterable(pairs))
    arr = np.fromiter(flat, dtype=float, count=2 * int(counts.sum())).reshape(-1, 2)
    bad = np.isinf(arr[:, 1])
    if bad.any():  # +-Inf is no measurement: drop it (and its place in its series' count)
        owner = np.repeat(np.arange(len(pairs)), counts)
        counts = counts - np.bincount(owner[bad], minlength=len(pairs))
        arr = arr[~bad]
    return Parsed(labels, counts, arr[:, 0].copy(), arr[:, 1].copy())


def decode(raw: bytes, what: str) -> Parsed:
    """A ``query_range`` (matrix) or ``query`` (vector) body. Fast typed path; a body it
    cannot type (``+Inf``, a malformed pair) falls back to the tolerant generic path. The
    cyclic garbage collector is paused meanwhile: the short-lived lists and tuples of a large
    answer would otherwise set off collections that walk every object the process holds."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        return _decode(raw, what)
    finally:
        if was_on:
            gc.enable()


def _decode(raw: bytes, what: str) -> Parsed:
    try:
        body = _DECODER.decode(raw)
    except msgspec.ValidationError:
        return _decode_generic(raw, what)
    except msgspec.DecodeError as e:
        raise SourceError(f"{what}: response is not JSON: {e}") from None
    if body.status != "success" or body.data is None:
        raise SourceError(f"{what}: status {body.status!r}: {elide(str(body.error))}")
    if body.data.resultType not in ("matrix", "vector"):
        raise SourceError(f"{what}: expected a matrix or vector result")
    result = body.data.result
    pairs = [s.values if s.value is None else [s.value] for s in result]
    got = _flat([s.metric for s in result], pairs)
    got.warnings = _warnings(body.warnings, body.isPartial)
    return got


def elide(error: str, head: int = 160, tail: int = 400) -> str:
    """A server's error text with its middle cut out when long: VictoriaMetrics quotes the
    whole query before the reason (a replica's node matcher runs to tens of KB), and the
    reason, at the end, is what an operator needs."""
    if len(error) <= head + tail + 40:
        return error
    return f"{error[:head]} ...[{len(error) - head - tail} characters]... {error[-tail:]}"


def _decode_generic(raw: bytes, what: str) -> Parsed:
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError as e:
        raise SourceError(f"{what}: response is not JSON: {e}") from None
    if not isinstance(body, dict):
        raise SourceError(f"{what}: response is not a JSON object")
    if body.get("status") != "success":
        raise SourceError(
            f"{what}: status {body.get('status')!r}: {elide(str(body.get('error', '')))}"
        )
    data = body.get("data")
    if not isinstance(data, dict) or data.get("resultType") not in ("matrix", "vector"):
        raise SourceError(f"{what}: expected a matrix or vector result")
    result = data.get("result")
    if not isinstance(result, list):
        raise SourceError(f"{what}: result is not a list")
    labels, pairs = [], []
    for item in result:
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
            continue
        labels.append({str(k): str(v) for k, v in item["metric"].items()})
        pairs.append(good_pairs(item.get("values") if "values" in item else [item.get("value")]))
    got = _flat(labels, pairs)
    warnings = body.get("warnings")
    got.warnings = _warnings([str(w) for w in warnings] if isinstance(warnings, list) else [],
                             body.get("isPartial") is True)  # fmt: skip
    return got


def good_pairs(values: Any) -> list[tuple[float, float]]:
    out = []
    for pair in values if isinstance(values, list) else []:
        try:
            out.append((float(pair[0]), float(pair[1])))
        except (TypeError, ValueError, IndexError):
            continue
    return out


@dataclass
class QueryStats:
    """Per query name: totals since start, and the last cycle's figures."""

    bytes: dict[str, float] = field(default_factory=dict)
    samples: dict[str, float] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    failures: dict[str, float] = field(default_factory=dict)
    warnings: dict[str, float] = field(default_factory=dict)  # answers that came with warnings
    series: dict[str, float] = field(default_factory=dict)  # last cycle, gauge
    cycle_bytes: float = 0.0
    cycle_samples: float = 0.0
    cycle_seconds: float = 0.0
    cycles: int = 0

    def add(self, name: str, nbytes: int, samples: int, seconds: float) -> None:
        for d, v in ((self.bytes, nbytes), (self.samples, samples), (self.seconds, seconds)):
            d[name] = d.get(name, 0.0) + v
        self.cycle_bytes += nbytes
        self.cycle_samples += samples

    def fail(self, name: str) -> None:
        self.failures[name] = self.failures.get(name, 0.0) + 1

    def warn(self, name: str) -> None:
        self.warnings[name] = self.warnings.get(name, 0.0) + 1


async def with_retries(call: Any, retries: int, backoff: float = 0.5) -> Any:
    """``await call()``, retried ``retries`` times on transient errors (not on a 4xx)."""
    for attempt in range(retries + 1):
        try:
            return await call()
        except ClientError:
            raise
        except SourceError:
            if attempt == retries:
                raise
            await asyncio.sleep(backoff * 2**attempt)
    raise AssertionError("unreachable")
