"""`make bench`: run every benchmark and write docs/BENCHMARKS.md."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    print("no benchmarks registered yet", file=sys.stderr)
