"""Demo map segmentation: tiles in, per-pixel semantic classes out.

Tiles are `.npy` arrays (H x W x 3) read from `--tile-dir`, or synthetic tiles when none is
given. Each pixel gets the class of the nearest class prototype colour. QA suites (`--suites`)
check class coverage per tile; results are written per tile and per suite.

    python -m gpu_platform.workloads.mapseg --tiles 8 --suites eval-map-qa --odd-cell odd-urban-day --out-dir out/
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np

from gpu_platform.workloads._common import (
    base_parser,
    csv_list,
    file_digest,
    session,
    stable_seed,
    write_atomic,
)

PROTOTYPES = {
    "road": (0.35, 0.35, 0.35),
    "lane_marking": (0.95, 0.95, 0.9),
    "curb": (0.6, 0.55, 0.5),
    "vegetation": (0.2, 0.6, 0.2),
    "building": (0.7, 0.3, 0.25),
}


def synthetic_tiles(n: int, size: int, seed: int, map_ids: list[str]) -> list[np.ndarray]:
    rng = np.random.default_rng(stable_seed(seed, *sorted(map_ids)))
    protos = np.array(list(PROTOTYPES.values()))
    tiles = []
    for _ in range(n):
        idx = rng.integers(0, len(protos), size=(size // 4, size // 4)).repeat(4, axis=0).repeat(4, axis=1)
        tiles.append(np.clip(protos[idx] + 0.05 * rng.normal(size=(size, size, 3)), 0, 1))
    return tiles


def segment(tile: np.ndarray) -> np.ndarray:
    protos = np.array(list(PROTOTYPES.values()))
    d = ((tile[:, :, None, :] - protos[None, None, :, :]) ** 2).sum(axis=-1)
    return d.argmin(axis=-1).astype(np.uint8)


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--tile-dir", default=None)
    p.add_argument("--tiles", type=int, default=8, help="synthetic tiles when --tile-dir is not given")
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--map-ids", default="")
    p.add_argument("--suites", default="", help="comma-separated QA suite ids")
    p.add_argument("--odd-cell", default="")
    p.add_argument("--min-classes", type=int, default=2, help="QA: classes each tile must show")
    args = p.parse_args(argv)
    with session("mapseg", args) as s:
        if args.tile_dir:
            paths = sorted(Path(args.tile_dir).glob("*.npy"))
            tiles = [np.load(t) for t in paths]
            names = [t.stem for t in paths]
        else:
            tiles = synthetic_tiles(args.tiles, args.size, args.seed, csv_list(args.map_ids))
            names = [f"tile-{i:04d}" for i in range(len(tiles))]
        classes = list(PROTOTYPES)
        hist_total = dict.fromkeys(classes, 0)
        per_tile = {}
        out = io.BytesIO()
        segmented = {}
        for name, tile in zip(names, tiles, strict=True):
            seg = segment(tile)
            segmented[name] = seg
            counts = np.bincount(seg.ravel(), minlength=len(classes))
            per_tile[name] = {c: int(n) for c, n in zip(classes, counts, strict=True)}
            for c, n in per_tile[name].items():
                hist_total[c] += n
        np.savez_compressed(out, **segmented)
        classes_path = s.out_dir / "classes.npz"
        write_atomic(classes_path, out.getvalue())
        write_atomic(s.out_dir / "tiles.json", json.dumps(per_tile, indent=2, sort_keys=True).encode())
        ok_tiles = sum(1 for h in per_tile.values() if sum(1 for n in h.values() if n) >= args.min_classes)
        suites = {}
        for suite in csv_list(args.suites):
            suites[suite] = {
                "scenarios": len(per_tile),
                "passed": ok_tiles,
                "failed": len(per_tile) - ok_tiles,
                "status": "passed" if ok_tiles == len(per_tile) else "failed",
            }
        s.log(f"segmented {len(tiles)} tiles into {len(classes)} classes; QA {ok_tiles}/{len(tiles)} tiles ok")
        s.report(
            {
                "tiles": len(tiles),
                "class_pixels": hist_total,
                "odd_cell": args.odd_cell or None,
                "suites": suites,
                "outputs": {"classes": str(classes_path)},
                "output_digests": {"classes": file_digest(classes_path)},
            }
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
