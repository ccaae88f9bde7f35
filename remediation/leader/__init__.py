"""One active remediation instance among several: a leader lease with fail-stop (issue 33).

Remediation's guards are fleet-wide (budgets, rate limit, storm breaker, the journal's dedup),
so exactly one instance may act. With ``--leader-elect`` more instances can run: the one that
holds the lease builds the service and acts; the others wait as standbys (``standby``),
answering ``/healthz`` but not ``/readyz`` and refusing webhooks with 503, so Alertmanager
retries them on the leader. ``elector`` is the election itself (pure, on any
:class:`~remediation.leader.elector.LeaseStore`); ``kube`` keeps the lease in a Kubernetes
Lease object, ``directory`` in a file under ``flock`` on storage the hosts share; ``keeper``
renews it and stops the process the moment leadership can no longer be proven, before any
other instance may take the lease.
"""
