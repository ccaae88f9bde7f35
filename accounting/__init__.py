"""Failure accounting: what failures cost, per incident, job, GPU model and component.

Where it sits: after remediation has journalled incidents and actions. ``ledger`` turns the
journal (plus Prometheus evidence behind a Protocol) into incident records; ``interchange``
reads and writes them as ``gpuwarden.incident/v1`` and ``gpuwarden.exposure/v1`` JSON lines;
``report`` computes MTBF, lemons, GPU-hours lost and ETTR as a plain dict; ``text`` and
``html`` present it; ``metrics`` exports the live ``gpuwarden_accounting_*`` series.
"""
