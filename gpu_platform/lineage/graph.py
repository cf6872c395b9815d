"""Instance lineage of workload runs and the release-evidence checks computed over it.

Two tables live in the ledger's database (same engine, their own MetaData):

- `workload_runs`: one row per materialization of a workload stage (append-only; the newest row
  of a (request_id, kind) is its current state), with the reproducibility facts (commit, container
  digest, dataset/map/taxonomy ids), checkpoint URI, log digest, outputs, GPU-hours and results.
- `lineage_edges`: child (request, kind) <- parent (request, kind), and the artifact id that
  links them (`via_id`). Re-recording a child replaces its edges.

How requests reference upstream: a request's input ids (`INPUT_ID_FIELDS`: dataset_ids, map_ids,
..., artifact_set) are matched against other requests' `output_artifact_ids`. So a training run
names the label batch's output in `dataset_ids`; a replay names the model in `artifact_set`; an
evidence pack or a release names the replay (and model, or segmented map) outputs in
`artifact_set`. A release request (`workload: released_model | released_map`) is materialized in
two stages of the same partition: `evidence_pack` (the pack for this release) then the release;
the release's parent is its own evidence pack stage.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime
from typing import Any

import sqlalchemy as sa

from gpu_platform.requests.ledger import create_tables
from gpu_platform.requests.model import INPUT_ID_FIELDS, JobRequest
from gpu_platform.safeload.text import plain, term

RELEASE_KINDS = ("released_model", "released_map")
EXECUTING_KINDS = ("label_batch", "training_run", "replay", "map_segmentation")
"""Kinds that run a program on a GPU (the others are assembled in-process)."""
KIND_ORDER = ("released_model", "released_map", "evidence_pack", "replay", "training_run", "map_segmentation", "label_batch")
"""When a request has several stages, the first one here is the request's head in a tree."""
SUCCEEDED = "succeeded"

metadata = sa.MetaData()

lineage_edges = sa.Table(
    "lineage_edges",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("child_request_id", sa.String(200), nullable=False, index=True),
    sa.Column("child_kind", sa.String(32), nullable=False),
    sa.Column("parent_request_id", sa.String(200), nullable=False, index=True),
    sa.Column("parent_kind", sa.String(32), nullable=False),
    sa.Column("via_id", sa.String(200), nullable=False),
    sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
    sa.UniqueConstraint("child_request_id", "child_kind", "parent_request_id", "parent_kind", "via_id"),
)

_JSON_COLUMNS = (
    "dataset_ids",
    "map_ids",
    "taxonomy_ids",
    "calibration_ids",
    "evaluator_ids",
    "input_ids",
    "unresolved_inputs",
    "output_artifact_ids",
    "artifact_digests",
    "results",
)

workload_runs = sa.Table(
    "workload_runs",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("request_id", sa.String(200), nullable=False, index=True),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("lane", sa.String(64)),
    sa.Column("team", sa.String(64)),
    sa.Column("cost_center", sa.String(64)),
    sa.Column("odd_cell", sa.String(200)),
    sa.Column("source_commit", sa.String(40)),
    sa.Column("container_digest", sa.String(71)),
    *(sa.Column(name, sa.Text, nullable=False, default="[]") for name in _JSON_COLUMNS),
    sa.Column("checkpoint_uri", sa.Text),
    sa.Column("log_digest", sa.String(71)),
    sa.Column("log_uri", sa.Text),
    sa.Column("gpu_hours", sa.Float),
    sa.Column("attempts", sa.Integer, nullable=False, default=1),
    sa.Column("exit_status", sa.Integer),
    sa.Column("dagster_run_id", sa.String(64)),
    sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
)


release_blocks = sa.Table(
    "release_blocks",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("request_id", sa.String(200), nullable=False, index=True),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("check_name", sa.String(64), nullable=False),
    sa.Column("asset", sa.String(64), nullable=False),
    sa.Column("missing", sa.Text, nullable=False),
    sa.Column("fix", sa.Text, nullable=False),
    sa.Column("dagster_run_id", sa.String(64)),
    sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
)
"""A blocking release check that failed on a stage's materialization (one row per check and run):
`lineage` shows the stage as blocked by it until a later materialization of the stage."""


