"""GPU job requests: the metadata every job carries, validated against the policy, failing closed.

`validate_request(raw, policy)` returns a frozen `JobRequest` or raises `RequestError` whose
`errors` name every problem at once with its field path (`gpu_count: ...`, `release_packet_id:
required by lane release_eval`).
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from gpu_platform.devices.sharing import is_gpu_resource, mode_of
from gpu_platform.policy import GPU, Policy
from gpu_platform.policy.model import WorkloadKind
from gpu_platform.policy.scale import scale_metadata_problems
from gpu_platform.safeload import (
    REQUEST_LIMITS,
    InputError,
    check_tree,
    load_document,
    one_line,
    show,
    show_key,
)
from gpu_platform.safeload.text import char_problem
from gpu_platform.serving.model import ServiceSpec, service_name
from gpu_platform.units import parse_duration

PreemptionPolicy = Literal["requeue", "checkpoint_requeue", "fail"]
"""What happens to a job that is preempted: restart from scratch, resume from its last checkpoint,
or fail without retry."""

_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$")
NAME_MAX_CHARS = 100
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._:/@+()-]{0,99}$")
_NAME_BAD = re.compile(r"[^A-Za-z0-9 ._:/@+()-]+")
TARGET_FIELDS = (
    "candidate_id",
    "release_packet_id",
    "experiment_id",
    "baseline_id",
    "incident_id",
    "source_map_acceptance_id",
    "labeler_registry_id",
    "change_ticket",
)
"""The fields that say what a request works on (a candidate, a release, an experiment...), in the
order `JobRequest.target` looks for one; without any, its first output artifact id."""

FIELD_MAX_CHARS: dict[str, int] = {
    "request_id": 200,
    "owner": 200,
    "lane": 64,
    "team": 64,
    "cost_center": 64,
    "workload": 32,
    "gpu_type": 64,
}
"""Longest value of the fields the ledger stores in their own columns (the ledger's column sizes
come from here, so validation refuses before either database would, identically on both)."""
MAX_TEXT_CHARS = 1024
"""Longest value of any other string field (ids: 200; command arguments and env values: 4096)."""
MAX_ARG_CHARS = 4096
MAX_LIST_ITEMS = 1000
"""Most items in one list field (ids, command arguments) and entries in `env`."""
MONEY_PRECISION = 18
MONEY_SCALE = 6
"""`max_cost` is stored as NUMERIC(18, 6): at most 12 digits before the point and 6 after; a
value with more is refused rather than rounded, so the ledger stores exactly what was sent."""
TEXT_ALLOWED_CONTROLS: dict[str, str] = {"command": "\t\n", "env": "\t\n"}
"""The only fields whose text may hold control characters: a command argument or an env value may
hold TAB and LF (a script passed to `python -c`); they reach the Job as YAML-encoded strings and
are printed escaped. Every other string field refuses C0/C1 controls, bidi controls (U+202A-202E,
U+2066-2069, U+200E/U+200F, U+061C) and U+2028/U+2029 (`gpu_platform.safeload.text`)."""
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")

ID_LIST_FIELDS = (
    "dataset_ids",
    "map_ids",
    "calibration_ids",
    "taxonomy_ids",
    "labeler_ids",
    "prompt_ids",
    "evaluator_ids",
    "output_artifact_ids",
    "artifact_set",
)
INPUT_ID_FIELDS = (
    "dataset_ids",
    "map_ids",
    "calibration_ids",
    "taxonomy_ids",
    "labeler_ids",
    "prompt_ids",
    "evaluator_ids",
    "artifact_set",
)
"""Fields that reference artifacts produced by other jobs; lineage follows them."""


class RequestError(ValueError):
    """A request that fails validation. `errors` lists every problem as `field: message`."""

    def __init__(self, errors: list[str], source: str = "request"):
        self.errors = errors
        self.source = source
        super().__init__(f"{source}: {len(errors)} problem(s)\n" + "\n".join(f"  {e}" for e in errors))


class TopologyRequest(BaseModel):
    """Where a multi-pod job's pods must (`required`) or should (`preferred`) sit: one node label of
    its flavor's topology levels (`topology.kubernetes.io/zone`). Kueue's Topology Aware Scheduling
    reads it from the podset annotations `kueue.x-k8s.io/podset-required-topology` /
    `podset-preferred-topology`. Exactly one of the two."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    required: str | None = Field(default=None, min_length=1, max_length=316)
    preferred: str | None = Field(default=None, min_length=1, max_length=316)

    @property
    def level(self) -> str:
        return self.required or self.preferred or ""

    @property
    def mode(self) -> str:
        return "required" if self.required else "preferred"


