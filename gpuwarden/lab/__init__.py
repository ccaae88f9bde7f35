"""The test bench: the offline evaluation (``gpuwarden evaluate``) and the Slurm lab used by
the end-to-end tests and the benchmarks. Imports the parts; no part imports it."""
