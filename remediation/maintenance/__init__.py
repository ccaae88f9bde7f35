"""Rolling maintenance: an operation (a command, a Slurm reboot) applied to a node set in
waves through the same rails as fault handling (docs/maintenance.md).

Layout, pure in the middle and I/O at the edges:

- ``model``: the frozen nouns (Spec, Run, NodeRun, World, Effect) and spec parsing;
- ``planner``: which nodes, in which waves, and what the budgets allow (pure);
- ``machine``: one tick of a run, from what the world shows to effects (pure);
- ``store``: the run in the journal (SQLite), and the maintenance events in its outbox;
- ``operations``: the operation's edge (a detached command, ``scontrol reboot``);
- ``runner``: gathers the world, applies the effects, persists (the only I/O loop);
- ``http`` / ``cli``: ``/api/v1/maintenance`` and ``gpuwarden maintenance``.
"""
