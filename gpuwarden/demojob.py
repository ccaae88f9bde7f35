"""A stand-in training job for the demo and the end-to-end test: counts steps, checkpoints
when gpuwarden asks (through :mod:`remediation.checkpoint`), and resumes from its checkpoint.

Run by Slurm as ``python3 -m gpuwarden.demojob STATE_DIR`` with the repository on
PYTHONPATH; it needs nothing beyond the standard library. It prints
``start step=N node=NAME`` when it (re)starts and ``checkpoint step=N node=NAME`` after
saving, so a test can read where it ran and that its step count continued.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from remediation import checkpoint


def main(argv: list[str]) -> int:
    state = Path(argv[0]) / "state.json"
    step = int(json.loads(state.read_text())["step"]) if state.exists() else 0
    node = os.environ.get("SLURMD_NODENAME", "?")
    checkpoint.install()
    print(f"start step={step} node={node}", flush=True)
    while step < 10_000_000:
        step += 1
        time.sleep(0.05)  # one "training step"
        if checkpoint.checkpoint_requested():
            tmp = state.with_suffix(".tmp")
            tmp.write_text(json.dumps({"step": step}))
            os.replace(tmp, state)
            checkpoint.acknowledge(step=step)
            print(f"checkpoint step={step} node={node}", flush=True)
            checkpoint.reset()
    return 0


def submit(sc: object, state_dir: Path) -> str:
    """Submit the job to a :class:`gpuwarden.lab.slurmlab.SlurmCluster`; returns the job id."""
    repo = Path(__file__).resolve().parents[1]
    return sc.sbatch(  # type: ignore[attr-defined, no-any-return]
        "--requeue",
        "--open-mode=append",
        f"--output={state_dir / 'job.out'}",
        "--gres=gpu:1",
        f"--export=ALL,GPUWARDEN_ACK_DIR={state_dir},PYTHONPATH={repo}",
        "--job-name=demo-training",
        "--wrap",
        f"exec python3 -m gpuwarden.demojob {state_dir}",
    )


def lines(state_dir: Path) -> list[str]:
    out = state_dir / "job.out"
    return out.read_text().splitlines() if out.exists() else []


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
