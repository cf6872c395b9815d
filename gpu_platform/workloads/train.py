"""Demo training run: a tiny numpy linear model trained by gradient descent for N steps.

Checkpoints every K steps into the checkpoint directory (`$GPU_PLATFORM_CHECKPOINT_DIR`),
resumes from the newest checkpoint on start, and on SIGTERM or SIGINT (preemption, timeout, a
terminated run) writes a checkpoint at
the current step and exits with status 143, so a preempted run loses at most one interval (none
when the signal is handled; one interval if the process is killed outright).

    python -m gpu_platform.workloads.train --steps 200 --checkpoint-every 20 --out-dir out/

As one process of a multi-node gang (the rendezvous env: `NNODES` > 1, `NODE_RANK`,
`MASTER_ADDR`, `MASTER_PORT`, as a gang's pods on a cluster and its processes on one machine get
them) it is data parallel, with CPU stand-ins for the collective: rank r trains on every NNODES-th
sample from r, checkpoints under `<checkpoint dir>/rank-<r>` (rank 0: the directory itself),
writes its part (`parts/rank-<r>.npz`: weights and sample count) and sends it to rank 0 over TCP
at MASTER_ADDR:MASTER_PORT; rank 0 averages the parts (weighted by samples) into the model,
reports the loss of that model on all the data, and alone writes `result.json`.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import signal
import socket
import struct
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
    gang_rank,
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


RENDEZVOUS_TIMEOUT_S = 300.0
_HEADER = struct.Struct("!IQ")  # rank, payload bytes


def _part_bytes(w: np.ndarray, samples: int) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, w=w, samples=np.array(samples))
    return buf.getvalue()


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = conn.recv(min(1 << 20, n - got))
        if not chunk:
            raise ConnectionError(f"peer closed after {got} of {n} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def listen(port: int) -> socket.socket:
    """Rank 0's end of the rendezvous, bound at start so the other ranks find it whenever they finish."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("", port))
    server.listen()
    return server


def gather(server: socket.socket, nodes: int, timeout_s: float) -> dict[int, bytes]:
    """The parts of ranks 1..nodes-1 (rank -> npz bytes), each sent once over its own connection."""
    parts: dict[int, bytes] = {}
    deadline = time.monotonic() + timeout_s
    while len(parts) < nodes - 1:
        server.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            conn, _ = server.accept()
        except TimeoutError:
            missing = sorted(set(range(1, nodes)) - set(parts))
            raise TimeoutError(f"rank 0: no part from rank(s) {missing} within {timeout_s:g}s") from None
        with conn:
            conn.settimeout(timeout_s)
            rank, size = _HEADER.unpack(_recv_exact(conn, _HEADER.size))
            parts[rank] = _recv_exact(conn, size)
    return parts


def send_part(addr: str, port: int, rank: int, payload: bytes, timeout_s: float) -> None:
    """Send this rank's part to rank 0, retrying until it listens or the timeout passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((addr, port), timeout=max(0.1, deadline - time.monotonic())) as conn:
                conn.sendall(_HEADER.pack(rank, len(payload)) + payload)
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


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
    gang = gang_rank()
    rank, nodes = gang or (0, 1)
    server = listen(int(os.environ["MASTER_PORT"])) if gang and rank == 0 else None
    with session("train", args) as s:
        ckpt_dir = checkpoint_dir(args.checkpoint_dir, s.out_dir)
        if rank:
            ckpt_dir = ckpt_dir / f"rank-{rank}"
            ckpt_dir.mkdir(parents=True, exist_ok=True)
        x_all, y_all = make_data(csv_list(args.dataset_ids), args.seed)
        x, y = x_all[rank::nodes], y_all[rank::nodes]
        if gang:
            s.log(f"rank {rank} of {nodes} (rendezvous {os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}, "
                  f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}): {len(y)} of {len(y_all)} samples")
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
            grad = 2.0 / len(y) * x.T @ (x @ w - y)
            w = w - args.lr * grad
            step += 1
            loss = float(np.mean((x @ w - y) ** 2))
            if step % args.checkpoint_every == 0 or step == args.steps:
                last_ckpt = save_checkpoint(ckpt_dir, step, w, loss)
                s.log(f"step {step} loss {loss:.6f} checkpoint {last_ckpt.name}")
            if args.step_seconds:
                time.sleep(args.step_seconds)
        parts: dict[str, str] = {}
        if gang:
            part = _part_bytes(w, len(y))
            part_path = s.out_dir / "parts" / f"rank-{rank}.npz"
            write_atomic(part_path, part)
            timeout_s = float(os.environ.get("DEMO_RENDEZVOUS_TIMEOUT", RENDEZVOUS_TIMEOUT_S))
            if rank:
                send_part(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), rank, part, timeout_s)
                s.log(f"rank {rank}: trained {args.steps} steps on its shard, sent its part to rank 0")
                s.report({"steps_done": step, "rank": rank, "nodes": nodes, "part": str(part_path),
                          "part_digest": file_digest(part_path)})
                return 0
            assert server is not None
            with server:
                received = {0: part, **gather(server, nodes, timeout_s)}
            weights, counts = [], []
            for r in sorted(received):
                with np.load(io.BytesIO(received[r])) as got:
                    weights.append(got["w"])
                    counts.append(int(got["samples"]))
                parts[f"rank-{r}"] = "sha256:" + hashlib.sha256(received[r]).hexdigest()
            w = np.average(np.stack(weights), axis=0, weights=counts)
            loss = float(np.mean((x_all @ w - y_all) ** 2))
            s.log(f"rank 0: averaged the parts of {nodes} ranks ({sum(counts)} samples)")
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
                **({"nodes": nodes, "parts": parts} if gang else {}),
                "outputs": {"model": str(model_path)},
                "output_digests": {"model": file_digest(model_path)},
            }
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
