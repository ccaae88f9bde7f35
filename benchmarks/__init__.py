"""gpuwarden's performance suite: `make bench` / `python -m benchmarks`.

Each ``benchmarks/bench_<area>.py`` exposes ``run(quick: bool) -> list[dict]``; a row has
``name``, ``value``, ``unit`` and ``note``. Absolute times are not comparable between runs on
shared machines, so every benchmark also measures its baseline in the same run and reports
the ratio.
"""
