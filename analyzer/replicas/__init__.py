"""Analyzer replicas that share the fleet by comparison domain (issue 33, ARCHITECTURE 20).

``ownership`` (which replica judges which domains: a consistent hash), ``slicing`` (a
replica's part of a window), ``membership`` (who is alive and who leads: Kubernetes Leases or
a shared directory, behind one Protocol) and ``coordinator`` (the per-cycle protocol that hands
domains over without judging one twice or skipping one for more than a cycle).
"""