@dataclass(frozen=True, slots=True)
class Block:
    """A failed blocking check on one materialization: what is missing and what to run."""

    check_name: str
    asset: str
    missing: tuple[str, ...]
    fix: str
    dagster_run_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.check_name, "asset": self.asset, "missing": list(self.missing), "fix": self.fix,
                "dagster_run_id": self.dagster_run_id}


@dataclass(frozen=True, slots=True)
class Parent:
    """An upstream run: `request_id`'s `kind` stage produced `via_id`."""

    request_id: str
    kind: str
    via_id: str


@dataclass(frozen=True)
class WorkloadRun:
    """One recorded materialization. status: succeeded | failed | preempted.

    gpu_hours=None: not measured. results: program-specific (replay: {"suites": {...}}).
    artifact_digests: output artifact id -> evidence digest.
    """

    request_id: str
    kind: str
    status: str
    lane: str | None = None
    team: str | None = None
    cost_center: str | None = None
    odd_cell: str | None = None
    source_commit: str | None = None
    container_digest: str | None = None
    dataset_ids: tuple[str, ...] = ()
    map_ids: tuple[str, ...] = ()
    taxonomy_ids: tuple[str, ...] = ()
    calibration_ids: tuple[str, ...] = ()
    evaluator_ids: tuple[str, ...] = ()
    input_ids: tuple[str, ...] = ()
    unresolved_inputs: tuple[str, ...] = ()
    output_artifact_ids: tuple[str, ...] = ()
    artifact_digests: Mapping[str, str] = field(default_factory=dict)
    results: Mapping[str, Any] = field(default_factory=dict)
    checkpoint_uri: str | None = None
    log_digest: str | None = None
    log_uri: str | None = None
    gpu_hours: float | None = None
    attempts: int = 1
    exit_status: int | None = None
    dagster_run_id: str | None = None
    recorded_at: datetime | None = None

    @classmethod
    def for_request(cls, request: JobRequest, kind: str, status: str, **facts: Any) -> WorkloadRun:
        """A run record carrying the request's reproducibility facts; `facts` adds the outcome."""
        return cls(
            request_id=request.request_id or "",
            kind=kind,
            status=status,
            lane=request.lane,
            team=request.team,
            cost_center=request.cost_center,
            odd_cell=request.odd_cell,
            source_commit=request.source_commit,
            container_digest=request.container_digest,
            dataset_ids=request.dataset_ids,
            map_ids=request.map_ids,
            taxonomy_ids=request.taxonomy_ids,
            calibration_ids=request.calibration_ids,
            evaluator_ids=request.evaluator_ids,
            input_ids=request.input_ids,
            output_artifact_ids=request.output_artifact_ids,
            **facts,
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["recorded_at"] = self.recorded_at.isoformat() if self.recorded_at else None
        return d


def _index(all_requests: Mapping[str, JobRequest] | Iterable[JobRequest]) -> dict[str, JobRequest]:
    if isinstance(all_requests, Mapping):
        return dict(all_requests)
    return {r.request_id: r for r in all_requests if r.request_id}


def producers(all_requests: Mapping[str, JobRequest] | Iterable[JobRequest]) -> dict[str, list[JobRequest]]:
    """Output artifact id -> the requests that declare it (normally one)."""
    out: dict[str, list[JobRequest]] = {}
    for r in _index(all_requests).values():
        for a in r.output_artifact_ids:
            out.setdefault(a, []).append(r)
    return out


def resolve_parents(
    request: JobRequest,
    all_requests: Mapping[str, JobRequest] | Iterable[JobRequest],
    finished: Mapping[str, str] | Collection[str] | None = None,
) -> tuple[list[Parent], list[str]]:
    """Match the request's input ids to other requests' output_artifact_ids.

    Returns (parents, unresolved input ids): exactly one parent per input id that some other
    request produces, so a release's parents are the ones its inputs name and no more.
    finished: the requests whose stage ran to an end, with the status of that run
    (`finished_requests`; a plain collection: all succeeded). When given, only those are producers:
    a request that declares an id but never ran (pending, or waiting behind the release) adds no
    edge, and an id whose every producer is unfinished is unresolved. Of several producers of one
    id (a team's re-run: `gpu_platform.requests.claims` keeps other teams out), the last that
    succeeded is taken, else the last that ended (so the lineage check names its failure).
    An unresolved id is an external input (a raw dataset, a registered evaluator) unless it sits
    in `artifact_set`, which must name produced artifacts; `check_lineage_complete` reports those.
    """
    by_output = producers(all_requests)
    parents: list[Parent] = []
    unresolved: list[str] = []
    for name in INPUT_ID_FIELDS:
        for input_id in getattr(request, name):
            found = [r for r in by_output.get(input_id, []) if r.request_id != request.request_id]
            if finished is not None:
                found = [r for r in found if r.request_id in finished]
                ok = [r for r in found if not isinstance(finished, Mapping) or finished[r.request_id] == SUCCEEDED]
                found = ok or found
            if not found:
                unresolved.append(input_id)
                continue
            r = found[-1]
            p = Parent(r.request_id or "", r.workload or "", input_id)
            if p not in parents:
                parents.append(p)
    return parents, list(dict.fromkeys(unresolved))


ENDED_STATUSES = (SUCCEEDED, "failed", "preempted")


def finished_requests(runs: Mapping[tuple[str, str], WorkloadRun]) -> dict[str, str]:
    """Request id -> status, for requests with a stage whose latest run ended
    (`LineageStore.latest_runs()`); "succeeded" wins over a failed stage of the same request."""
    out: dict[str, str] = {}
    for (rid, _kind), run in runs.items():
        if run.status in ENDED_STATUSES and out.get(rid) != SUCCEEDED:
            out[rid] = run.status
    return out


@dataclass
class LineageNode:
    """One stage in a lineage tree. run=None: referenced but never materialized.

    repeat: this stage already appears elsewhere in the tree (a diamond); its parents are shown once.
    """

    request_id: str
    kind: str
    via_id: str | None
    run: WorkloadRun | None
    parents: list[LineageNode] = field(default_factory=list)
    repeat: bool = False
    blocked_by: tuple[Block, ...] = ()
    """Blocking checks that failed on this stage's latest materialization (a blocked pack)."""

    @property
    def status(self) -> str:
        """`missing`, `blocked` (materialized, but a blocking check failed on it) or the run's status."""
        if self.run is None:
            return "missing"
        return "blocked" if self.blocked_by else self.run.status

    def walk(self) -> Iterable[LineageNode]:
        yield self
        for p in self.parents:
            yield from p.walk()

    def unique(self) -> list[LineageNode]:
        """Every stage once (first occurrence)."""
        seen: set[tuple[str, str]] = set()
        out = []
        for n in self.walk():
            if (n.request_id, n.kind) not in seen:
                seen.add((n.request_id, n.kind))
                out.append(n)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "kind": self.kind,
            "via_id": self.via_id,
            "status": self.status,
            "blocked_by": [b.to_dict() for b in self.blocked_by],
            "run": self.run.to_dict() if self.run else None,
            "repeat": self.repeat,
            "parents": [p.to_dict() for p in self.parents],
        }


