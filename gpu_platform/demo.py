"""Seed a realistic demo: requests for every lane in the ledger under GPU_PLATFORM_HOME.

`python -m gpu_platform.demo seed` is what `make demo` runs before starting the UI. Seeding is
idempotent: a ledger that already holds requests is left as it is.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpu_platform.ledger import Ledger, default_ledger_url
from gpu_platform.policy import load_policy
from gpu_platform.requests import validate_request_file

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "requests"


def seed(examples: Path = EXAMPLES) -> list[str]:
    policy = load_policy()
    ledger = Ledger(default_ledger_url())
    if ledger.count()[0]:
        print(f"demo: ledger {ledger.url} already seeded ({ledger.count()[0]} requests)")
        return []
    ids = [ledger.submit(validate_request_file(p, policy)) for p in sorted(examples.glob("*.yaml"))]
    print(f"demo: submitted {len(ids)} requests to {ledger.url}")
    return ids


def main(argv: list[str]) -> int:
    if argv[:1] != ["seed"]:
        print("usage: python -m gpu_platform.demo seed", file=sys.stderr)
        return 2
    seed()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
