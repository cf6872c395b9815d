"""A service's traffic as a demand curve, and the replicas it needs (docs/serving.md, Simulating traffic).

Two curves:
- `DiurnalDemand`: a day-shaped curve, `trough_qps` at its lowest, `peak_qps` at `peak_at_s`
  within each `period_s` (a raised cosine), held constant over steps of `step_s` seconds.
- `TraceDemand`: a request-rate trace (`load_demand_csv`, a CSV `timestamp,qps`): each rate holds
  from its timestamp until the next one (before the first: the first rate; after the last: the
  last rate).

Both answer `steps(start, end)`: the curve as a step function [(t, qps), ...] starting at `start`,
so a replica count derived from it is exact between steps. `wanted_replicas` is the autoscaler's
rule: ceil(qps / target QPS per replica), clamped to [min, max] (KEDA's Prometheus scaler on an
`AverageValue` target, as HPA computes it: ceil(metric / target)).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from gpu_platform.safeload.text import plain

DEMAND_COLUMNS = ("timestamp", "qps")
MAX_DEMAND_ROWS = 2_000_000


class DemandError(ValueError):
    """A demand curve or trace that cannot be used; `errors` lists every problem (`line N: ...`)."""

    def __init__(self, errors: list[str], source: str = "demand"):
        self.errors = errors
        self.source = source
        super().__init__(f"{source}: {len(errors)} error(s)\n" + "\n".join(f"  {e}" for e in errors))


def wanted_replicas(qps: float, target_qps_per_replica: float, min_replicas: int, max_replicas: int) -> int:
    """Replicas the autoscaler asks for at `qps`: ceil(qps / target), clamped to [min, max]."""
    if target_qps_per_replica <= 0:
        raise ValueError("target_qps_per_replica must be > 0")
    need = math.ceil(qps / target_qps_per_replica - 1e-9) if qps > 0 else 0
    return max(min_replicas, min(max_replicas, need))


@dataclass(frozen=True, slots=True)
class DiurnalDemand:
    """trough_qps at the lowest point, peak_qps at `peak_at_s` (seconds into each period, on the
    simulation's clock modulo `period_s`); between them a raised cosine. step_s: the curve is
    held constant over steps of this many seconds (the rate at each step's start)."""

    peak_qps: float
    trough_qps: float
    period_s: float = 86_400.0
    peak_at_s: float = 14 * 3600.0
    step_s: float = 60.0

    def __post_init__(self) -> None:
        errors = []
        if not (math.isfinite(self.peak_qps) and self.peak_qps >= 0):
            errors.append(f"peak_qps: must be a number >= 0, got {self.peak_qps!r}")
        if not (math.isfinite(self.trough_qps) and self.trough_qps >= 0):
            errors.append(f"trough_qps: must be a number >= 0, got {self.trough_qps!r}")
        elif math.isfinite(self.peak_qps) and self.trough_qps > self.peak_qps:
            errors.append(f"trough_qps: {self.trough_qps:g} is above peak_qps {self.peak_qps:g}")
        if not (math.isfinite(self.period_s) and self.period_s > 0):
            errors.append(f"period_s: must be > 0, got {self.period_s!r}")
        if not (math.isfinite(self.step_s) and self.step_s > 0):
            errors.append(f"step_s: must be > 0, got {self.step_s!r}")
        if not math.isfinite(self.peak_at_s):
            errors.append(f"peak_at_s: must be a number, got {self.peak_at_s!r}")
        if errors:
            raise DemandError(errors, "diurnal demand")

    def qps(self, t: float) -> float:
        phase = 2 * math.pi * (t - self.peak_at_s) / self.period_s
        return self.trough_qps + (self.peak_qps - self.trough_qps) * (1 + math.cos(phase)) / 2

    def steps(self, start: float, end: float) -> list[tuple[float, float]]:
        out: list[tuple[float, float]] = []
        n = max(1, math.ceil((end - start) / self.step_s - 1e-9))
        last = None
        for i in range(n):
            t = start + i * self.step_s
            q = self.qps(t)
            if q != last:
                out.append((t, q))
                last = q
        return out

    def describe(self) -> dict:
        return {
            "kind": "diurnal",
            "peak_qps": self.peak_qps,
            "trough_qps": self.trough_qps,
            "period_s": self.period_s,
            "peak_at_s": self.peak_at_s,
            "step_s": self.step_s,
        }


@dataclass(frozen=True, slots=True)
class TraceDemand:
    """Request rates from a trace: (timestamp seconds, qps) with strictly increasing timestamps."""

    points: tuple[tuple[float, float], ...]
    source: str = "demand trace"

    def __post_init__(self) -> None:
        if not self.points:
            raise DemandError(["no rows"], self.source)

    def qps(self, t: float) -> float:
        pts = self.points
        lo, hi = 0, len(pts)
        while lo < hi:  # last point at or before t
            mid = (lo + hi) // 2
            if pts[mid][0] <= t:
                lo = mid + 1
            else:
                hi = mid
        return pts[max(lo - 1, 0)][1]

    def steps(self, start: float, end: float) -> list[tuple[float, float]]:
        out = [(start, self.qps(start))]
        for t, q in self.points:
            if start < t < end and q != out[-1][1]:
                out.append((t, q))
        return out

    def describe(self) -> dict:
        return {
            "kind": "trace",
            "source": self.source,
            "rows": len(self.points),
            "start": self.points[0][0],
            "end": self.points[-1][0],
            "peak_qps": max(q for _t, q in self.points),
        }


def _timestamp(raw: str) -> tuple[float, str]:
    """(seconds, kind): a number (any origin, as the batch trace's `submit_ts`; kind "seconds") or
    an ISO 8601 time with its UTC offset (as epoch seconds; kind "iso")."""
    try:
        v = float(raw)
    except ValueError:
        try:
            when = datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"timestamp {plain(raw)!r} is neither seconds nor an ISO 8601 time") from None
        if when.tzinfo is None:
            raise ValueError(f"timestamp {plain(raw)!r} has no UTC offset") from None
        return when.timestamp(), "iso"
    if not math.isfinite(v):
        raise ValueError(f"timestamp {plain(raw)!r} is not a finite number")
    return v, "seconds"


def load_demand_csv(path: str | Path, *, shift_to: float | None = None) -> TraceDemand:
    """A request-rate trace: CSV with a header holding `timestamp` and `qps` (other columns ignored).

    Every bad row is reported with its line number (a timestamp that is not a number or ISO 8601
    time with offset, not after the row before; qps not a finite number >= 0); any error fails the
    whole file, as does a file mixing ISO times and seconds. shift_to: move the trace so its first timestamp is this time (lay a day's curve
    over the batch trace's clock); None: keep its timestamps."""
    p = Path(path)
    source = str(p)
    try:
        fh = p.open(newline="", encoding="utf-8")
    except OSError as e:
        raise DemandError([f"cannot read: {e.strerror or e}"], source) from None
    errors: list[str] = []
    points: list[tuple[float, float]] = []
    with fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            raise DemandError(["empty file (expected a header `timestamp,qps`)"], source) from None
        except (csv.Error, UnicodeDecodeError) as e:
            raise DemandError([f"line 1: {e}"], source) from None
        names = [h.strip().lower() for h in header]
        missing = [c for c in DEMAND_COLUMNS if c not in names]
        if missing:
            raise DemandError([f"missing column(s) {', '.join(missing)} (header: {plain(','.join(header))})"], source)
        ti, qi = names.index("timestamp"), names.index("qps")
        prev: float | None = None
        clock: str | None = None
        try:
            for row in reader:
                line = reader.line_num
                if not row or all(not c.strip() for c in row):
                    continue
                if len(points) >= MAX_DEMAND_ROWS:
                    errors.append(f"line {line}: more than {MAX_DEMAND_ROWS:,} rows")
                    break
                if len(row) <= max(ti, qi):
                    errors.append(f"line {line}: {len(row)} field(s), expected at least {max(ti, qi) + 1}")
                    continue
                problems = []
                t = q = None
                try:
                    t, kind = _timestamp(row[ti].strip())
                    if clock is None:
                        clock = kind
                    elif kind != clock:
                        problems.append(f"timestamp {plain(row[ti].strip())} mixes {kind} with the {clock} of the rows before")
                        t = None
                except ValueError as e:
                    problems.append(str(e))
                try:
                    q = float(row[qi])
                    if not math.isfinite(q) or q < 0:
                        problems.append(f"qps {plain(row[qi])!r} must be a finite number >= 0")
                except ValueError:
                    problems.append(f"qps {plain(row[qi])!r} is not a number")
                if t is not None and prev is not None and t <= prev:
                    problems.append(f"timestamp {plain(row[ti].strip())} is not after the row before")
                if problems:
                    errors.append(f"line {line}: " + "; ".join(problems))
                    continue
                assert t is not None and q is not None
                prev = t
                points.append((t, q))
        except (csv.Error, UnicodeDecodeError) as e:
            errors.append(f"line {reader.line_num}: {e}")
    if not points and not errors:
        errors.append("no rows after the header")
    if errors:
        raise DemandError(errors, source)
    if shift_to is not None:
        d = shift_to - points[0][0]
        points = [(t + d, q) for t, q in points]
    return TraceDemand(tuple(points), source)