class LineageStore:
    """The lineage tables over an SQLAlchemy engine (normally `Ledger.engine`)."""

    def __init__(self, engine: sa.Engine):
        self.engine = engine
        create_tables(metadata, engine)  # safe when another process opens a new ledger at once

    def record_run(self, run: WorkloadRun) -> WorkloadRun:
        row = run.to_dict()
        row["recorded_at"] = run.recorded_at or datetime.now(UTC)
        for name in _JSON_COLUMNS:
            row[name] = json.dumps(row[name], sort_keys=True, default=str)
        with self.engine.begin() as conn:
            conn.execute(workload_runs.insert().values(**row))
        return _from_row(row)

    def record_block(self, request_id: str, kind: str, block: Block) -> None:
        """Record that `block.check_name` failed on the stage's materialization in `block.dagster_run_id`."""
        with self.engine.begin() as conn:
            conn.execute(
                release_blocks.insert().values(
                    request_id=request_id,
                    kind=kind,
                    check_name=block.check_name,
                    asset=block.asset,
                    missing=json.dumps(list(block.missing)),
                    fix=block.fix,
                    dagster_run_id=block.dagster_run_id,
                    recorded_at=datetime.now(UTC),
                )
            )

    def blocks(self) -> dict[tuple[str, str, str | None], list[Block]]:
        """(request, kind, Dagster run) -> the blocking checks that failed there, oldest first."""
        t = release_blocks
        out: dict[tuple[str, str, str | None], list[Block]] = {}
        with self.engine.connect() as conn:
            for r in conn.execute(sa.select(t).order_by(t.c.id)):
                out.setdefault((r.request_id, r.kind, r.dagster_run_id), []).append(
                    Block(r.check_name, r.asset, tuple(json.loads(r.missing)), r.fix, r.dagster_run_id)
                )
        return out

    def record_edges(self, child_request_id: str, child_kind: str, parents: Sequence[Parent]) -> None:
        now = datetime.now(UTC)
        t = lineage_edges
        with self.engine.begin() as conn:
            conn.execute(t.delete().where(t.c.child_request_id == child_request_id, t.c.child_kind == child_kind))
            if parents:
                conn.execute(
                    t.insert(),
                    [
                        {
                            "child_request_id": child_request_id,
                            "child_kind": child_kind,
                            "parent_request_id": p.request_id,
                            "parent_kind": p.kind,
                            "via_id": p.via_id,
                            "recorded_at": now,
                        }
                        for p in dict.fromkeys(parents)
                    ],
                )

    def runs(self, request_id: str | None = None, kind: str | None = None) -> list[WorkloadRun]:
        """All recorded runs, oldest first."""
        q = sa.select(workload_runs).order_by(workload_runs.c.id)
        if request_id is not None:
            q = q.where(workload_runs.c.request_id == request_id)
        if kind is not None:
            q = q.where(workload_runs.c.kind == kind)
        with self.engine.connect() as conn:
            return [_from_row(r._mapping) for r in conn.execute(q)]

    def latest_runs(self) -> dict[tuple[str, str], WorkloadRun]:
        return {(r.request_id, r.kind): r for r in self.runs()}

    def latest_run(self, request_id: str, kind: str | None = None) -> WorkloadRun | None:
        found = self.runs(request_id, kind)
        if kind is None and found:
            return min(reversed(found), key=lambda r: _kind_rank(r.kind))
        return found[-1] if found else None

    def attempts(self, request_id: str, kind: str) -> int:
        return len(self.runs(request_id, kind))

    def edges(self) -> dict[tuple[str, str], list[Parent]]:
        t = lineage_edges
        out: dict[tuple[str, str], list[Parent]] = {}
        with self.engine.connect() as conn:
            for r in conn.execute(sa.select(t).order_by(t.c.id)):
                out.setdefault((r.child_request_id, r.child_kind), []).append(
                    Parent(r.parent_request_id, r.parent_kind, r.via_id)
                )
        return out

    def producer_of(self, artifact_id: str) -> WorkloadRun | None:
        """The newest run that lists `artifact_id` among its outputs (head stage preferred)."""
        q = (
            sa.select(workload_runs)
            .where(workload_runs.c.output_artifact_ids.contains(json.dumps(artifact_id), autoescape=True))
            .order_by(workload_runs.c.id)
        )
        with self.engine.connect() as conn:
            found = [_from_row(r._mapping) for r in conn.execute(q)]
        found = [r for r in found if artifact_id in r.output_artifact_ids]
        if not found:
            return None
        return min(reversed(found), key=lambda r: _kind_rank(r.kind))

    def tree(self, request_id: str, kind: str | None = None) -> LineageNode:
        """The lineage tree back from a request's stage (default: its head stage)."""
        runs = self.latest_runs()
        edges = self.edges()
        blocks = self.blocks()
        if kind is None:
            kinds = [k for (rid, k) in set(runs) | set(edges) if rid == request_id]
            if not kinds:
                raise KeyError(f"no recorded runs or lineage for request {request_id!r}")
            kind = min(kinds, key=_kind_rank)
        expanded: set[tuple[str, str]] = set()

        def build(rid: str, k: str, via: str | None, path: frozenset[tuple[str, str]]) -> LineageNode:
            run = runs.get((rid, k))
            blocked = blocks.get((rid, k, run.dagster_run_id), []) if run is not None and run.dagster_run_id else []
            node = LineageNode(rid, k, via, run, blocked_by=tuple({b.check_name: b for b in blocked}.values()))
            if (rid, k) in expanded or (rid, k) in path:
                node.repeat = True
                return node
            expanded.add((rid, k))
            for p in edges.get((rid, k), []):
                node.parents.append(build(p.request_id, p.kind, p.via_id, path | {(rid, k)}))
            return node

        return build(request_id, kind, None, frozenset())


