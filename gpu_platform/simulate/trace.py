"""Job traces for the simulator: CSV rows -> `TraceJob`s, with a lane for every job.

Columns (header names; `columns:` in a lane map renames them):
- `job_id` (unique), `submit_ts` (seconds, any origin), `duration_s` (> 0, seconds of work),
  `gpus` (> 0, GPUs the job holds while it runs): required.
- `lane`: the policy lane; or take the lane from another column with `--lane-from COLUMN
  --lane-map FILE`.
- `user`, `gpu_type` (a flavor name, a GPU product or `any`), `status` (as the source recorded
  it; carried into the report, the job is replayed for its whole duration whatever it says),
  `preemption_policy` (`checkpoint_requeue` | `requeue` | `fail`; default `checkpoint_requeue`),
  `site` (a site of the policy's `sites:` block: the job is admitted only on that site's flavors,
  so each site's flavors are its capacity; empty: any site): optional.

A row that cannot be used is quarantined with its line number and reason; rows in = accepted +
quarantined. A missing required column is an error naming the column.
"""

from __future__ import annotations

import csv
import hashlib
import heapq
import math
import os
import pickle
import tempfile
from array import array
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REQUIRED = ("job_id", "submit_ts", "duration_s", "gpus")
OPTIONAL = ("lane", "user", "gpu_type", "status", "preemption_policy", "site")
PREEMPTION_POLICIES = ("checkpoint_requeue", "requeue", "fail")


class TraceError(ValueError):
    """The trace or lane map cannot be read at all (missing column, bad map); lists every problem."""

    def __init__(self, errors: list[str], source: str):
        super().__init__(f"{source}: " + "; ".join(errors))
        self.errors = errors
        self.source = source


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace. cls: a workload class for reports (Kueue scenarios); None: none.
    priority=None: the lane's priority (set only by generated scenarios)."""

    job_id: str
    submit_ts: float
    duration_s: float
    gpus: float
    lane: str
    user: str | None = None
    gpu_type: str | None = None
    status: str | None = None
    preemption_policy: str = "checkpoint_requeue"
    cls: str | None = None
    priority: int | None = None
    site: str | None = None


@dataclass(frozen=True, slots=True)
class Quarantined:
    line: int
    reason: str


@dataclass(frozen=True, slots=True)
class Trace:
    jobs: list[TraceJob]
    quarantined: list[Quarantined]
    rows: int
    source: str

    def summary(self) -> dict[str, Any]:
        statuses: dict[str, int] = {}
        users: set[str] = set()
        for j in self.jobs:
            if j.status is not None:
                statuses[j.status] = statuses.get(j.status, 0) + 1
            if j.user is not None:
                users.add(j.user)
        return {
            "source": self.source,
            "rows": self.rows,
            "accepted": len(self.jobs),
            "statuses": dict(sorted(statuses.items())),
            "users": len(users),
            "quarantined": len(self.quarantined),
            "quarantined_rows": [{"line": q.line, "reason": q.reason} for q in self.quarantined[:50]],
            "quarantined_rows_left_out": max(0, len(self.quarantined) - 50),
        }


LANE_MAPS_DIR = Path(__file__).parent / "lane_maps"
"""The lane maps shipped with the simulator (`--lane-map NAME`)."""