class JobRequest(BaseModel):
    """One GPU job request. Optional fields are None when absent; the lane decides which are required.

    gpu_type: a flavor name from the policy (`h100-ondemand`), a GPU product label value
    (`NVIDIA-H100-80GB-HBM3`), or `any` (any flavor the lane has quota on).
    gpu_resource: what `gpu_count` counts, as the device plugin names it: whole GPUs
    (`nvidia.com/gpu`, the default), MIG slices (`nvidia.com/mig-1g.10gb`) or shared replicas
    (`nvidia.com/gpu.shared`, which need `gpu_memory_gib`: the memory the job promises to stay under).
    retention_policy: `lane_default` or a duration (`365d`).
    nodes / gpus_per_node: the job's shape on its flavor's nodes, written by validation when the
    policy has node shapes (a job over one node is `nodes x gpus_per_node`, one pod per node);
    None: no node shape (one pod). topology: where its pods must or should sit (Kueue TAS).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: str | None = Field(default=None, pattern=_ID.pattern)
    name: str | None = Field(default=None, pattern=_NAME.pattern)
    """A human name (`occupancy-lr-sweep trial 1`): the `name:` field, else the request file's name
    (`validate_request_file`). It labels the request in the queue, explain and the UI; it is not
    part of the request's identity (`content_request_id` leaves it out)."""
    owner: str | None = None
    team: str | None = None
    cost_center: str | None = None
    lane: str | None = None
    workload: WorkloadKind | None = None
    site: str | None = None
    odd_cell: str | None = None
    data_access_scope: str | None = None
    source_commit: str | None = None
    container_digest: str | None = None
    image: str = "registry.local/gpu-platform/workload"
    command: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    dataset_ids: tuple[str, ...] = ()
    map_ids: tuple[str, ...] = ()
    calibration_ids: tuple[str, ...] = ()
    taxonomy_ids: tuple[str, ...] = ()
    labeler_ids: tuple[str, ...] = ()
    prompt_ids: tuple[str, ...] = ()
    evaluator_ids: tuple[str, ...] = ()
    gpu_type: str | None = None
    gpu_resource: str = GPU
    gpu_count: int | None = Field(default=None, ge=1)
    gpu_memory_gib: float | None = Field(default=None, gt=0)
    nodes: int | None = Field(default=None, ge=1)
    gpus_per_node: int | None = Field(default=None, ge=1)
    topology: TopologyRequest | None = None
    cpu: float | None = Field(default=None, gt=0)
    memory_gib: float | None = Field(default=None, gt=0)
    expected_duration: timedelta | None = None
    max_cost: Decimal | None = None
    timeout: timedelta | None = None
    checkpoint_interval: timedelta = timedelta(minutes=10)
    output_artifact_ids: tuple[str, ...] = ()
    preemption_policy: PreemptionPolicy | None = None
    retention_policy: str | None = None
    # Lane-specific fields (which are required comes from the policy's lanes.*.required_fields).
    experiment_id: str | None = None
    baseline_id: str | None = None
    candidate_id: str | None = None
    release_packet_id: str | None = None
    artifact_set: tuple[str, ...] = ()
    rollback_target: str | None = None
    incident_id: str | None = None
    evidence_hold: bool | None = None
    approver: str | None = None
    safety_approval: str | None = None
    labeler_registry_id: str | None = None
    prompt_pack: str | None = None
    allowed_use: str | None = None
    source_map_acceptance_id: str | None = None
    tile_set: str | None = None
    semantic_taxonomy: str | None = None
    publication_target: str | None = None
    change_ticket: str | None = None
    maintenance_window: str | None = None
    service: ServiceSpec | None = None
    """A serving lane's request (`workload: service`): the service it runs (docs/serving.md);
    `gpu_count` of `gpu_resource` is then what one replica holds. Required in a serving lane,
    refused elsewhere."""

    @field_validator("*", mode="after")
    @classmethod
    def _text_bounds(cls, v: Any, info: ValidationInfo) -> Any:
        """Every string is bounded and free of control and bidi characters (`TEXT_ALLOWED_CONTROLS`):
        NUL (PostgreSQL refuses it; SQLite would keep it), C0/C1 controls (an `ESC[2J` would clear
        the terminal of whoever runs `queue`; a newline would forge a line in `explain`) and bidi
        overrides (U+202E reorders what a reviewer reads). The error names the code point."""
        name = info.field_name or ""
        if isinstance(v, str):
            _check_text(v, FIELD_MAX_CHARS.get(name, MAX_TEXT_CHARS), _allowed(name, info))
        elif isinstance(v, tuple):
            if len(v) > MAX_LIST_ITEMS:
                raise ValueError(f"{len(v)} items exceed the limit of {MAX_LIST_ITEMS}")
            for i, item in enumerate(v):
                try:
                    _check_text(item, MAX_ARG_CHARS if name == "command" else MAX_TEXT_CHARS, _allowed(name, info))
                except ValueError as exc:
                    raise ValueError(f"item {i}: {exc}") from None
        elif isinstance(v, dict):
            if len(v) > MAX_LIST_ITEMS:
                raise ValueError(f"{len(v)} entries exceed the limit of {MAX_LIST_ITEMS}")
            for key, item in v.items():
                if not _ENV_NAME.match(key):
                    raise ValueError(f"{show(key)} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*, max 128)")
                try:
                    _check_text(item, MAX_ARG_CHARS, _allowed(name, info))
                except ValueError as exc:
                    raise ValueError(f"{key}: {exc}") from None
        return v

    @property
    def pods(self) -> int:
        """Pods of the job (one per node): its PodSet's count."""
        return self.nodes or 1

    @property
    def gpus_per_pod(self) -> int:
        return self.gpus_per_node if self.gpus_per_node is not None else (self.gpu_count or 0)

    @field_validator("gpu_count", "nodes", "gpus_per_node", "cpu", "memory_gib", "max_cost", mode="before")
    @classmethod
    def _not_bool(cls, v: Any) -> Any:
        # YAML `true` is not 1 GPU; pydantic's lax mode would take it as one.
        if isinstance(v, bool):
            raise ValueError(f"must be a number, not a boolean ({str(v).lower()})")
        return v

    @field_validator("max_cost", mode="before")
    @classmethod
    def _money_text(cls, v: Any) -> Any:
        # A float becomes a Decimal through its shortest repr: `0.1` stays 0.1, `1e-10` stays 1E-10.
        if isinstance(v, float) and math.isfinite(v):
            return Decimal(repr(v))
        return v

    @field_validator("max_cost")
    @classmethod
    def _money(cls, v: Decimal | None) -> Decimal | None:
        if v is None:
            return v
        if not v.is_finite():
            raise ValueError("must be a finite amount")
        exponent = v.as_tuple().exponent
        places = max(0, -exponent) if isinstance(exponent, int) else 0
        if abs(v) >= Decimal(10) ** (MONEY_PRECISION - MONEY_SCALE):
            raise ValueError(f"{v} is too large (at most {MONEY_PRECISION - MONEY_SCALE} digits before the point)")
        if places > MONEY_SCALE and v != v.quantize(Decimal(1).scaleb(-MONEY_SCALE)):
            raise ValueError(
                f"{v} has {places} decimal places; the ledger stores money to {MONEY_SCALE} (round it)"
            )
        return v

    @field_validator("expected_duration", "timeout", "checkpoint_interval", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> timedelta | None:
        if v is None:
            return None
        d = parse_duration(v)
        if d <= timedelta(0):
            raise ValueError(f"must be a positive duration, not {show(v)}")
        if d > timedelta(days=3650):
            raise ValueError(f"{show(v)} is longer than 10 years")
        return d

    @field_validator("source_commit")
    @classmethod
    def _commit(cls, v: str | None) -> str | None:
        if v is not None and not _HEX40.match(v):
            raise ValueError("must be a full 40-character lowercase hex git commit")
        return v

    @field_validator("container_digest")
    @classmethod
    def _digest(cls, v: str | None) -> str | None:
        if v is not None and not _DIGEST.match(v):
            raise ValueError("must be 'sha256:' followed by 64 lowercase hex characters")
        return v

    @field_validator(*ID_LIST_FIELDS)
    @classmethod
    def _ids(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [x for x in v if not _ID.fullmatch(x)]
        if bad:
            raise ValueError(f"invalid id(s) {bad}: use letters, digits and ._:/- (max 200)")
        if len(set(v)) != len(v):
            raise ValueError("ids must be unique")
        return v

    @field_validator("retention_policy")
    @classmethod
    def _retention(cls, v: str | None) -> str | None:
        if v is not None and v != "lane_default":
            parse_duration(v)
        return v

    @property
    def display_name(self) -> str:
        """The name people read: `name`, else the request id (else "unnamed")."""
        return self.name or self.request_id or "unnamed"

    @property
    def target(self) -> str:
        """What the request works on: the first of TARGET_FIELDS it sets, else its first output
        artifact id, else "" (`cand-perception-2026.12-rc1`, `rel-2026.12-perception`)."""
        for name in TARGET_FIELDS:
            value = getattr(self, name)
            if value:
                return str(value)
        return self.output_artifact_ids[0] if self.output_artifact_ids else ""

    @property
    def image_ref(self) -> str:
        """The image pinned by digest (`repo@sha256:...`)."""
        return f"{self.image}@{self.container_digest}"

    @property
    def input_ids(self) -> tuple[str, ...]:
        out: list[str] = []
        for name in INPUT_ID_FIELDS:
            out.extend(getattr(self, name))
        return tuple(out)

    def retention(self, policy: Policy) -> timedelta:
        if self.retention_policy in (None, "lane_default"):
            return policy.lane(self.lane or "").default_retention
        return parse_duration(self.retention_policy)

    def to_json(self) -> str:
        return self.model_dump_json(exclude_none=True)

    @classmethod
    def from_json(cls, text: str) -> JobRequest:
        """A stored request. One recorded before control and bidi characters were refused still
        loads (every output escapes it: `gpu_platform.safeload.text`); NUL and lengths still hold."""
        return cls.model_validate_json(text, context={"stored": True})


def id_problem(value: str, what: str = "request id") -> str | None:
    """Why `value` is not an id (`_ID`: a letter or digit, then letters, digits and ._:/-, at most
    200), else None: the same rule as a request's `request_id` and artifact ids, applied wherever
    an id enters (`--request-id`, `explain`, `approve`, `lineage`, the Launchpad's config)."""
    if _ID.fullmatch(value):
        return None
    return f"{show(value)} is not a valid {what} (letters, digits and ._:/-, starting with a letter or digit, max 200)"


def _allowed(name: str, info: ValidationInfo) -> str | None:
    """The control characters field `name` may hold; None: any (a stored request, `from_json`)."""
    if isinstance(info.context, dict) and info.context.get("stored"):
        return None
    return TEXT_ALLOWED_CONTROLS.get(name, "")


def _check_text(v: Any, limit: int, allow: str | None = "") -> None:
    if not isinstance(v, str):
        return
    if len(v) > limit:
        raise ValueError(f"{len(v)} characters exceed the limit of {limit}")
    if "\x00" in v:
        raise ValueError("contains a NUL character (U+0000)")
    problem = char_problem(v, allow) if allow is not None else None
    if problem:
        raise ValueError(problem)


def _missing(value: Any) -> bool:
    return value is None or value == "" or (isinstance(value, list | tuple | dict) and len(value) == 0)


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + show_key(part)
    return out


def matching_flavors(
    policy: Policy, lane_name: str, gpu_type: str | None, resource: str = GPU, site: str | None = None
) -> list[str]:
    """Flavors (in the lane's order) that the lane has quota of `resource` on and that match gpu_type.

    site: the request's site; when the policy declares it under `sites:`, only that site's flavors
    (None, or a policy without sites: no restriction, the site is a label)."""
    key = ("matching_flavors", lane_name, gpu_type, resource, site)
    found = policy.derived.get(key)
    if found is None:
        found = policy.derived[key] = tuple(_matching_flavors(policy, lane_name, gpu_type, resource, site))
    return list(found)


def _matching_flavors(policy: Policy, lane_name: str, gpu_type: str | None, resource: str, site: str | None) -> list[str]:
    lane = policy.lanes.get(lane_name)
    if lane is None:
        return []
    on_site = site if site is not None and site in policy.sites else None
    out = []
    for name in lane.flavor_names:
        flavor = policy.flavor_by_name.get(name)
        if flavor is None or lane.quota(name, resource) is None:
            continue
        if on_site is not None and policy.site_of_flavor.get(name) != on_site:
            continue
        if gpu_type in (None, "any", flavor.name, flavor.gpu_product):
            out.append(name)
    return out


def site_problems(policy: Policy, lane: Any, req: JobRequest) -> list[str]:
    """A request's `site` under a policy with `sites:`: a declared site with a flavor the lane may
    use for its gpu_type (a policy without sites takes any site as a label)."""
    if not policy.sites or req.site is None:
        return []
    if req.site not in policy.sites:
        return [f"site: unknown site {show(req.site)} (sites of this policy: {', '.join(policy.sites)})"]
    if lane is None or not matching_flavors(policy, lane.name, req.gpu_type, req.gpu_resource):
        return []  # the lane or gpu_type problem is reported on its own field
    if not matching_flavors(policy, lane.name, req.gpu_type, req.gpu_resource, req.site):
        held = ", ".join(policy.site_flavors(req.site)) or "no flavor"
        return [
            f"site: lane {lane.name} has no quota of {req.gpu_resource} on site {req.site} for gpu_type "
            f"{req.gpu_type or 'any'!r} (site {req.site} holds {held}; the lane runs on "
            f"{', '.join(policy.lane_sites(lane.name)) or 'no site'})"
        ]
    return []


def _sharing_problems(policy: Policy, lane: Any, req: JobRequest) -> list[str]:
    """gpu_resource against the lane's sharing modes and the flavors that offer it."""
    res = req.gpu_resource
    if res == GPU and req.gpu_memory_gib is None:
        return []
    errors: list[str] = []
    if not is_gpu_resource(res):
        offered = sorted({r for f in policy.flavors for r in f.gpu_resources})
        return [f"gpu_resource: {res!r} is not a GPU resource (offered by this pool: {', '.join(offered)})"]
    mode = mode_of(res)
    if mode == "shared" and req.gpu_memory_gib is None:
        errors.append("gpu_memory_gib: required for shared GPUs (nvidia.com/gpu.shared): the memory the job stays under")
    if mode != "shared" and req.gpu_memory_gib is not None:
        errors.append(f"gpu_memory_gib: only for shared GPUs; {res} isolates memory itself")
    if lane is None:
        return errors
    if mode not in lane.sharing_modes:
        errors.append(
            f"gpu_resource: lane {lane.name} may not use {mode} GPUs ({res}); it allows: {', '.join(lane.sharing_modes)}"
        )
        return errors
    flavors = matching_flavors(policy, lane.name, req.gpu_type, res)
    if not flavors:
        choices = sorted({q.resource for q in lane.quotas if is_gpu_resource(q.resource)})
        errors.append(
            f"gpu_resource: lane {lane.name} has no quota of {res} on a flavor matching {req.gpu_type or 'any'!r} "
            f"(it has: {', '.join(choices)})"
        )
        return errors
    most = max(policy.flavor(f).offered.get(res, 0) for f in flavors)
    if req.gpu_count is not None and req.gpu_count > most:
        errors.append(f"gpu_count: {req.gpu_count} x {res} exceed every flavor that offers it (at most {most:g})")
    if mode == "shared" and req.gpu_memory_gib is not None:
        limit = min(policy.flavor(f).sharing.replica_memory_gib or 0 for f in flavors)
        if req.gpu_memory_gib > limit:
            errors.append(f"gpu_memory_gib: {req.gpu_memory_gib:g} exceeds the per-replica limit of {limit:g} GiB")
    return errors


def shaped_flavors(policy: Policy, req: JobRequest, flavors: list[str]) -> list[str]:
    """Of `flavors`, those that can place the request as recorded: its node size (when it has a
    shape), enough whole nodes, and its required topology level."""
    out = []
    for name in flavors:
        ns = policy.node_shape(name)
        count = req.gpu_count or 0
        if ns is None:
            if req.nodes is None or req.nodes == 1:
                out.append(name)
            continue
        if not ns.placeable(count):
            continue
        if req.nodes is not None and ns.shape_of(count) != (req.nodes, req.gpus_per_pod):
            continue
        if (req.nodes is None or req.nodes == 1) and count > ns.gpus_per_node:
            continue  # one pod: a node of this flavor must hold it
        if req.topology is not None and req.topology.required and req.topology.required not in ns.topology_levels:
            continue
        out.append(name)
    return out


def node_shape_problems(
    policy: Policy, lane_name: str, req: JobRequest, flavors: list[str]
) -> tuple[list[str], dict[str, Any]]:
    """Whether some flavor of the lane can ever place `gpu_count` (at most one node, or whole
    nodes it has), and the shape to record (`nodes`, `gpus_per_node`; empty without node shapes).

    When the placeable flavors have different node sizes, the first in the lane's order decides the
    shape and admission keeps the request to the flavors of that size."""
    count = req.gpu_count or 0
    errors: list[str] = []
    ok: list[tuple[str, Any]] = []
    why: list[str] = []
    for name in flavors:
        ns = policy.node_shape(name)
        if ns is None:
            if count <= policy.flavor(name).gpus:
                ok.append((name, None))
            else:
                why.append(f"{name} has {policy.flavor(name).gpus} GPUs in all")
            continue
        if count > ns.total_gpus:
            why.append(f"{name} has {ns.total_gpus} GPUs in all ({ns.full_nodes} nodes of {ns.gpus_per_node})")
        elif not ns.placeable(count):
            why.append(
                f"{name} has nodes of {ns.gpus_per_node} GPUs: ask for at most {ns.gpus_per_node} (one node) "
                f"or a multiple of {ns.gpus_per_node} up to {ns.full_nodes * ns.gpus_per_node}"
            )
        else:
            ok.append((name, ns))
    if not ok:
        errors.append(
            f"gpu_count: {count} GPUs cannot be placed on any flavor of lane {lane_name}: " + "; ".join(why)
        )
        return errors, {}
    name, ns = ok[0]
    if ns is None:
        if req.nodes not in (None, 1):
            errors.append(f"nodes: flavor {name} declares no node shape; a job on it is one pod (nodes: 1)")
        return errors, {}
    nodes, per = ns.shape_of(count)
    if req.nodes is not None and req.nodes != nodes:
        errors.append(f"nodes: {req.nodes} does not match gpu_count {count} on flavor {name}'s nodes of {ns.gpus_per_node} GPUs ({nodes} x {per})")
    if req.gpus_per_node is not None and req.gpus_per_node != per:
        errors.append(f"gpus_per_node: {req.gpus_per_node} does not match gpu_count {count} on flavor {name}'s nodes of {ns.gpus_per_node} GPUs ({nodes} x {per})")
    topo = req.topology
    if topo is not None:
        if (topo.required is None) == (topo.preferred is None):
            errors.append("topology: give exactly one of required, preferred")
        else:
            levels = sorted({lv for f, s in ok if s is not None for lv in s.topology_levels})
            if topo.level not in levels:
                errors.append(
                    f"topology.{topo.mode}: {show(topo.level)} is not a topology level of flavor {name} "
                    f"(its levels: {', '.join(ns.topology_levels) or 'none declared'})"
                )
    if nodes == 1:
        # a job of one node keeps its plain gpu_count (one pod); only a gang is written out
        return errors, ({"nodes": 1, "gpus_per_node": per} if req.nodes is not None else {})
    return errors, {"nodes": nodes, "gpus_per_node": per}


def validate_request(raw: Any, policy: Policy, source: str = "request") -> JobRequest:
    """Validate one request mapping against the policy; fail closed listing every problem."""
    if isinstance(raw, JobRequest):
        raw = raw.model_dump(exclude_none=True)
    if not isinstance(raw, dict):
        raise RequestError([f"<root>: expected a mapping of request fields, got {type(raw).__name__}"], source)
    shape = check_tree(raw, REQUEST_LIMITS)
    if shape:
        raise RequestError(shape, source)
    errors: list[str] = []
    bad_fields: set[str] = set()
    req: JobRequest | None = None
    try:
        req = JobRequest.model_validate(raw)
    except ValidationError as exc:
        for err in exc.errors():
            loc = _loc(err["loc"])
            bad_fields.add(str(err["loc"][0]) if err["loc"] else "")
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown field (check the spelling; see examples/requests/)"
            errors.append(f"{loc}: {msg}")

    partial = req
    if partial is None:
        try:
            partial = JobRequest.model_validate({k: v for k, v in raw.items() if k not in bad_fields})
        except ValidationError:
            partial = None

    lane_name = raw.get("lane")
    lane = policy.lanes.get(lane_name) if isinstance(lane_name, str) else None
    required = list(policy.common_required_fields)
    if lane is not None:
        required += [f for f in lane.required_fields if f not in required]
    for name in required:
        if name not in bad_fields and _missing(raw.get(name)):
            why = f"required by lane {lane.name}" if lane is not None and name in lane.required_fields else "required"
            errors.append(f"{name}: {why}")

    # the scale ladder (policy `scale`): from S4, its metadata is required even where the policy's lists omit it
    errors.extend(scale_metadata_problems(raw, policy, bad_fields | set(required)))

    if not _missing(lane_name) and lane is None:
        errors.append(f"lane: unknown lane {show(lane_name)} (one of: {', '.join(sorted(policy.lanes))})")
    team_name = raw.get("team")
    team = policy.teams.get(team_name) if isinstance(team_name, str) else None
    if not _missing(team_name) and team is None:
        errors.append(f"team: unknown team {show(team_name)} (one of: {', '.join(sorted(policy.teams))})")
    if team is not None:
        cc = raw.get("cost_center")
        if not _missing(cc) and cc != team.cost_center:
            errors.append(f"cost_center: {show(cc)} is not team {team.name}'s cost center {team.cost_center!r}")
        scope = raw.get("data_access_scope")
        if not _missing(scope) and scope not in team.data_access_scopes:
            errors.append(
                f"data_access_scope: team {team.name} may not use {show(scope)} (allowed: {', '.join(team.data_access_scopes)})"
            )

    if partial is not None:
        errors.extend(_sharing_problems(policy, lane, partial))
        errors.extend(site_problems(policy, lane, partial))
    shape: dict[str, Any] = {}
    if partial is not None and partial.gpu_resource == GPU:
        req_ = partial
        if req_.gpu_count is not None and req_.gpu_count > policy.largest_flavor_gpus:
            errors.append(
                f"gpu_count: {req_.gpu_count} GPUs do not fit the largest flavor ({policy.largest_flavor_gpus} GPUs)"
            )
        flavors: list[str] = []
        if lane is not None:
            flavors = matching_flavors(policy, lane.name, req_.gpu_type)
            on_site = matching_flavors(policy, lane.name, req_.gpu_type, site=req_.site)
            if on_site:
                # a site's request is shaped on its own site's nodes
                flavors = on_site
        if lane is not None and req_.gpu_type is not None:
            if not flavors:
                known = sorted({f.name for f in policy.flavors} | {f.gpu_product for f in policy.flavors})
                if req_.gpu_type not in known and req_.gpu_type != "any":
                    errors.append(f"gpu_type: unknown GPU type {show(req_.gpu_type)} (one of: any, {', '.join(known)})")
                else:
                    errors.append(f"gpu_type: lane {lane.name} has no quota on a flavor matching {req_.gpu_type!r}")
            elif req_.gpu_count is not None and req_.gpu_count <= policy.largest_flavor_gpus:
                biggest = max(policy.flavor(f).gpus for f in flavors)
                if req_.gpu_count > biggest:
                    errors.append(f"gpu_count: {req_.gpu_count} GPUs exceed every flavor matching {req_.gpu_type!r} (at most {biggest})")
        if lane is not None and flavors and req_.gpu_count is not None:
            node_errors, shape = node_shape_problems(policy, lane.name, req_, flavors)
            errors.extend(node_errors)
    elif partial is not None:
        for name in ("nodes", "gpus_per_node", "topology"):
            if getattr(partial, name) is not None:
                errors.append(f"{name}: only for whole GPUs ({GPU}); {partial.gpu_resource} is not placed per node")
    if partial is not None:
        req_ = partial
        if req_.expected_duration is not None and req_.timeout is not None and req_.expected_duration > req_.timeout:
            errors.append(f"expected_duration: {req_.expected_duration} exceeds timeout {req_.timeout}")
        if lane is not None and req_.timeout is not None and req_.timeout > lane.max_run_duration:
            errors.append(f"timeout: {req_.timeout} exceeds lane {lane.name}'s max_run_duration {lane.max_run_duration}")
        if req_.max_cost is not None and req_.max_cost <= 0:
            errors.append("max_cost: must be greater than 0")
        if lane is not None and req_.max_cost is not None and req_.max_cost > lane.budget:
            errors.append(f"max_cost: {req_.max_cost} exceeds lane {lane.name}'s whole budget {lane.budget} {policy.currency}")
        if lane is not None and lane.name == "incident_response" and req_.evidence_hold is False:
            errors.append("evidence_hold: incident_response jobs keep their evidence under hold; must be true")
    errors.extend(service_problems(policy, lane, raw, partial, bad_fields))
    if errors:
        raise RequestError([one_line(e) for e in dict.fromkeys(errors)], source)
    assert req is not None
    if shape:
        req = req.model_copy(update=shape)
    if req.workload is None and lane is not None:
        req = req.model_copy(update={"workload": "service" if lane.serving else lane.default_workload})
    return req


def lane_gpu_room(policy: Policy, lane_name: str, flavors: list[str], resource: str) -> float:
    """The most of `resource` a lane can ever hold on `flavors`: per flavor, its nominal quota plus
    its borrowing limit (no limit: the flavor's whole offer), capped by what the flavor offers."""
    lane = policy.lanes[lane_name]
    total = 0.0
    for name in flavors:
        q = lane.quota(name, resource)
        offered = policy.flavor(name).offered.get(resource, 0)
        if q is None:
            continue
        reach = offered if q.borrowing_limit is None else q.nominal_quota + q.borrowing_limit
        total += min(offered, reach) if lane.cohort_name is not None else min(offered, q.nominal_quota)
    return total


def service_problems(
    policy: Policy, lane: Any, raw: dict[str, Any], req: JobRequest | None, bad_fields: set[str]
) -> list[str]:
    """A service request against its lane: `service:` in a serving lane only and always there,
    `workload: service` exactly there, a Kubernetes name, and min (and max) replicas the lane can
    ever hold (a min that never fits would wait forever; replicas above what fits could never be
    admitted, so the autoscaler's max would be a promise the lane breaks)."""
    errors: list[str] = []
    has_service = not _missing(raw.get("service"))
    workload = raw.get("workload")
    if lane is not None and lane.serving:
        if not has_service and "service" not in bad_fields:
            errors.append(
                f"service: required by serving lane {lane.name} (model_id, replicas: {{min, max}}, "
                "slo: {p95_latency_ms, target_qps_per_replica})"
            )
        if isinstance(workload, str) and workload != "service" and "workload" not in bad_fields:
            errors.append(f"workload: lane {lane.name} is a serving lane; its requests are services (workload: service)")
    elif lane is not None:
        serving = ", ".join(sorted(n for n, lane_ in policy.lanes.items() if lane_.serving)) or "none in this policy"
        if has_service:
            errors.append(f"service: only for requests in a serving lane; lane {lane.name} is not one (serving lanes: {serving})")
        if workload == "service":
            errors.append(f"workload: service runs in a serving lane; lane {lane.name} is not one (serving lanes: {serving})")
    if req is None or req.service is None or lane is None or not lane.serving:
        return errors
    spec = req.service
    if service_name(spec, req.name) is None:
        errors.append(
            f"name: a service is named by service.name or the request's name, which must be a DNS-1035 label "
            f"(lower-case letters, digits and '-', starting with a letter, at most 63); got {show(req.name or '')}"
        )
    count = req.gpu_count
    if count is None:
        return errors
    flavors = matching_flavors(policy, lane.name, req.gpu_type, req.gpu_resource, req.site)
    if not flavors:
        return errors  # reported on gpu_type / gpu_resource
    room = lane_gpu_room(policy, lane.name, flavors, req.gpu_resource)
    for which in ("min", "max"):
        n = getattr(spec.replicas, which)
        if n * count > room:
            errors.append(
                f"service.replicas.{which}: {n} replicas x {count} {req.gpu_resource} = {n * count} exceed the "
                f"{room:g} lane {lane.name} can ever hold on {', '.join(flavors)} (nominal quota plus borrowing limit)"
            )
    return errors


def local_inventory_problems(req: JobRequest, gpus: int, detail: str) -> list[str]:
    """Whole GPUs beyond this machine's inventory, for the local executor, which runs a job on this
    machine only (`gpus`: its GPU count; `detail`: where the count came from). A cluster would place
    the same request on its nodes; here it could only wait forever."""
    if req.gpu_resource != GPU or req.gpu_count is None or req.gpu_count <= gpus:
        return []
    shape = f" ({req.nodes} nodes x {req.gpus_per_node})" if req.nodes and req.nodes > 1 else ""
    return [
        f"gpu_count: {req.gpu_count} GPUs{shape} exceed this machine's {gpus} for the local executor "
        f"({detail}); ask for at most {gpus}, or submit it where the platform runs on a cluster"
    ]


SAFETY_APPROVAL_WARNING = (
    "safety_approval: recorded but grants nothing; a safety approval must be granted with "
    "`gpu-platform approve REQUEST_ID --role ROLE --kind safety --reason TEXT` by a role of the "
    "policy's approvers"
)


def request_warnings(req: JobRequest) -> list[str]:
    """What is accepted but does not do what it may look like it does (printed, never fatal)."""
    return [SAFETY_APPROVAL_WARNING] if req.safety_approval else []


def load_request_file(path: str | Path) -> Any:
    """Read a YAML or JSON request file within `REQUEST_LIMITS`; RequestError names each problem's
    line (or byte offset for text that is not UTF-8)."""
    try:
        return load_document(path, REQUEST_LIMITS)
    except InputError as exc:
        raise RequestError(exc.errors, exc.source) from None


def name_from_file(path: str | Path) -> str | None:
    """A request's name from its file name: the stem, characters outside the name's alphabet
    replaced by `-`, at most NAME_MAX_CHARS (None when nothing readable is left)."""
    stem = _NAME_BAD.sub("-", Path(path).stem).lstrip(" -._:/@+()")[:NAME_MAX_CHARS].rstrip()
    return stem if stem and _NAME.match(stem) else None


def validate_request_file(path: str | Path, policy: Policy) -> JobRequest:
    """Validate a request file; a file without `name:` is named after the file (`name_from_file`)."""
    raw = load_request_file(path)
    if isinstance(raw, dict) and _missing(raw.get("name")):
        derived = name_from_file(path)
        if derived:
            raw = {**raw, "name": derived}
    return validate_request(raw, policy, str(path))