def _kind_rank(kind: str) -> int:
    return KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)


def _from_row(row: Mapping[str, Any]) -> WorkloadRun:
    d = {k: row[k] for k in WorkloadRun.__dataclass_fields__ if k in row}
    for name in _JSON_COLUMNS:
        v = json.loads(d[name]) if isinstance(d.get(name), str) else d.get(name)
        d[name] = tuple(v) if isinstance(v, list) else (v or {})
    at = d.get("recorded_at")
    if isinstance(at, datetime) and at.tzinfo is None:
        d["recorded_at"] = at.replace(tzinfo=UTC)
    return WorkloadRun(**d)


# rendering ------------------------------------------------------------------------------------


def _short(digest: str | None, n: int = 12) -> str:
    if not digest:
        return "-"
    return digest.split(":", 1)[-1][:n]


def node_label(node: LineageNode) -> str:
    r = node.run
    via = f" [dim]via {term(node.via_id)}[/dim]" if node.via_id else ""
    if r is None:
        return f"[bold]{term(node.kind)}[/bold] {term(node.request_id)} [red]NOT MATERIALIZED[/red]{via}"
    colour = "green" if node.status == SUCCEEDED else "red"
    status = node.status
    if node.blocked_by:
        status = "blocked by " + ", ".join(f"{b.asset}.{b.check_name}" for b in node.blocked_by)
    status = term(status)
    bits = [
        f"[bold]{term(node.kind)}[/bold] {term(node.request_id)} [{colour}]{status}[/{colour}]{via}",
        f"lane={term(r.lane)} team={term(r.team)}",
        f"commit={term((r.source_commit or '-')[:12])} image={term(_short(r.container_digest))}",
    ]
    if r.gpu_hours is not None:
        bits.append(f"gpu_h={r.gpu_hours:.4f}")
    if r.dagster_run_id:
        bits.append(f"run={term(r.dagster_run_id[:8])}")
    if node.repeat:
        bits.append("[dim](shown above)[/dim]")
    return " ".join(bits)


