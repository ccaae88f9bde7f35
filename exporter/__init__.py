"""gpuwarden exporter: measures GPUs, InfiniBand and XIDs on one node and serves them to Prometheus.

Data flow: hardware (NVML, sysfs, kernel log) -> sources -> collectors -> snapshot -> /metrics.
Other packages may import only :mod:`exporter.catalog` from here.
"""

__version__ = "0.1.0"
