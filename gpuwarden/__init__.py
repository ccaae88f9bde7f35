"""gpuwarden umbrella: the `gpuwarden` CLI and the compositions that join the parts.

This package is the composition root (demo, evaluation): it may import every other package.
The parts themselves (exporter, analyzer, remediation, dashboards) only share data, plus the
leaf modules :mod:`exporter.catalog` and :mod:`common.settings`.
"""
