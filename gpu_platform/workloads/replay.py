"""Demo replay: evaluate scenario suites for one ODD cell and write per-suite results.

Each suite is a deterministic set of scenarios (seeded by suite, ODD cell and seed). A scenario
passes when the minimum time-to-collision of a simple braking policy stays above the threshold;
a suite passes when its pass rate reaches `--pass-rate`. `--fail-suites` lowers the braking
margin for the named suites, to demonstrate a failing suite.

    python -m gpu_platform.workloads.replay --suites eval-a,eval-b --odd-cell odd-urban-day --out-dir out/
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


def run_suite(suite: str, odd_cell: str, scenarios: int, seed: int, degraded: bool, ttc_min: float) -> dict:
    rng = np.random.default_rng(stable_seed(seed, suite, odd_cell))
    speed = rng.uniform(5.0, 20.0, size=scenarios)  # m/s
    gap = rng.uniform(30.0, 80.0, size=scenarios)  # m to the lead object
    lead_decel = rng.uniform(0.0, 4.0, size=scenarios)  # m/s^2
    brake = 3.0 if degraded else 7.0
    reaction = 1.5 if degraded else 0.5
    closing = np.maximum(speed * reaction + np.maximum(speed**2 / (2 * brake) - speed**2 / (2 * (lead_decel + 1e-9) + 60), 0), 0)
    margin = gap - closing
    ttc = np.where(margin > 0, margin / np.maximum(speed, 1e-6), 0.0)
    passed = int(np.sum(ttc >= ttc_min))
    return {"scenarios": scenarios, "passed": passed, "failed": scenarios - passed, "min_ttc_s": float(ttc.min())}


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--suites", required=True, help="comma-separated scenario suite ids (evaluator ids)")
    p.add_argument("--odd-cell", required=True)
    p.add_argument("--scenarios", type=int, default=200, help="scenarios per suite")
    p.add_argument("--pass-rate", type=float, default=0.9)
    p.add_argument("--ttc-min", type=float, default=0.5, help="seconds")
    p.add_argument("--fail-suites", default="", help="suites to run with a degraded policy (demo of a failure)")
    p.add_argument("--model-ids", default="", help="comma-separated model artifact ids under test (recorded)")
    p.add_argument("--segment-s", type=float, default=30.0,
                   help="seconds of recorded drive log one scenario replays (replay hours = scenarios x this)")
    args = p.parse_args(argv)
    with session("replay", args) as s:
        degraded = set(csv_list(args.fail_suites))
        suites = {}
        for suite in csv_list(args.suites):
            r = run_suite(suite, args.odd_cell, args.scenarios, args.seed, suite in degraded, args.ttc_min)
            r["pass_rate"] = r["passed"] / max(r["scenarios"], 1)
            r["status"] = "passed" if r["pass_rate"] >= args.pass_rate else "failed"
            suites[suite] = r
            path = s.out_dir / "suites" / f"{suite}.json"
            write_atomic(path, json.dumps({"suite": suite, "odd_cell": args.odd_cell, **r}, sort_keys=True).encode())
            s.log(f"suite {suite} odd_cell={args.odd_cell}: {r['passed']}/{r['scenarios']} passed -> {r['status']}")
        results_path = s.out_dir / "replay-results.json"
        summary = {"odd_cell": args.odd_cell, "model_ids": csv_list(args.model_ids), "suites": suites}
        write_atomic(results_path, json.dumps(summary, indent=2, sort_keys=True).encode())
        # the unit of unit_cost_replay_hour: hours of drive log replayed, over every suite
        replay_hours = round(sum(r["scenarios"] for r in suites.values()) * args.segment_s / 3600.0, 6)
        s.report(
            {
                "odd_cell": args.odd_cell,
                "replay_hours": replay_hours,
                "suites": suites,
                "suites_passed": sorted(k for k, v in suites.items() if v["status"] == "passed"),
                "suites_failed": sorted(k for k, v in suites.items() if v["status"] == "failed"),
                "outputs": {"results": str(results_path)},
                "output_digests": {"results": file_digest(results_path)},
            }
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
