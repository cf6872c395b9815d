"""Demo label batch: an "auto-labeler" assigns a class and confidence to each frame; labels at or
above the confidence threshold are accepted, the rest rejected for human review.

    python -m gpu_platform.workloads.label --frames 500 --threshold 0.6 --out-dir out/
"""

from __future__ import annotations

import json
import sys

import numpy as np

from gpu_platform.workloads._common import (
    base_parser,
    csv_list,
    file_digest,
    session,
    stable_seed,
    write_atomic,
)

CLASSES = ("lane_marking", "crosswalk", "stop_line", "arrow", "none")


def label_frames(frames: int, seed: int, dataset_ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Softmax over per-class logits of a tiny random projection of synthetic frame features."""
    rng = np.random.default_rng(stable_seed(seed, *sorted(dataset_ids)))
    feats = rng.normal(size=(frames, 16))
    proj = rng.normal(size=(16, len(CLASSES)))
    logits = feats @ proj
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    return probs.argmax(axis=1), probs.max(axis=1)


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=500)
    p.add_argument("--threshold", type=float, default=0.6)
    p.add_argument("--dataset-ids", default="")
    p.add_argument("--labeler-id", default="demo-labeler")
    args = p.parse_args(argv)
    with session("label", args) as s:
        cls, conf = label_frames(args.frames, args.seed, csv_list(args.dataset_ids))
        accepted = conf >= args.threshold
        labels_path = s.out_dir / "labels.jsonl"
        lines = [
            json.dumps({"frame": i, "class": CLASSES[c], "confidence": round(float(p_), 4), "accepted": bool(a)})
            for i, (c, p_, a) in enumerate(zip(cls, conf, accepted, strict=True))
        ]
        write_atomic(labels_path, ("\n".join(lines) + "\n").encode())
        n_acc = int(accepted.sum())
        per_class = {name: int(np.sum((cls == i) & accepted)) for i, name in enumerate(CLASSES)}
        s.log(f"labeled {args.frames} frames with {args.labeler_id}: {n_acc} accepted, {args.frames - n_acc} rejected")
        s.report(
            {
                "frames": args.frames,
                "accepted": n_acc,
                "rejected": args.frames - n_acc,
                "acceptance_rate": n_acc / max(args.frames, 1),
                "accepted_by_class": per_class,
                "labeler_id": args.labeler_id,
                "outputs": {"labels": str(labels_path)},
                "output_digests": {"labels": file_digest(labels_path)},
            }
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
