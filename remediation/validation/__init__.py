"""Active validation before a quarantined node is released: suites of checks (DCGM
diagnostics, NCCL bus bandwidth, nvbandwidth, IB loopback) and the parsers of their outputs."""
