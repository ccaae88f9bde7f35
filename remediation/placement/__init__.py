"""Placement tiers: soft actions that de-prefer a node (or GPU) instead of taking it out.

Decided once here (pure logic in ``tiers`` and ``budget``, state in ``store``), projected
per scheduler (``slurm``: node Weight + Extra; ``kubernetes``: taints + labels) and
reconciled every tick. Soft actions fail open: what gpuwarden stops maintaining drifts
back to neutral, never to less capacity.
"""
