"""Demo training run: a tiny numpy linear model trained by gradient descent for N steps.

Checkpoints every K steps into the checkpoint directory (`$GPU_PLATFORM_CHECKPOINT_DIR`),
resumes from the newest checkpoint on start, and on SIGTERM or SIGINT (preemption, timeout, a
terminated run) writes a checkpoint at
the current step and exits with status 143, so a preempted run loses at most one interval (none
when the signal is handled; one interval if the process is killed outright).

    python -m gpu_platform.workloads.train --steps 200 --checkpoint-every 20 --out-dir out/
"""

from __future__ import annotations

import io
import re
import signal
import sys
import time
from pathlib import Path

import numpy as np

from gpu_platform.workloads._common import (
    EXIT_PREEMPTED,
    base_parser,
    checkpoint_dir,
    csv_list,
    file_digest,
    session,
    stable_seed,
    write_atomic,
)

_CKPT = re.compile(r"^ckpt-(\d{8})\.npz$")
FEATURES = 8
SAMPLES = 256
KEEP_CHECKPOINTS = 3


def make_data(dataset_ids: list[str], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic regression data determined by the dataset ids (the "snapshot") and the seed."""
    rng = np.random.default_rng(stable_seed(seed, *sorted(dataset_ids)))
    x = rng.normal(size=(SAMPLES, FEATURES))
    w_true = rng.normal(size=FEATURES)
    y = x @ w_true + 0.05 * rng.normal(size=SAMPLES)
    return x, y


def latest_checkpoint(ckpt_dir: Path) -> Path | None:
    found = sorted(p for p in ckpt_dir.glob("ckpt-*.npz") if _CKPT.match(p.name))
    return found[-1] if found else None


def save_checkpoint(ckpt_dir: Path, step: int, w: np.ndarray, loss: float) -> Path:
    buf = io.BytesIO()
    np.savez(buf, w=w, step=np.array(step), loss=np.array(loss))
    path = ckpt_dir / f"ckpt-{step:08d}.npz"
    write_atomic(path, buf.getvalue())
    for old in sorted(p for p in ckpt_dir.glob("ckpt-*.npz") if _CKPT.match(p.name))[:-KEEP_CHECKPOINTS]:
        old.unlink(missing_ok=True)
    return path


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--checkpoint-every", type=int, default=20)
    p.add_argument("--step-seconds", type=float, default=0.0, help="sleep per step (to make preemption observable)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--dataset-ids", default="", help="comma-separated dataset snapshot ids")
    p.add_argument("--checkpoint-dir", default=None)
    args = p.parse_args(argv)

    stop = {"signal": None}

    def _on_term(signum, _frame):
        stop["signal"] = signum

    # SIGTERM: Kubernetes preemption and the local executor's timeout; SIGINT: the local executor
    # forwarding a terminated Dagster run. Both mean "checkpoint now and exit for requeue".
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
    with session("train", args) as s:
        ckpt_dir = checkpoint_dir(args.checkpoint_dir, s.out_dir)
        x, y = make_data(csv_list(args.dataset_ids), args.seed)
        w = np.zeros(FEATURES)
        start = 0
        last = latest_checkpoint(ckpt_dir)
        if last is not None:
            with np.load(last) as ck:
                w, start = ck["w"].copy(), int(ck["step"])
            s.log(f"resumed from {last.name} at step {start}")
        loss = float(np.mean((x @ w - y) ** 2))
        last_ckpt = last
        step = start
        while step < args.steps:
            if stop["signal"] is not None:
                last_ckpt = save_checkpoint(ckpt_dir, step, w, loss)
                name = signal.Signals(stop["signal"]).name
                s.log(f"{name} at step {step}: checkpointed {last_ckpt.name}; exiting for requeue")
                s.report(
                    {"steps_done": step, "resumed_from_step": start, "checkpoint_uri": last_ckpt.as_uri(), "preempted": True},
                    exit_status=EXIT_PREEMPTED,
                )
                return EXIT_PREEMPTED
            grad = 2.0 / SAMPLES * x.T @ (x @ w - y)
            w = w - args.lr * grad
            step += 1
            loss = float(np.mean((x @ w - y) ** 2))
            if step % args.checkpoint_every == 0 or step == args.steps:
                last_ckpt = save_checkpoint(ckpt_dir, step, w, loss)
                s.log(f"step {step} loss {loss:.6f} checkpoint {last_ckpt.name}")
            if args.step_seconds:
                time.sleep(args.step_seconds)
        model_path = s.out_dir / "model.npz"
        buf = io.BytesIO()
        np.savez(buf, w=w)
        write_atomic(model_path, buf.getvalue())
        s.log(f"trained {args.steps} steps, final loss {loss:.6f}")
        s.report(
            {
                "steps_done": step,
                "resumed_from_step": start,
                "final_loss": loss,
                "checkpoint_every": args.checkpoint_every,
                "checkpoint_uri": last_ckpt.as_uri() if last_ckpt else None,
                "outputs": {"model": str(model_path)},
                "output_digests": {"model": file_digest(model_path)},
            }
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