def share_of(job_id: str, salt: str) -> float:
    """A stable number in [0, 1) for a job: the first 8 bytes of SHA-256(salt, job_id)."""
    digest = hashlib.sha256(f"{salt}\x00{job_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass(frozen=True, slots=True)
class LaneRule:
    """`values`: exact matches (as text); `min`/`max`: a numeric range, min inclusive, max inclusive.
    `share`: of the rows the rule otherwise matches, only that fraction, picked by a stable hash of
    the job id (salted with `salt`, default the lane), so a trace without such a column can give a
    few percent of its jobs to incident or release lanes, the same jobs every run."""

    lane: str
    values: frozenset[str] | None = None
    min: float | None = None
    max: float | None = None
    share: float | None = None
    salt: str | None = None

    def matches(self, raw: str, job_id: str = "") -> bool:
        if self.share is not None and share_of(job_id, self.salt or self.lane) >= self.share:
            return False
        if self.values is not None:
            return raw in self.values
        if self.min is None and self.max is None:
            return True  # a share rule alone
        try:
            v = float(raw)
        except ValueError:
            return False
        return (self.min is None or v >= self.min) and (self.max is None or v <= self.max)


@dataclass(frozen=True, slots=True)
class LaneMap:
    """How a trace without a `lane` column gets lanes: the first matching rule wins.

    column=None: `--lane-from` must name it. default=None: an unmatched row is quarantined.
    columns: trace header -> our column name renames (e.g. `submission_time: submit_ts`).
    """

    rules: tuple[LaneRule, ...]
    column: str | None = None
    default: str | None = None
    columns: Mapping[str, str] = field(default_factory=dict)
    source: str = "lane map"

    def lane_for(self, raw: str, job_id: str = "") -> str | None:
        for r in self.rules:
            if r.matches(raw, job_id):
                return r.lane
        return self.default


def load_lane_map(path: str | Path) -> LaneMap:
    """Read a lane map YAML file (see docs/simulator.md); raises TraceError naming every bad field."""
    src = str(path)
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise TraceError([str(exc)], src) from exc
    if not isinstance(raw, dict):
        raise TraceError(["<root>: expected a mapping with `rules`"], src)
    errors: list[str] = []
    unknown = set(raw) - {"column", "default", "columns", "rules", "description", "source", "license"}
    errors += [f"{k}: unknown field" for k in sorted(unknown)]
    rules: list[LaneRule] = []
    for i, r in enumerate(raw.get("rules") or []):
        where = f"rules[{i}]"
        if not isinstance(r, dict) or not isinstance(r.get("lane"), str):
            errors.append(f"{where}.lane: required (a lane name)")
            continue
        extra = set(r) - {"lane", "values", "min", "max", "share", "salt"}
        errors += [f"{where}.{k}: unknown field" for k in sorted(extra)]
        share = r.get("share")
        if share is not None and (isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1):
            errors.append(f"{where}.share: {share!r} must be a number in (0, 1]")
            continue
        salt = None if r.get("salt") is None else str(r["salt"])
        if "values" in r:
            vals = r["values"] if isinstance(r["values"], list) else [r["values"]]
            rules.append(LaneRule(r["lane"], values=frozenset(str(v) for v in vals), share=share, salt=salt))
        elif "min" in r or "max" in r:
            try:
                lo = None if r.get("min") is None else float(r["min"])
                hi = None if r.get("max") is None else float(r["max"])
            except (TypeError, ValueError):
                errors.append(f"{where}: min/max must be numbers")
                continue
            rules.append(LaneRule(r["lane"], min=lo, max=hi, share=share, salt=salt))
        elif share is not None:
            rules.append(LaneRule(r["lane"], share=share, salt=salt))
        else:
            errors.append(f"{where}: needs `values`, `min`/`max` or `share`")
    if not rules and raw.get("default") is None:
        errors.append("rules: at least one rule or a default lane")
    cols = raw.get("columns") or {}
    if not isinstance(cols, dict):
        errors.append("columns: expected a mapping trace header -> column name")
        cols = {}
    for k, v in cols.items():
        if v not in REQUIRED + OPTIONAL:
            errors.append(f"columns.{k}: {v!r} is not a trace column ({', '.join(REQUIRED + OPTIONAL)})")
    if errors:
        raise TraceError(errors, src)
    return LaneMap(tuple(rules), raw.get("column"), raw.get("default"), {str(k): str(v) for k, v in cols.items()}, src)


def _num(row: dict[str, str], col: str, positive: bool) -> float:
    raw = (row.get(col) or "").strip()
    if raw == "":
        raise ValueError(f"{col}: empty")
    try:
        v = float(raw)
    except ValueError:
        raise ValueError(f"{col}: {raw!r} is not a number") from None
    if not math.isfinite(v):
        raise ValueError(f"{col}: {raw!r} is not finite")
    if positive and v <= 0:
        raise ValueError(f"{col}: {raw!r} must be > 0")
    return v


PROGRESS_ROWS = 1_000_000
"""Rows between two progress calls of `stream_trace` (`progress(rows)`)."""


def load_trace(
    path: str | Path,
    lane_from: str | None = None,
    lane_map: LaneMap | None = None,
    lanes: frozenset[str] | None = None,
    sites: frozenset[str] | None = None,
    progress: Callable[[int], None] | None = None,
) -> Trace:
    """Read a trace CSV. lanes=None: any lane name is accepted (the scenario rejects unknown ones);
    a set: a row whose lane is not in it is quarantined. sites: the policy's sites (a row naming
    another site is quarantined); None or empty: the `site` column is ignored. progress: called
    with the rows read so far every `PROGRESS_ROWS` rows. The file is read as a stream
    (`stream_trace`): memory grows with the accepted jobs, not with the file."""
    jobs: list[TraceJob] = []
    bad: list[Quarantined] = []
    stream = stream_trace(path, lane_from, lane_map, lanes, sites, progress)
    for item in stream:
        if isinstance(item, TraceJob):
            jobs.append(item)
        else:
            bad.append(item)
    return Trace(jobs, bad, stream.rows, str(path))


class stream_trace:  # noqa: N801 - used as a function that also reports its row count
    """The trace's rows in file order, one at a time: a `TraceJob` for each usable row, a
    `Quarantined` (line, reason) for each other; `rows` counts the rows read so far. The header is
    checked on creation (`TraceError` naming every missing column); nothing else is held but the
    ids seen (for repeats: `IdSet`, 11 to 23 bytes a row) and one text per distinct lane, user, GPU
    type, status and site, so a consumer that keeps only what it needs (`load_trace` keeps the jobs) reads a file of any
    length in that much memory."""

    def __init__(
        self,
        path: str | Path,
        lane_from: str | None = None,
        lane_map: LaneMap | None = None,
        lanes: frozenset[str] | None = None,
        sites: frozenset[str] | None = None,
        progress: Callable[[int], None] | None = None,
    ):
        self.rows = 0
        self._gen = _stream(self, path, lane_from, lane_map, lanes, sites, progress)
        next(self._gen)  # check the header now

    def __iter__(self) -> Iterator[TraceJob | Quarantined]:
        return self._gen


def _stream(
    out: stream_trace,
    path: str | Path,
    lane_from: str | None,
    lane_map: LaneMap | None,
    lanes: frozenset[str] | None,
    sites: frozenset[str] | None,
    progress: Callable[[int], None] | None,
) -> Iterator[Any]:
    src = str(path)
    renames = dict(lane_map.columns) if lane_map else {}
    column = lane_from or (lane_map.column if lane_map else None)
    if lane_map is not None and column is None:
        raise TraceError(["--lane-from: the lane map names no `column`; give --lane-from COLUMN"], src)
    try:
        fh = open(path, newline="")
    except OSError as exc:
        raise TraceError([str(exc)], src) from exc
    with fh:
        reader = csv.DictReader(fh)
        header = [renames.get(h, h) for h in (reader.fieldnames or [])]
        raw_header = list(reader.fieldnames or [])
        missing = [c for c in REQUIRED if c not in header]
        if column is None and "lane" not in header:
            missing.append("lane (or --lane-from COLUMN --lane-map FILE)")
        if column is not None and column not in raw_header and column not in header:
            missing.append(f"{column} (named by --lane-from)")
        if column is not None and lane_map is None:
            missing.append("--lane-map FILE (needed with --lane-from)")
        if missing:
            problems = [f"missing column {c}" for c in missing]
            if any(c in REQUIRED for c in missing):
                shipped = sorted(p.stem for p in LANE_MAPS_DIR.glob("*.yaml"))
                problems.append(
                    f"the trace's columns are {', '.join(raw_header) or '(none)'}: map them to "
                    f"{', '.join(REQUIRED)} with a lane map's `columns:` (`--lane-map FILE`, or a shipped one: "
                    f"{', '.join(shipped)}; docs/simulator.md, Lane maps)"
                )
            raise TraceError(problems, src)
        reader.fieldnames = header
        lane_col = renames.get(column, column) if column else None
        seen = IdSet()
        texts: dict[str, str] = {}  # one copy of each repeated text (lanes, users, GPU types, ...)

        def text(v: str | None) -> str | None:
            v = (v or "").strip()
            if not v:
                return None
            return texts.setdefault(v, v) if len(texts) < 1_000_000 else v

        yield None  # the header is fine: `stream_trace` returns
        for rows, row in enumerate(reader, 1):
            out.rows = rows
            if progress is not None and rows % PROGRESS_ROWS == 0:
                progress(rows)
            line = rows + 1
            try:
                job_id = (row.get("job_id") or "").strip()
                if not job_id:
                    raise ValueError("job_id: empty")
                if job_id in seen:
                    raise ValueError(f"job_id: {job_id!r} repeats an earlier row")
                submit = _num(row, "submit_ts", positive=False)
                duration = _num(row, "duration_s", positive=True)
                gpus = _num(row, "gpus", positive=True)
                if lane_col is not None:
                    key = (row.get(lane_col) or "").strip()
                    lane = lane_map.lane_for(key, job_id) if lane_map else None
                    if lane is None:
                        raise ValueError(f"{column}: {key!r} matches no rule of {lane_map.source if lane_map else 'the lane map'}")
                else:
                    lane = (row.get("lane") or "").strip()
                    if not lane:
                        raise ValueError("lane: empty")
                if lanes is not None and lane not in lanes:
                    raise ValueError(f"lane: {lane!r} is not a lane of the policy")
                pp = (row.get("preemption_policy") or "").strip() or "checkpoint_requeue"
                if pp not in PREEMPTION_POLICIES:
                    raise ValueError(f"preemption_policy: {pp!r} is not one of {', '.join(PREEMPTION_POLICIES)}")
                site = (row.get("site") or "").strip() or None if sites else None
                if site is not None and site not in sites:  # type: ignore[operator]
                    raise ValueError(f"site: {site!r} is not a site of the policy (sites: {', '.join(sorted(sites or ()))})")
            except ValueError as exc:
                yield Quarantined(line, str(exc))
                continue
            seen.add(job_id)
            yield TraceJob(
                job_id,
                submit,
                duration,
                gpus,
                texts.setdefault(lane, lane),
                text(row.get("user")),
                text(row.get("gpu_type")),
                text(row.get("status")),
                texts.setdefault(pp, pp),
                site=None if site is None else texts.setdefault(site, site),
            )


class IdSet:
    """The job ids seen so far, for repeats, in 11 to 23 bytes an id: an open-addressing table of
    64-bit BLAKE2b digests (salted per table, linear probing, at most 70% full). Two different ids share a digest with probability
    about n^2 / 2^65 (3e-6 for 10 million ids): such a row would be quarantined as a repeat."""

    __slots__ = ("table", "mask", "count", "salt")

    def __init__(self) -> None:
        self.table = array("Q", bytes(8 * 1024))
        self.mask = 1023
        self.count = 0
        self.salt = os.urandom(8)

    def _digest(self, job_id: str) -> int:
        h = int.from_bytes(hashlib.blake2b(job_id.encode(), digest_size=8, salt=self.salt).digest(), "little")
        return h or 1  # 0 marks an empty slot

    def __contains__(self, job_id: str) -> bool:
        h = self._digest(job_id)
        table, mask = self.table, self.mask
        i = h & mask
        while True:
            v = table[i]
            if v == 0:
                return False
            if v == h:
                return True
            i = (i + 1) & mask

    def add(self, job_id: str) -> None:
        self._put(self._digest(job_id))

    def _put(self, h: int) -> None:
        if 10 * (self.count + 1) > 7 * len(self.table):  # at most 70% full
            old = self.table
            self.table = array("Q", bytes(16 * len(old)))
            self.mask = len(self.table) - 1
            self.count = 0
            for v in old:
                if v:
                    self._put(v)
        table, mask = self.table, self.mask
        i = h & mask
        while True:
            v = table[i]
            if v == 0:
                table[i] = h
                self.count += 1
                return
            if v == h:
                return
            i = (i + 1) & mask

    def __len__(self) -> int:
        return self.count


SPILL_JOBS = 200_000
"""Jobs `SortedTrace` sorts in memory at a time; more are sorted in runs of this many, spilled to
temporary files and merged on every read."""
QUARANTINE_KEPT = 1000
"""Quarantined rows `SortedTrace` keeps with their reason (the rest are counted)."""


class SortedTrace:
    """A trace file of any length as jobs in submission order (ties in file order), read again for
    each simulation in bounded memory: the rows are read once (`stream_trace`), sorted in runs of
    `SPILL_JOBS` jobs spilled to temporary files (one run stays in memory), and each iteration
    merges the runs. Holds the summary `Trace.summary` gives (counts of statuses, distinct users,
    the first quarantined rows) without the jobs. Use as a context manager (or `close`) to remove
    the spill files."""

    def __init__(
        self,
        path: str | Path,
        lane_from: str | None = None,
        lane_map: LaneMap | None = None,
        lanes: frozenset[str] | None = None,
        sites: frozenset[str] | None = None,
        progress: Callable[[int], None] | None = None,
        spill_jobs: int | None = None,
    ):
        self.source = str(path)
        self.quarantined: list[Quarantined] = []
        self.quarantined_count = 0
        self.statuses: dict[str, int] = {}
        self.users: set[str] = set()
        self.accepted = 0
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._runs: list[str] = []
        self._mem: list[tuple] = []
        limit = spill_jobs or SPILL_JOBS
        stream = stream_trace(path, lane_from, lane_map, lanes, sites, progress)
        buf: list[tuple] = []
        for item in stream:
            if isinstance(item, TraceJob):
                self.accepted += 1
                if item.status is not None:
                    self.statuses[item.status] = self.statuses.get(item.status, 0) + 1
                if item.user is not None:
                    self.users.add(item.user)
                buf.append(_astuple(item))
                if len(buf) >= limit:
                    self._spill(buf)
                    buf = []
            else:
                self.quarantined_count += 1
                if len(self.quarantined) < QUARANTINE_KEPT:
                    self.quarantined.append(item)
        self.rows = stream.rows
        buf.sort(key=_submit)  # stable: ties keep file order
        if self._runs:
            self._spill(buf, sort=False)
        else:
            self._mem = buf

    def _spill(self, buf: list[tuple], sort: bool = True) -> None:
        if sort:
            buf.sort(key=_submit)
        if self._dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix="trace-runs-")
        name = os.path.join(self._dir.name, f"run{len(self._runs):05d}.pickle")
        with open(name, "wb") as fh:
            for i in range(0, len(buf), 4096):
                pickle.dump(buf[i : i + 4096], fh, protocol=pickle.HIGHEST_PROTOCOL)
        self._runs.append(name)

    def __len__(self) -> int:
        return self.accepted

    def __iter__(self) -> Iterator[TraceJob]:
        if not self._runs:
            return (TraceJob(*t) for t in self._mem)
        # heapq.merge takes equal keys from the earlier run first: ties stay in file order
        return (TraceJob(*t) for t in heapq.merge(*(_read_run(n) for n in self._runs), key=_submit))

    def summary(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "rows": self.rows,
            "accepted": self.accepted,
            "statuses": dict(sorted(self.statuses.items())),
            "users": len(self.users),
            "quarantined": self.quarantined_count,
            "quarantined_rows": [{"line": q.line, "reason": q.reason} for q in self.quarantined[:50]],
            "quarantined_rows_left_out": max(0, self.quarantined_count - 50),
        }

    def close(self) -> None:
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None
            self._runs = []

    def __enter__(self) -> SortedTrace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _astuple(j: TraceJob) -> tuple:
    return (j.job_id, j.submit_ts, j.duration_s, j.gpus, j.lane, j.user, j.gpu_type, j.status,
            j.preemption_policy, j.cls, j.priority, j.site)


def _submit(t: tuple) -> float:
    return t[1]


def _read_run(name: str) -> Iterator[tuple]:
    with open(name, "rb") as fh:
        while True:
            try:
                batch = pickle.load(fh)
            except EOFError:
                return
            yield from batch