def render_tree(node: LineageNode, tree: Any = None) -> Any:
    """A rich.tree.Tree of the lineage: stages, then their data inputs, outputs and log digests."""
    from rich.text import Text
    from rich.tree import Tree

    branch = Tree(node_label(node)) if tree is None else tree.add(node_label(node))
    r = node.run
    for b in node.blocked_by if not node.repeat else ():
        branch.add(Text.assemble(("blocked", "bold red"), plain(f" by {b.check_name}: missing {'; '.join(b.missing)}")))
        branch.add(Text.assemble(("to fix", "bold"), plain(f": {b.fix}")))
    if r is not None and not node.repeat:
        for name in ("dataset_ids", "map_ids", "taxonomy_ids", "calibration_ids", "evaluator_ids"):
            ids = getattr(r, name)
            if ids:
                branch.add(f"[cyan]{name}[/cyan]: {term(', '.join(ids))}")
        if r.output_artifact_ids:
            branch.add(f"[cyan]outputs[/cyan]: {term(', '.join(r.output_artifact_ids))}")
        if r.log_digest:
            branch.add(f"[cyan]log[/cyan]: {term(r.log_digest)}")
        if r.checkpoint_uri:
            branch.add(f"[cyan]checkpoint[/cyan]: {term(r.checkpoint_uri)}")
    for p in node.parents:
        render_tree(p, branch)
    return branch


# release-evidence checks --------------------------------------------------------------------


