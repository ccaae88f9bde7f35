"""Events out: findings, decisions, actions (and maintenance steps) as CloudEvents 1.0 over
HTTP, from a durable outbox in the remediation journal (docs/remediation.md#events-out)."""
