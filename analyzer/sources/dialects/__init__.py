"""Other exporters' series, read as the catalogue's (architecture decision 16).

Edge of the analyzer, beside :mod:`analyzer.sources.queries`: one small reader per dialect
turns foreign series into catalogue names, units and ``node`` identity before anything else
sees them; detectors never see a foreign name.

- :mod:`.identity`: which node a foreign series belongs to (``node``, else ``Hostname`` /
  ``hostname``, else the host part of ``instance``; an optional site mapping);
- :mod:`.dcgm`: NVIDIA dcgm-exporter (every naming generation :mod:`.generations` knows),
  with its last-XID gauge decoded into XID events and vanished GPUs read as lost;
- :mod:`.amd`: AMD's ROCm Device Metrics Exporter (DME): its field names behind any prefix,
  its AFID gauge decoded into RAS events, XGMI traffic per link, violation residency as
  throttle reasons (:mod:`.amd_coverage`: what DME cannot show, for coverage);
- :mod:`.node_exporter`: Prometheus node_exporter's ``node_infiniband_*`` series;
- :mod:`.discover`: which dialects a Prometheus holds (at start, and again every hour);
- :mod:`.coverage`: what each detector can judge with the dialects present, and what not.
"""

from __future__ import annotations

NATIVE = "gpuwarden"
DCGM = "dcgm-exporter"
AMD = "amd-dme"  # AMD's ROCm Device Metrics Exporter
NODE_EXPORTER = "node_exporter"
