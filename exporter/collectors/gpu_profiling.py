"""Profiling fields (dcgm's DCP metrics) through NVML GPM: graphics engine, SM, tensor and FP
pipes, DRAM and PCIe activity per GPU.

Called by :class:`exporter.collectors.gpu.GpuCollector` once per healthy GPU and cycle. GPM
(GPU Performance Monitoring, NVML 12.x, Hopper and newer) works on pairs of samples: each
cycle takes a new sample, asks ``nvmlGpmMetricsGet`` for the metrics between the previous one
and it, and frees the older. The first cycle after start (or after a GPU comes back) has no
pair, so these series appear from the second cycle on.

Where GPM cannot serve (pre-Hopper GPUs, a driver without GPM) a DCGM host engine may
(``--dcgm-hostengine``, :mod:`exporter.sources.dcgm`); where neither can, the series are absent and
``gpuwarden_exporter_field_unavailable{metric,reason}`` says why, once per GPU and metric:
absence must be explainable on a dashboard, not mistaken for idleness.
NVML GPM: https://docs.nvidia.com/deploy/nvml-api/group__GPM.html
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import pynvml

from exporter import catalog as c
from exporter.catalog import MetricDef
from exporter.collectors.gpu_fields import GpuRead
from exporter.sources.dcgm import DcgmProfiling, DcgmUnavailableError
from exporter.sources.protocols import NvmlApi

MIB = 1048576
# GPM metric -> (catalogue metric, factor from GPM's unit to the catalogue's).
GPM_METRICS: tuple[tuple[int, MetricDef, float], ...] = (
    (pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL, c.GPU_GRAPHICS_ACTIVE, 0.01),  # percent -> ratio
    (pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL, c.GPU_TENSOR_ACTIVE, 0.01),
    (pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL, c.GPU_DRAM_ACTIVE, 0.01),
    (pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC, c.GPU_PCIE_TRANSMIT_RATE, MIB),  # MiB/s -> B/s
    (pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC, c.GPU_PCIE_RECEIVE_RATE, MIB),
    (pynvml.NVML_GPM_METRIC_SM_UTIL, c.GPU_SM_ACTIVE, 0.01),
    (pynvml.NVML_GPM_METRIC_SM_OCCUPANCY, c.GPU_SM_OCCUPANCY, 0.01),
    (pynvml.NVML_GPM_METRIC_FP64_UTIL, c.GPU_FP64_PIPE_ACTIVE, 0.01),
    (pynvml.NVML_GPM_METRIC_FP32_UTIL, c.GPU_FP32_PIPE_ACTIVE, 0.01),
    (pynvml.NVML_GPM_METRIC_FP16_UTIL, c.GPU_FP16_PIPE_ACTIVE, 0.01),
)
GPM_UNSUPPORTED = "gpm_unsupported"  # pre-Hopper, or a driver/binding without GPM
GPM_FAILED = "gpm_error"  # GPM exists but the read failed (counted in read_errors too)
DCGM_FAILED = "dcgm_unavailable"  # no GPM, and the DCGM host engine did not answer
DCGM_TTL = 0.5  # one host-engine read serves every GPU of a cycle


def gpm_metrics(
    nvml: Any, s1: Any, s2: Any, table: tuple[tuple[int, MetricDef, float], ...]
) -> list[tuple[MetricDef, float]]:
    """One ``nvmlGpmMetricsGet`` over the pair (s1, s2): (metric, value) per answered entry."""
    request = getattr(nvml, "c_nvmlGpmMetricsGet_t", pynvml.c_nvmlGpmMetricsGet_t)()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(table)
    request.sample1, request.sample2 = s1, s2
    for i, (mid, _, _) in enumerate(table):
        request.metrics[i].metricId = mid
    answer = nvml.nvmlGpmMetricsGet(request)
    out = []
    for i, (_, metric, factor) in enumerate(table):
        m = answer.metrics[i]
        if m.nvmlReturn == pynvml.NVML_SUCCESS:
            out.append((metric, float(m.value) * factor))
    return out


class GpmProfiler:
    """Keeps the previous GPM sample of each GPU (by UUID) between cycles."""

    def __init__(
        self,
        nvml: NvmlApi,
        dcgm: DcgmProfiling | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.nvml = nvml
        self.dcgm = dcgm
        self._clock = clock
        self._dcgm_at = -1e18
        self._dcgm_values: dict[str, list[tuple[MetricDef, float]]] | None = None
        self._prev: dict[str, Any] = {}
        self._absent: dict[str, str] = {}  # uuid -> reason GPM cannot serve this GPU

    def read(self, g: GpuRead, uuid: str) -> None:
        """Append this GPU's profiling samples (or the reasons they are absent) to ``g.out``."""
        reason = self._absent.get(uuid)
        if reason is None and uuid not in self._prev:
            reason = self._probe(g, uuid)
        if reason is None:
            reason = self._sample(g, uuid)
        if reason == GPM_UNSUPPORTED and self.dcgm is not None:
            reason = self._from_dcgm(g)
        if reason is not None:
            self._unavailable(g, reason)

    def _from_dcgm(self, g: GpuRead) -> str | None:
        """DCP fields of this GPU from the DCGM host engine, or the reason they are absent."""
        assert self.dcgm is not None
        if self._clock() - self._dcgm_at > DCGM_TTL:
            self._dcgm_at = self._clock()
            try:
                self._dcgm_values = self.dcgm.latest()
            except DcgmUnavailableError:
                self._dcgm_values = None
                g.r.errors.add("dcgm")
        if self._dcgm_values is None:
            return DCGM_FAILED
        for metric, value in self._dcgm_values.get(g.lv[1], []):
            g.gauge(metric, value)
        return None

    def _sample(self, g: GpuRead, uuid: str) -> str | None:
        sample = g.r.read("gpm", self._take, g.handle)
        if sample is None:
            self._forget(uuid)
            if g.r.skip("gpm"):
                self._absent[uuid] = GPM_UNSUPPORTED
                return GPM_UNSUPPORTED
            return GPM_FAILED
        prev, self._prev[uuid] = self._prev.get(uuid), sample
        if prev is None:
            return None  # the first of a pair: values from the next cycle on
        try:
            values = g.r.read("gpm", self._metrics, prev, sample)
        finally:
            self._free(prev)
        if values is None:
            return GPM_FAILED
        for metric, value in values:
            g.gauge(metric, value)
        return None

    def close(self) -> None:
        for uuid in list(self._prev):
            self._forget(uuid)

    def forget(self, uuid: str) -> None:
        """A GPU went away or was replaced: drop its sample (a new pair starts later)."""
        self._forget(uuid)
        self._absent.pop(uuid, None)

    # ------------------------------------------------------------------ internals
    def _probe(self, g: GpuRead, uuid: str) -> str | None:
        """None when GPM can serve this GPU, else the reason (remembered when permanent)."""
        query = getattr(self.nvml, "nvmlGpmQueryDeviceSupport", None)
        support = None if query is None else g.r.read("gpm_support", query, g.handle)
        if support is not None and support.isSupportedDevice:
            return None
        if query is None or support is not None or g.r.skip("gpm_support"):
            self._absent[uuid] = GPM_UNSUPPORTED
            return GPM_UNSUPPORTED
        return GPM_FAILED  # a transient failure (counted by the reader): probe again next cycle

    def _take(self, handle: Any) -> Any:
        sample = self.nvml.nvmlGpmSampleAlloc()
        try:
            return self.nvml.nvmlGpmSampleGet(handle, sample)
        except Exception:
            self._free(sample)
            raise

    def _metrics(self, s1: Any, s2: Any) -> list[tuple[MetricDef, float]]:
        return gpm_metrics(self.nvml, s1, s2, GPM_METRICS)

    def _unavailable(self, g: GpuRead, reason: str) -> None:
        node, gpu = g.lv[0], g.lv[1]
        for _, metric, _ in GPM_METRICS:
            g.out.append(c.FIELD_UNAVAILABLE.make(1.0, node, gpu, metric.name, reason))

    def _forget(self, uuid: str) -> None:
        prev = self._prev.pop(uuid, None)
        if prev is not None:
            self._free(prev)

    def _free(self, sample: Any) -> None:
        # freeing is best effort: the driver reclaims samples at shutdown
        with contextlib.suppress(pynvml.NVMLError):
            self.nvml.nvmlGpmSampleFree(sample)