@dataclass(frozen=True)
class CheckOutcome:
    """The result of one release-evidence check. missing: one line per gap, naming it.
    awaiting: items that pass for now but are not final (cost_attributed: stages awaiting pricing)."""

    name: str
    passed: bool
    missing: tuple[str, ...] = ()
    checked: int = 0
    awaiting: tuple[str, ...] = ()
    subjects: tuple[str, ...] = ()
    """The ids of what is missing where the check knows them (replay_coverage: the suites)."""
    flagged: tuple[str, ...] = ()
    """cost_attributed: the days the stages were priced on that are flagged (built with unreconciled
    money over the threshold), each with its reason: they pass (a flagged day is built, not
    blocked) and are named, so a release is not signed off on a flagged day unseen."""

    @property
    def description(self) -> str:
        if self.passed:
            text = f"{self.name}: complete ({self.checked} item(s) checked)"
        else:
            text = f"{self.name}: missing {len(self.missing)}: " + "; ".join(self.missing)
        if self.awaiting:
            text += f"; awaiting pricing ({len(self.awaiting)}): " + "; ".join(self.awaiting)
        if self.flagged:
            text += f"; priced on flagged day(s) ({len(self.flagged)}): " + "; ".join(self.flagged)
        return text


def _stages(tree: LineageNode) -> list[LineageNode]:
    return tree.unique()


def check_lineage_complete(tree: LineageNode, request: JobRequest) -> CheckOutcome:
    """Every referenced upstream stage exists and succeeded; artifact_set ids are all produced;
    the stage kinds a release needs are present (pack <- replay/map; model <- training; map <- map)."""
    missing: list[str] = []
    stages = _stages(tree)
    for n in stages:
        where = f"{n.kind} {n.request_id}" + (f" (via {n.via_id})" if n.via_id else "")
        if n.run is None:
            missing.append(f"{where}: not materialized")
        elif n.run.status != SUCCEEDED:
            missing.append(f"{where}: {n.run.status} (exit status {n.run.exit_status})")
    root_run = tree.run
    unresolved = set(root_run.unresolved_inputs) if root_run else set()
    for a in request.artifact_set:
        if a in unresolved:
            missing.append(f"artifact_set {a}: no request produced it")
    kinds = {n.kind for n in stages if n is not tree}
    need: list[tuple[str, ...]] = []
    if tree.kind == "evidence_pack":
        need.append(("replay", "map_segmentation"))
    if tree.kind in RELEASE_KINDS:
        need.append(("evidence_pack",))
    if tree.kind == "released_model" or (tree.kind == "evidence_pack" and request.workload == "released_model"):
        need.append(("training_run",))
    if tree.kind == "released_map" or (tree.kind == "evidence_pack" and request.workload == "released_map"):
        need.append(("map_segmentation",))
    for alternatives in need:
        if not kinds & set(alternatives):
            missing.append(f"upstream {' or '.join(alternatives)}: none in the lineage of {request.request_id}")
    return CheckOutcome("lineage_complete", not missing, tuple(missing), len(stages))


def check_replay_coverage(tree: LineageNode, request: JobRequest) -> CheckOutcome:
    """Each required scenario suite (the request's `evaluator_ids`) was run for the request's ODD
    cell by a replay (or map QA) in the lineage, and passed."""
    cell = request.odd_cell
    missing: list[str] = []
    if not cell:
        missing.append("odd_cell: not set on the request, so coverage cannot be judged")
    if not request.evaluator_ids:
        missing.append(f"evaluator_ids: no required scenario suites named for ODD cell {cell}")
    seen: dict[str, list[tuple[str, str, Any]]] = {}
    for n in _stages(tree):
        r = n.run
        if r is None or n.kind not in ("replay", "map_segmentation") or r.status != SUCCEEDED:
            continue
        if r.odd_cell != cell:
            continue
        for suite, res in (r.results.get("suites") or {}).items():
            seen.setdefault(suite, []).append((n.request_id, res.get("status", "unknown"), res.get("pass_rate")))
    for suite in request.evaluator_ids:
        runs = seen.get(suite, [])
        if not runs:
            missing.append(f"suite {suite} for ODD cell {cell}: not replayed")
        elif not any(status == "passed" for _, status, _ in runs):
            rid, status, rate = runs[-1]
            rate_txt = f", pass rate {rate:.3f}" if isinstance(rate, int | float) else ""
            missing.append(f"suite {suite} for ODD cell {cell}: {status} in replay {rid}{rate_txt}")
    suites = tuple(s for s in request.evaluator_ids if not any(st == "passed" for _, st, _ in seen.get(s, [])))
    return CheckOutcome("replay_coverage", not missing, tuple(missing), len(request.evaluator_ids), subjects=suites)


