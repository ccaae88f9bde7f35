"""gpuwarden dashboards."""
