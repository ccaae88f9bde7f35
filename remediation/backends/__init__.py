"""Scheduler backends behind one protocol (``base.Backend``): Slurm, Kubernetes, dry-run."""
