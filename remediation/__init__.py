"""gpuwarden remediation."""
