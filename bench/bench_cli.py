"""CLI start-up benchmark: how long a fresh `gpu-platform` process takes to answer (issue 40).

Run: .venv/bin/python bench/bench_cli.py [--days 30] [--runs 7] [--queue-runs 5] [--profile-queue N]
Prints one JSON object per measurement. Every figure is a cold process (a new interpreter per
run, as a user's shell starts one; the OS file cache warm; bytecode cached, as an installed
package has it, under a prefix in the temporary directory, whatever PYTHONDONTWRITEBYTECODE
says): wall time with `time.perf_counter` around `subprocess.run`, CPU time (user + system) from
`resource.getrusage(RUSAGE_CHILDREN)` deltas; medians of `--runs` runs after one untimed warm-up.

Measured:
- `python -c "import gpu_platform.cli.app"`: the root CLI module's import alone, and which of
  the heavy libraries (duckdb, polars, sqlalchemy, dagster, numpy, pyarrow) it brought in;
- `gpu-platform --help` (target <= 0.3 s);
- `gpu-platform COMMAND --help` for every top-level command (each one's median; reported: the
  median and the max over commands, target <= 0.3 s each) and every subcommand (`GROUP SUB --help`);
- `gpu-platform queue` on a demo-sized ledger (target <= 1 s): the demo's live requests (one per
  lane, the release chain, the research sweep...) plus `--days` days of history through the
  admission engine (`gpu_platform.demo.history.generate` / `write_ledger`, what `gpu-platform
  demo seed` records), in a temporary home named by a project config in the working directory,
  as `make demo` leaves it. `--profile-queue N` prints the top N functions of one `queue` run
  (cProfile, cumulative) to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HEAVY = ("duckdb", "polars", "sqlalchemy", "dagster", "numpy", "pyarrow")


def _cli() -> list[str]:
    """The installed console script beside this interpreter, else `python -m gpu_platform.cli`."""
    script = Path(sys.executable).parent / "gpu-platform"
    return [str(script)] if script.exists() else [sys.executable, "-m", "gpu_platform.cli"]


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(cmd: list[str], runs: int, cwd: Path, env: dict[str, str]) -> dict:
    """Median wall and CPU seconds of `runs` fresh processes of `cmd` (after one untimed run);
    a non-zero exit fails the benchmark (a figure for a command that did not answer is no figure)."""
    wall, cpu = [], []
    for i in range(runs + 1):
        c0, t0 = _cpu(), time.perf_counter()
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
        w, c = time.perf_counter() - t0, _cpu() - c0
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.strip()[-500:]}")
        if i:
            wall.append(w)
            cpu.append(c)
    return {"median_s": round(statistics.median(wall), 3), "cpu_median_s": round(statistics.median(cpu), 3),
            "min_s": round(min(wall), 3), "max_s": round(max(wall), 3), "runs": runs}


def command_names() -> tuple[list[str], list[list[str]]]:
    """Top-level command names and every subcommand path, read from the click tree in this process."""
    import click

    from gpu_platform.cli.app import main

    ctx = click.Context(main)
    top, subs = [], []
    for name in main.list_commands(ctx):
        top.append(name)
        cmd = main.get_command(ctx, name)
        if isinstance(cmd, click.Group):
            subs += [[name, sub] for sub in cmd.list_commands(click.Context(cmd, parent=ctx, info_name=name))]
    return top, subs


def demo_home(tmp: Path, days: int) -> dict:
    """A demo-sized ledger under tmp/home, named by tmp/gpu-platform.yaml (as `make demo` leaves
    it): the demo's live requests and `days` days of history. Returns what it holds."""
    from gpu_platform.cli.demo import _load, live_request_files
    from gpu_platform.demo import history as demo_history
    from gpu_platform.demo.costs import demo_days
    from gpu_platform.policy import load_policy
    from gpu_platform.requests.ledger import Ledger

    home = tmp / "home"
    home.mkdir()
    (tmp / "gpu-platform.yaml").write_text("home: home\n")
    policy = load_policy()
    ledger = Ledger(f"sqlite:///{home / 'ledger.db'}")
    t0 = time.perf_counter()
    ledger.submit_batch([_load(p, policy) for p in live_request_files()])
    history = demo_history.generate(policy, demo_days(days))
    recorded = demo_history.write_ledger(history, ledger, policy)
    requests, events = ledger.count()
    ledger.engine.dispose()
    return {"days": days, "history_requests": recorded, "requests": requests, "events": events,
            "seed_s": round(time.perf_counter() - t0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=int, default=30, help="days of demo history in the ledger (the demo's default: 30)")
    ap.add_argument("--runs", type=int, default=7, help="timed processes per --help figure")
    ap.add_argument("--sub-runs", type=int, default=3, help="timed processes per subcommand --help")
    ap.add_argument("--queue-runs", type=int, default=5)
    ap.add_argument("--profile-queue", type=int, default=0, help="print the top N functions of one queue run")
    args = ap.parse_args()
    cli = _cli()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("GPU_PLATFORM_", "DAGSTER_HOME", "COLUMNS")) and k != "PYTHONDONTWRITEBYTECODE"}
        # bytecode cached as an installed package has it (the warm-up run writes it), kept out of the tree
        env.update(PYTHONWARNINGS="ignore", PYTHONPYCACHEPREFIX=str(tmp / "pycache"))

        probe = f"import sys, gpu_platform.cli.app; print([m for m in {HEAVY!r} if m in sys.modules])"
        imp = timed([sys.executable, "-c", probe], args.runs, tmp, env)
        heavy = subprocess.run([sys.executable, "-c", probe], cwd=tmp, env=env, capture_output=True, text=True,
                               check=True).stdout.strip()
        print(json.dumps({"benchmark": "cli_import", "module": "gpu_platform.cli.app", **imp,
                          "heavy_modules": json.loads(heavy.replace("'", '"'))}), flush=True)

        seeded = demo_home(tmp, args.days)  # the project config is in tmp: every run below reads it
        print(json.dumps({"benchmark": "cli_help", "command": "--help", **timed([*cli, "--help"], args.runs, tmp, env)}),
              flush=True)

        top, subs = command_names()
        per = {name: timed([*cli, name, "--help"], args.runs, tmp, env) for name in top}
        medians = {n: r["median_s"] for n, r in per.items()}
        slowest = max(medians, key=medians.__getitem__)
        print(json.dumps({
            "benchmark": "cli_command_help", "commands": len(top),
            "median_s": round(statistics.median(medians.values()), 3),
            "max_s": medians[slowest], "slowest": slowest,
            "cpu_median_s": round(statistics.median(r["cpu_median_s"] for r in per.values()), 3),
            "cpu_max_s": max(r["cpu_median_s"] for r in per.values()),
            "per_command_s": medians,
        }), flush=True)

        sub = {" ".join(p): timed([*cli, *p, "--help"], args.sub_runs, tmp, env)["median_s"] for p in subs}
        sub_slowest = max(sub, key=sub.__getitem__)
        print(json.dumps({
            "benchmark": "cli_subcommand_help", "subcommands": len(sub),
            "median_s": round(statistics.median(sub.values()), 3), "max_s": sub[sub_slowest], "slowest": sub_slowest,
            "per_subcommand_s": sub,
        }), flush=True)

        q = timed([*cli, "queue"], args.queue_runs, tmp, env)
        qj = timed([*cli, "queue", "--format", "json"], args.queue_runs, tmp, env)
        print(json.dumps({"benchmark": "cli_queue", **seeded, **q, "json_median_s": qj["median_s"],
                          "json_cpu_median_s": qj["cpu_median_s"]}), flush=True)
        if args.profile_queue:
            # the imports included: a cold process pays them
            code = ("import cProfile, pstats, sys; sys.argv = ['gpu-platform', 'queue']\n"
                    "p = cProfile.Profile(); p.enable()\nfrom gpu_platform.cli import main\n"
                    "try:\n    main()\nexcept SystemExit:\n    pass\n"
                    f"p.disable(); pstats.Stats(p, stream=sys.stderr).sort_stats('cumulative').print_stats({args.profile_queue})")
            out = subprocess.run([sys.executable, "-c", code], cwd=tmp, env=env, capture_output=True, text=True, check=False)
            print(out.stderr, file=sys.stderr)


if __name__ == "__main__":
    main()
