"""How a step stops an action short of ``done``: the exceptions the executor turns into an
action's state (deferred, waiting, paused, superseded). Their own module so the sagas the
executor drives (``remediation/gpureset/saga.py``) raise them without importing the
executor: the executor depends on its sagas, never the reverse."""

from __future__ import annotations


class Deferred(Exception):
    """The action waits for a condition (an idle node); it stays in the journal as deferred."""


class Waiting(Exception):
    """A wait step's condition does not hold yet and its deadline has not passed."""


class Paused(Exception):
    """The pause switch is on: no side effect now; the action resumes after ``resume``."""


class IntakeClosed(Paused):
    """The storm breaker is open or the service is stopping: parked like a pause."""


class Superseded(Exception):
    """The node was released (a new epoch) after this action was decided."""