def check_logs_retained(tree: LineageNode, exists: Any, verify: Any, held: set[str]) -> CheckOutcome:
    """Every stage's log is in the evidence store, hashes to its recorded digest, and is held.

    exists/verify: callables digest -> bool (EvidenceStore.exists / .verify); held: held digests.
    """
    missing: list[str] = []
    stages = [n for n in _stages(tree) if n.run is not None]
    for n in stages:
        d = n.run.log_digest
        where = f"{n.kind} {n.request_id}"
        if not d:
            missing.append(f"{where}: no log digest recorded")
        elif not exists(d):
            missing.append(f"{where}: log {d} not in the evidence store")
        elif not verify(d):
            missing.append(f"{where}: log {d} does not verify (content changed)")
        elif d not in held:
            missing.append(f"{where}: log {d} not under evidence hold")
    return CheckOutcome("logs_retained", not missing, tuple(missing), len(stages))


SNAPSHOT_FIELDS = {
    "label_batch": ("dataset_ids",),
    "training_run": ("dataset_ids",),
    "replay": ("dataset_ids",),
    "map_segmentation": ("map_ids",),
}
"""Which ids pin a stage's input data snapshot."""


def check_reproducible(tree: LineageNode) -> CheckOutcome:
    """Every stage has a source commit, a container digest and (for programs) a data snapshot."""
    missing: list[str] = []
    stages = [n for n in _stages(tree) if n.run is not None]
    for n in stages:
        r = n.run
        where = f"{n.kind} {n.request_id}"
        if not r.source_commit:
            missing.append(f"{where}: source_commit")
        if not r.container_digest:
            missing.append(f"{where}: container_digest")
        for f in SNAPSHOT_FIELDS.get(n.kind, ()):
            if not getattr(r, f):
                missing.append(f"{where}: dataset snapshot ({f})")
    return CheckOutcome("reproducible", not missing, tuple(missing), len(stages))


def check_cost_attributed(
    tree: LineageNode,
    costs: Mapping[str, Any] | None,
    priced_through: date | None = None,
    unavailable: str = "the cost models have not been built",
    flagged_days: Mapping[str, str] | None = None,
) -> CheckOutcome:
    """Every program stage has GPU-hours, a team/cost center and a priced cost from the cost models
    (`costs`: request id -> priced cost).

    costs=None: the cost models are not available (`unavailable` says why): no stage's cost can be
    attributed, so the check fails. priced_through: the last day the cost models have priced; a
    stage that ran after it awaits the next pricing (today's is never final): it passes, and is
    listed in `awaiting`. None: every unpriced stage is missing. flagged_days: day -> why, for the
    days the stages were priced on that are flagged (docs/finops.md, "What blocks a day"): named in
    `flagged`, never failing the check.
    """
    missing: list[str] = []
    awaiting: list[str] = []
    if costs is None:
        missing.append(f"priced cost: {unavailable}, so no stage's cost can be attributed")
    stages = [n for n in _stages(tree) if n.run is not None]
    for n in stages:
        r = n.run
        where = f"{n.kind} {n.request_id}"
        if not r.team or not r.cost_center:
            missing.append(f"{where}: team/cost_center")
        if n.kind in EXECUTING_KINDS:
            if r.gpu_hours is None:
                missing.append(f"{where}: gpu_hours not recorded")
            if costs is not None and n.request_id not in costs:
                if awaiting_pricing(r, priced_through):
                    ran = r.recorded_at.astimezone(UTC).date() if r.recorded_at else None
                    awaiting.append(f"{where} (ran {ran}, priced through {priced_through})")
                else:
                    missing.append(f"{where}: no priced cost in the cost models")
    flagged = tuple(f"{day}: {why}" for day, why in sorted((flagged_days or {}).items()))
    return CheckOutcome("cost_attributed", not missing, tuple(missing), len(stages), tuple(awaiting), flagged=flagged)


