"""Sources: the edges where the exporter touches hardware (NVML, sysfs, kernel log, job map)."""