RESUBMIT = "then submit the release again under a new request_id (`gpu-platform submit FILE`)"


def fix_for(outcome: CheckOutcome, request: JobRequest, cost_fix: str = "") -> str:
    """What to run so the check passes next time, from what it found missing."""
    rid = request.request_id or "RELEASE_ID"
    if outcome.name == "replay_coverage" and outcome.subjects:
        return (
            f"replay suite(s) {', '.join(outcome.subjects)} for ODD cell {request.odd_cell}: submit a replay "
            f"request (workload: replay, odd_cell: {request.odd_cell}, evaluator_ids: [{', '.join(outcome.subjects)}], "
            f"release_packet_id: {request.release_packet_id}) with `gpu-platform submit FILE` and let it finish, "
            + RESUBMIT
        )
    if outcome.name == "replay_coverage":
        return f"set odd_cell and evaluator_ids on the release request, {RESUBMIT}"
    if outcome.name == "lineage_complete":
        return (
            f"run (or re-run) the stages named above until they succeed (`gpu-platform lineage {rid}` shows the "
            f"tree), {RESUBMIT}"
        )
    if outcome.name == "logs_retained":
        return (
            "re-run the stages whose logs are missing or fail their digest, and hold them "
            f"(`gpu-platform retention hold REQUEST_ID`), {RESUBMIT}"
        )
    if outcome.name == "reproducible":
        return f"resubmit the stages named with source_commit, container_digest and their dataset ids, {RESUBMIT}"
    if outcome.name == "cost_attributed":
        return cost_fix or "price the stages (`gpu-platform cost build --day YYYY-MM-DD`), then re-run this check"
    return RESUBMIT


def awaiting_pricing(run: WorkloadRun, priced_through: date | None) -> bool:
    """True when the run happened after the last priced day (the daily pricing has not reached it)."""
    if priced_through is None or run.recorded_at is None:
        return False
    return run.recorded_at.astimezone(UTC).date() > priced_through


def evidence_manifest(tree: LineageNode, request: JobRequest) -> dict[str, Any]:
    """What an evidence pack (or release) records: every upstream stage with its reproducibility
    facts, log digest, output digests and results, in tree order."""
    stages = []
    for n in _stages(tree):
        if n is tree:
            continue
        r = n.run
        stages.append(
            {
                "request_id": n.request_id,
                "kind": n.kind,
                "via_id": n.via_id,
                "status": r.status if r else "missing",
                **(
                    {
                        "source_commit": r.source_commit,
                        "container_digest": r.container_digest,
                        "dataset_ids": list(r.dataset_ids),
                        "map_ids": list(r.map_ids),
                        "taxonomy_ids": list(r.taxonomy_ids),
                        "odd_cell": r.odd_cell,
                        "log_digest": r.log_digest,
                        "checkpoint_uri": r.checkpoint_uri,
                        "artifact_digests": dict(r.artifact_digests),
                        "suites": dict(r.results.get("suites") or {}),
                        "gpu_hours": r.gpu_hours,
                        "dagster_run_id": r.dagster_run_id,
                    }
                    if r
                    else {}
                ),
            }
        )
    return {
        "request_id": request.request_id,
        "kind": tree.kind,
        "release_packet_id": request.release_packet_id,
        "odd_cell": request.odd_cell,
        "required_suites": list(request.evaluator_ids),
        "artifact_set": list(request.artifact_set),
        "rollback_target": request.rollback_target,
        "stages": stages,
    }


def blocking_outcomes(
    tree: LineageNode, request: JobRequest, exists: Any, verify: Any, held: set[str]
) -> list[CheckOutcome]:
    """The four ERROR-severity release checks over one tree, in the order the UI shows them."""
    return [
        check_lineage_complete(tree, request),
        check_replay_coverage(tree, request),
        check_logs_retained(tree, exists, verify, held),
        check_reproducible(tree),
    ]
