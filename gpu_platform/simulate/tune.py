"""The policy tuner: search a policy's numeric knobs against its lane targets on a job trace.

`gpu-platform policy tune` (docs/simulator.md, "Tuning a policy") runs the real engine through
the simulator for every candidate policy, on a sample of the trace, and lets Optuna's TPE sampler
(multi-objective, with constraints) choose the next candidate:

- objectives: maximize the pool's utilization, minimize the GPU-hours lost to preemption;
- constraints (each must be <= 0): every lane target of the policy (`lanes.<lane>.targets`,
  judged as `simulate` judges them), utilization at most `max_utilization_gap` below FIFO with
  backfill on the same sample, and no more jobs never admitted than FIFO with backfill leaves;
  with a service beside the trace (`Problem.serving`, `policy tune --service`), its share of time
  below the demand's need at most its target (docs/serving.md, Simulating traffic).

The knobs (`discover`), all read from the policy itself, in the policy's own units (before any
`--capacity` scaling):
- per lane that has jobs in the trace, per whole-GPU quota row: `nominal_quota`,
  `borrowing_limit` and `lending_limit` (a limit at the flavor's capacity is written as no limit);
- per such lane and whole-GPU flavor it has no row for: a nominal quota of its own there (0: none)
  and, without one, a borrow-only row (`nominal_quota: 0`) with a borrowing limit, or no row (0);
  a job that names a GPU type still only gets that type;
- per lane with jobs: `reclaim_within_cohort` (Never, LowerPriority, Any) and, where the lane has
  `borrow_within_cohort`, its `max_priority_threshold`;
- per lane without jobs and per cohort, the `lending_limit` of its whole-GPU rows (what the
  trace's lanes may borrow from it);
- with a service beside the trace (`discover(..., with_service=True)`) and an evidence lane with
  jobs, per serving lane `lend_to_evidence` (false, true): only then,
  since only the service's own constraint shows what lending to runs it must wait for costs it.
Every candidate is repaired where the policy's rules tie knobs together (nominal quotas within
a flavor's capacity, lending within nominal, a warm pool's lane keeping room for its GPUs) and
validated before it is simulated: one validation still refuses costs no trial (`search`).
Several tuning inputs (other traces, or parts of one) may be given: each candidate is judged on
all of them and its constraints are the worst across them (`Evaluation.violation`, the robust
objective), so a policy cannot win on one trace by missing on another. `policy tune` then reports
the tuned policy on jobs it was not tuned on (the jobs after the sample, or other traces). The
search is seeded with the input policy, with "lend idle" (every borrowing limit open,
borrow-only rows open, reclaim `Any` for lanes with quota to take back) and with "share by demand"
(lend idle, each flavor's searched nominal quota split among the trace's lanes by their share of
its GPU-hours, urgent lanes keeping theirs), so the tuner can only improve on the input and
starts from the structures that usually win; TPE explores from there.
The tuned policy is written by editing the input file in place (comments and order kept), so
`policy.diff` shows exactly the knobs that moved.
"""

from __future__ import annotations

import copy
import difflib
import io
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from gpu_platform.policy import GPU, Policy, PolicyError
from gpu_platform.policy.loading import parse_policy_document
from gpu_platform.safeload.files import write_file
from gpu_platform.simulate.des import simulate
from gpu_platform.simulate.report import lane_report
from gpu_platform.simulate.scenarios import SCENARIOS
from gpu_platform.simulate.targets import BASELINE, judge
from gpu_platform.simulate.trace import TraceJob
from gpu_platform.units import parse_duration

RECLAIM = ("Never", "LowerPriority", "Any")
URGENT_WAIT = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class Knob:
    """One searched value. kind: `int` (low..high), `limit` (0..high; high = no limit), `row`
    (0 = no row, 1..high-1 = a borrow-only row with that borrowing limit, high = no limit),
    `choice` (one of `choices`)."""

    name: str
    kind: str
    scope: str  # lanes | cohorts
    owner: str
    field: str
    flavor: str | None = None
    low: int = 0
    high: int = 0
    choices: tuple[str, ...] = ()
    step: int = 1


def _gpu_capacity(raw: dict[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for f in raw.get("flavors") or []:
        cap = (f.get("capacity") or {}).get(GPU)
        if cap is None or (f.get("sharing") or {}).get("mode") not in (None, "exclusive"):
            continue  # MIG slices and shared GPUs are not whole GPUs
        out[f["name"]] = int(cap)
    return out


def _rows(entry: dict[str, Any]) -> list[dict[str, Any]]:
    return [q for q in entry.get("quotas") or [] if q.get("resource", GPU) == GPU]


FLAG = ("false", "true")


def discover(raw: dict[str, Any], trace_lanes: Iterable[str], with_service: bool = False) -> list[Knob]:
    """The knobs of a policy document for a trace whose jobs are in `trace_lanes` (with_service: a
    service runs beside the trace, so a serving lane's `lend_to_evidence` is searched too)."""
    caps = _gpu_capacity(raw)
    busy = set(trace_lanes)
    knobs: list[Knob] = []
    lanes = raw.get("lanes") or {}
    for lane, entry in lanes.items():
        rows = {q.get("flavor_name"): q for q in _rows(entry) if q.get("flavor_name") in caps}
        if lane not in busy:
            for fl in rows:
                knobs.append(Knob(f"lanes.{lane}.{fl}.lending_limit", "limit", "lanes", lane, "lending_limit", fl, 0, caps[fl]))
            evidence = any((lanes.get(other) or {}).get("evidence") for other in busy)
            if with_service and entry.get("serving") is True and evidence:
                knobs.append(Knob(f"lanes.{lane}.lend_to_evidence", "choice", "lanes", lane, "lend_to_evidence",
                                  choices=FLAG))
            continue
        if entry.get("protected"):
            continue  # never a victim, never lent to: its rows stay as written
        for fl in rows:
            cap = caps[fl]
            knobs.append(Knob(f"lanes.{lane}.{fl}.nominal_quota", "int", "lanes", lane, "nominal_quota", fl, 0, cap))
            knobs.append(Knob(f"lanes.{lane}.{fl}.borrowing_limit", "limit", "lanes", lane, "borrowing_limit", fl, 0, cap))
            knobs.append(Knob(f"lanes.{lane}.{fl}.lending_limit", "limit", "lanes", lane, "lending_limit", fl, 0, cap))
        for fl, cap in caps.items():
            if fl not in rows:
                # a row the lane lacks: its nominal quota (0: none of its own) and, without one,
                # whether it may borrow there (a borrow-only row)
                knobs.append(Knob(f"lanes.{lane}.{fl}.nominal_quota", "int", "lanes", lane, "nominal_quota", fl, 0, cap))
                knobs.append(Knob(f"lanes.{lane}.{fl}.borrow_only", "row", "lanes", lane, "borrow_only", fl, 0, cap))
        if entry.get("cohort_name") is not None:
            knobs.append(Knob(f"lanes.{lane}.reclaim_within_cohort", "choice", "lanes", lane, "reclaim_within_cohort",
                              choices=RECLAIM))
            bwc = (entry.get("preemption") or {}).get("borrow_within_cohort")
            if isinstance(bwc, dict) and bwc.get("policy", "Never") != "Never":
                # steps of 50 through the written threshold (299: 49, 99, ..., 999), so the input
                # policy is a point of the search
                cur = bwc.get("max_priority_threshold")
                low = int(cur) % 50 if isinstance(cur, int) and 0 <= cur <= 1000 else 0
                knobs.append(Knob(f"lanes.{lane}.max_priority_threshold", "int", "lanes", lane,
                                  "max_priority_threshold", None, low, low + (1000 - low) // 50 * 50, step=50))
    for co in raw.get("cohorts") or []:
        for q in _rows(co):
            fl = q.get("flavor_name")
            if fl in caps:
                knobs.append(Knob(f"cohorts.{co['name']}.{fl}.lending_limit", "limit", "cohorts", co["name"],
                                  "lending_limit", fl, 0, 2 * caps[fl]))
    return knobs


def _owner(doc: Any, k: Knob) -> Any:
    if k.scope == "lanes":
        return doc["lanes"][k.owner]
    for co in doc["cohorts"]:
        if co["name"] == k.owner:
            return co
    raise KeyError(k.owner)


def _row_of(entry: Any, flavor: str) -> Any | None:
    for q in entry.get("quotas") or []:
        if q.get("flavor_name") == flavor and q.get("resource", GPU) == GPU:
            return q
    return None


def current(raw: dict[str, Any], knobs: list[Knob]) -> dict[str, Any]:
    """The knobs' values in a policy document (the search's first candidate)."""
    out: dict[str, Any] = {}
    for k in knobs:
        entry = _owner(raw, k)
        if k.field == "lend_to_evidence":
            out[k.name] = FLAG[bool(entry.get(k.field))]
        elif k.kind == "choice":
            out[k.name] = (entry.get("preemption") or {}).get(k.field, "Never")
        elif k.field == "max_priority_threshold":
            bwc = (entry.get("preemption") or {}).get("borrow_within_cohort") or {}
            v = bwc.get("max_priority_threshold")
            out[k.name] = k.high if v is None else min(k.high, int(v))
        elif k.kind == "row":
            out[k.name] = 0
        else:
            q = _row_of(entry, k.flavor)  # type: ignore[arg-type]
            v = None if q is None else q.get(k.field)
            if k.kind == "limit":
                out[k.name] = k.high if v is None else min(k.high, int(v))
            else:
                out[k.name] = 0 if v is None else min(k.high, int(v))
    return out


def lend_idle(raw: dict[str, Any], knobs: list[Knob]) -> dict[str, Any]:
    """The "lend idle" seed: the input's nominal quotas, every borrowing limit open, every
    borrow-only row open, lending limits as written, reclaim `Any` where a lane has quota, serving
    lanes lending to evidence runs too."""
    out = current(raw, knobs)
    for k in knobs:
        if k.field == "borrowing_limit" or k.kind == "row":
            out[k.name] = k.high
        elif k.field == "lend_to_evidence":
            out[k.name] = "true"
        elif k.kind == "choice":
            has_quota = any(out.get(f"lanes.{k.owner}.{fl}.nominal_quota", 0) > 0 for fl in _gpu_capacity(raw))
            out[k.name] = "Any" if has_quota else out[k.name]
    return out


def demand_share(raw: dict[str, Any], knobs: list[Knob], jobs: Iterable[TraceJob]) -> dict[str, Any]:
    """The "share by demand" seed: "lend idle", with each flavor's searched nominal quota (what the
    trace's lanes hold there together; fixed rows stay as written) split among those lanes by
    their share of the trace's GPU-hours (rounded down, the rest to the largest), so the lanes
    that run most own most and borrow least. Urgent lanes (a `wait_p95` target of at most
    `URGENT_WAIT`) keep the quota they reserve: their small demand is not what it is for."""
    out = lend_idle(raw, knobs)
    demand: dict[str, float] = {}
    for j in jobs:
        demand[j.lane] = demand.get(j.lane, 0.0) + j.gpus * j.duration_s
    urgent = set()
    for lane, entry in (raw.get("lanes") or {}).items():
        wait = (entry.get("targets") or {}).get("wait_p95")
        if wait is not None and parse_duration(wait) <= URGENT_WAIT:
            urgent.add(lane)
    by_flavor: dict[str, list[Knob]] = {}
    for k in knobs:
        if k.field == "nominal_quota" and k.scope == "lanes" and k.owner not in urgent:
            by_flavor.setdefault(k.flavor or "", []).append(k)
    for ks in by_flavor.values():
        pool = sum(int(out[k.name]) for k in ks)
        total = sum(demand.get(k.owner, 0.0) for k in ks)
        if pool <= 0 or total <= 0:
            continue
        shares = {k.name: int(pool * demand.get(k.owner, 0.0) / total) for k in ks}
        top = max(ks, key=lambda k: (demand.get(k.owner, 0.0), k.name))
        shares[top.name] += pool - sum(shares.values())
        out.update(shares)
    return out


def apply(doc: Any, knobs: list[Knob], values: dict[str, Any], new_map: Callable[[dict], Any] = dict) -> Any:
    """Write `values` into `doc` (a plain or a round-trip YAML mapping) in place; returns doc."""
    for k in knobs:
        if k.name not in values:
            continue
        v = values[k.name]
        entry = _owner(doc, k)
        if k.field == "lend_to_evidence":
            entry[k.field] = v == "true"
        elif k.kind == "choice":
            pre = entry.get("preemption")
            if pre is None:
                entry["preemption"] = pre = new_map({})
            pre[k.field] = v
        elif k.field == "max_priority_threshold":
            entry["preemption"]["borrow_within_cohort"]["max_priority_threshold"] = int(v)
        elif k.kind == "row":
            quotas = entry.setdefault("quotas", [])
            q = _row_of(entry, k.flavor)  # type: ignore[arg-type]
            if q is not None and (q.get("nominal_quota") or 0) > 0:
                continue  # the lane got quota of its own there (its nominal knob): not borrow-only
            if int(v) <= 0:
                if q is not None:
                    quotas.remove(q)
                continue
            if q is None:
                q = _new_row(entry, k.flavor, new_map)  # type: ignore[arg-type]
            q.pop("borrowing_limit", None)
            if int(v) < k.high:
                q["borrowing_limit"] = int(v)
        else:
            q = _row_of(entry, k.flavor)  # type: ignore[arg-type]
            if q is None and k.field == "nominal_quota" and int(v) > 0:
                q = _new_row(entry, k.flavor, new_map)  # type: ignore[arg-type]
            if q is None:
                continue
            if k.kind == "limit" and int(v) >= k.high:
                q.pop(k.field, None)
            else:
                q[k.field] = int(v)
    # a lane may not lend more than its nominal quota: clip the lending limit to it
    for lane in (doc.get("lanes") or {}).values():
        for q in lane.get("quotas") or []:
            lend, nom = q.get("lending_limit"), q.get("nominal_quota")
            if isinstance(lend, int | float) and isinstance(nom, int | float) and lend > nom:
                q["lending_limit"] = nom
    return doc


def _new_row(entry: Any, flavor: str, new_map: Callable[[dict], Any]) -> Any:
    """A whole-GPU row of `flavor` with no quota yet, after the lane's other whole-GPU rows (so
    flavors are tried in the file's order)."""
    quotas = entry.setdefault("quotas", [])
    at = max((i + 1 for i, r in enumerate(quotas) if r.get("resource", GPU) == GPU), default=0)
    quotas.insert(at, new_map({"flavor_name": flavor, "resource": GPU, "nominal_quota": 0}))
    return quotas[at]


def repair(raw: dict[str, Any], knobs: list[Knob], values: dict[str, Any]) -> dict[str, Any]:
    """`values` made valid where the policy's rules tie knobs together: per flavor, the nominal
    quotas of lanes and cohorts fit its capacity (the largest searched ones give way first) and a
    lane lends at most its nominal quota."""
    out = dict(values)
    caps = _gpu_capacity(raw)
    nominal_knobs = {k.name: k for k in knobs if k.field == "nominal_quota"}
    for fl, cap in caps.items():
        fixed = 0
        for lane, entry in (raw.get("lanes") or {}).items():
            q = _row_of(entry, fl)
            if q is not None and f"lanes.{lane}.{fl}.nominal_quota" not in nominal_knobs:
                fixed += q.get("nominal_quota", 0) or 0
        for co in raw.get("cohorts") or []:
            q = _row_of(co, fl)
            if q is not None:
                fixed += q.get("nominal_quota", 0) or 0
        mine = sorted((n for n, k in nominal_knobs.items() if k.flavor == fl and n in out))
        while mine and fixed + sum(out[n] for n in mine) > cap:
            top = max(mine, key=lambda n: (out[n], n))
            if out[top] <= 0:
                break
            out[top] -= 1
    _keep_warm_pools(raw, knobs, out)
    for k in knobs:
        if k.field == "lending_limit" and k.scope == "lanes" and k.name in out:
            nom = out.get(f"lanes.{k.owner}.{k.flavor}.nominal_quota")
            if nom is None:
                q = _row_of(raw["lanes"][k.owner], k.flavor)  # type: ignore[arg-type]
                nom = None if q is None else q.get("nominal_quota")
            if nom is not None and out[k.name] < k.high and out[k.name] > nom:
                out[k.name] = int(nom)
    return out


def _keep_warm_pools(raw: dict[str, Any], knobs: list[Knob], out: dict[str, Any]) -> None:
    """Policy validation requires a warm pool's lane to hold at least its `gpus` in the pool's node
    pool (nominal quota plus borrowing limit over the lane's rows there): where a candidate leaves
    less, open the borrowing limit (or the borrow-only row) of the lane's first such flavor, so no
    trial is spent on a candidate validation would refuse (`autoscaling.warm_pools[i].gpus`)."""
    block = raw.get("autoscaling") or {}
    pool_of = {f.get("name"): f.get("node_pool") for f in raw.get("flavors") or [] if isinstance(f, dict)}
    by_name = {k.name: k for k in knobs}
    for w in block.get("warm_pools") or []:
        if not isinstance(w, dict) or not isinstance(w.get("gpus"), int | float):
            continue
        lane, pool = w.get("lane"), w.get("node_pool")
        entry = (raw.get("lanes") or {}).get(lane)
        if not isinstance(entry, dict):
            continue
        flavors = [f for f, p in pool_of.items() if p == pool]
        held = 0.0
        opener: str | None = None
        for fl in flavors:
            q = _row_of(entry, fl)
            nk, bk, rk = (f"lanes.{lane}.{fl}.{f}" for f in ("nominal_quota", "borrowing_limit", "borrow_only"))
            nom = out[nk] if nk in out else (None if q is None else q.get("nominal_quota") or 0)
            if rk in by_name and (q is None or not (q.get("nominal_quota") or 0)) and not nom:
                # a row the lane may lack: its borrow-only knob decides whether it exists
                v = out.get(rk, 0)
                held += 0.0 if v <= 0 else (math.inf if v >= by_name[rk].high else float(v))
                opener = opener or rk
                continue
            if q is None and not nom:
                continue
            if bk in out:
                lim = math.inf if out[bk] >= by_name[bk].high else float(out[bk])
                opener = opener or bk
            else:
                b = None if q is None else q.get("borrowing_limit")
                lim = math.inf if b is None else float(b)
            held += float(nom or 0) + lim
        if held < w["gpus"] and opener is not None:
            out[opener] = by_name[opener].high


@dataclass(slots=True)
class Evaluation:
    values: dict[str, Any]
    utilization: float | None = None
    lost_gpu_hours: float | None = None
    violations: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    report: dict[str, Any] | None = None
    targets: dict[str, Any] | None = None
    by_input: dict[str, dict[str, float]] = field(default_factory=dict)
    """Each tuning input's constraint excesses (`violations` holds the worst across them)."""

    @property
    def feasible(self) -> bool:
        return self.error is None and all(v <= 0 for v in self.violations.values())

    @property
    def violation(self) -> float:
        """The robust objective: the worst normalized excess over every constraint and every
        tuning input (0: all met), never a sum that one large margin elsewhere could hide."""
        return math.inf if self.error else max((max(0.0, v) for v in self.violations.values()), default=0.0)


@dataclass(slots=True)
class Input:
    """One tuning input: a named list of jobs (a trace's sample, or a part of it) and FIFO with
    backfill's report on it (computed by `Problem`)."""

    name: str
    jobs: list[TraceJob]
    baseline: dict[str, Any] = field(default_factory=dict)
    capacity: float | None = None
    """The pool this input is judged on (its cluster's size); None: the problem's `capacity`."""


@dataclass(slots=True)
class Problem:
    """What every candidate is judged against: the tuning inputs, the pool and the baseline.

    jobs: the (first) tuning input; `inputs`: more of them (other traces' samples, or parts of one
    trace). A candidate is judged on every input and its constraints are the worst across them
    (`Evaluation.violation`), so the search cannot buy one input's margin with another's miss."""

    raw: dict[str, Any]
    jobs: list[TraceJob]
    capacity: float | None
    max_utilization_gap: float
    checkpoint_interval_s: float = 1800.0
    tick: float = 0.0
    baseline: dict[str, Any] = field(default_factory=dict)
    inputs: list[Input] = field(default_factory=list)
    serving: Any = None
    """A service run beside every input (`simulate.serving.ServingTarget`): its share of time below
    need is one more constraint; None: batch only."""

    def __post_init__(self) -> None:
        pol = parse_policy_document(copy.deepcopy(self.raw), "policy")
        first = Input("sample", self.jobs, self.baseline)
        self.inputs = [first, *self.inputs]
        for inp in self.inputs:
            if not inp.baseline:
                inp.baseline = lane_report(simulate(SCENARIOS[BASELINE](pol, self.pool(inp)), inp.jobs, tick=self.tick))
        self.baseline = first.baseline

    def pool(self, inp: Input) -> float | None:
        return self.capacity if inp.capacity is None else inp.capacity

    def policy(self, knobs: list[Knob], values: dict[str, Any]) -> Policy:
        return parse_policy_document(apply(copy.deepcopy(self.raw), knobs, values), "tuned policy")

    def validate(self, knobs: list[Knob], values: dict[str, Any]) -> str | None:
        """The first policy-validation error of a (repaired) candidate, or None: checked before any
        simulation, so an invalid candidate costs no trial."""
        try:
            self.policy(knobs, values)
        except PolicyError as exc:
            return exc.errors[0] if exc.errors else "invalid"
        return None

    def evaluate(self, knobs: list[Knob], values: dict[str, Any]) -> Evaluation:
        values = repair(self.raw, knobs, values)
        ev = Evaluation(dict(values))
        try:
            pol = self.policy(knobs, values)
        except PolicyError as exc:
            ev.error = exc.errors[0] if exc.errors else "invalid"
            return ev
        utils: list[float] = []
        lost = 0.0
        for inp in self.inputs:
            scn = SCENARIOS["policy"](pol, self.pool(inp))
            kw = {"tick": self.tick, "checkpoint_interval_s": self.checkpoint_interval_s}
            served = None
            if self.serving is not None:
                res, served = self.serving.run(scn, inp.jobs, **kw)
            else:
                res = simulate(scn, inp.jobs, **kw)
            rep = lane_report(res)
            targets = judge(pol, {"policy": rep, BASELINE: inp.baseline})
            ev.by_input[inp.name] = violations(rep, targets, inp.baseline, self.max_utilization_gap)
            if served is not None:
                rep["serving"] = served
                ev.by_input[inp.name].update(self.serving.violations(served))
            utils.append(rep["total"]["gpu_utilization"] or 0.0)
            lost += rep["total"]["gpu_hours_lost_to_preemption"]
            if ev.report is None:
                ev.report, ev.targets = rep, targets
        ev.utilization = sum(utils) / len(utils)
        ev.lost_gpu_hours = lost
        worst: dict[str, float] = {}
        for v in ev.by_input.values():
            for k, x in v.items():
                worst[k] = max(worst.get(k, -math.inf), x)
        ev.violations = worst
        return ev


def violations(rep: dict[str, Any], targets: dict[str, Any], baseline: dict[str, Any], gap: float) -> dict[str, float]:
    """Each constraint's excess, normalized (<= 0: met): waits per minute of their limit (at least
    one), shares per share of their limit, utilization per point, never-admitted per job."""
    out: dict[str, float] = {}
    for lane, rows in targets["lanes"].items():
        for r in rows:
            if r["met"] is None:
                continue
            limit, value = r["limit"], r["value"]
            scale = max(60.0, limit) if r["unit"] == "s" else max(1e-3, limit)
            out[f"{lane}.{r['target']}"] = (value - limit) / scale
    fifo = baseline["total"]["gpu_utilization"] or 0.0
    out["utilization"] = 100 * ((fifo - gap) - (rep["total"]["gpu_utilization"] or 0.0))
    out["never_admitted"] = float(rep["total"]["never_admitted"] - baseline["total"]["never_admitted"])
    return out


def binding(ev: Evaluation) -> str | None:
    """The constraint a candidate misses by most (normalized as `violations`); None: meets all, or
    failed validation (its error says why)."""
    over = {k: v for k, v in ev.violations.items() if v > 0}
    return max(over, key=lambda k: over[k]) if over else None


def verdict(evals: list[Evaluation], chosen: Evaluation, invalid: int = 0) -> dict[str, Any]:
    """What the search found, said plainly: whether any candidate met every constraint on the
    tuning inputs, and when none did, the binding constraint of the least-violating one (and, with
    several inputs, the input where it binds) and whether the result differs from the input at all
    (never an empty diff presented as a result). invalid: candidates refused by validation before
    simulation (`search`'s `invalid`)."""
    feasible = sum(e.feasible for e in evals)
    out: dict[str, Any] = {
        "feasible_candidates": feasible,
        "invalid_candidates": sum(e.error is not None for e in evals) + invalid,
    }
    if feasible:
        out["result"] = "feasible"
    else:
        out["result"] = "infeasible"
        out["binding"] = binding(chosen)
        out["binding_excess"] = chosen.violations.get(out["binding"]) if out["binding"] else None
        if out["binding"] and len(chosen.by_input) > 1:
            b = out["binding"]
            out["binding_input"] = max(chosen.by_input, key=lambda n: chosen.by_input[n].get(b, -math.inf))
        out["unchanged_from_input"] = bool(evals) and chosen.values == evals[0].values
    return out


def pareto(evals: list[Evaluation]) -> list[Evaluation]:
    """The non-dominated evaluations on (utilization up, lost GPU-hours down), among the feasible
    ones (all evaluated ones when none is feasible), best utilization first."""
    pool = [e for e in evals if e.feasible] or [e for e in evals if e.error is None]
    front = []
    for e in pool:
        dominated = any(
            (o.utilization >= e.utilization and o.lost_gpu_hours <= e.lost_gpu_hours)  # type: ignore[operator]
            and (o.utilization > e.utilization or o.lost_gpu_hours < e.lost_gpu_hours)  # type: ignore[operator]
            for o in pool
        )
        if not dominated:
            front.append(e)
    front.sort(key=lambda e: (-(e.utilization or 0.0), e.lost_gpu_hours))
    return front


def choose(evals: list[Evaluation]) -> Evaluation:
    """The tuned candidate: the feasible one with the best utilization (then the least lost work);
    when none is feasible, the one with the smallest total violation."""
    feasible = [e for e in evals if e.feasible]
    if feasible:
        return min(feasible, key=lambda e: (-(e.utilization or 0.0), e.lost_gpu_hours))
    return min(evals, key=lambda e: (e.violation, -(e.utilization or 0.0)))


def search(
    problem: Problem,
    knobs: list[Knob],
    trials: int,
    seed: int = 0,
    timeout_s: float | None = None,
    on_trial: Callable[[int, Evaluation], None] | None = None,
    invalid: list[Evaluation] | None = None,
) -> list[Evaluation]:
    """Run the search; returns every simulated evaluation in trial order (the seeds first).

    Each candidate is repaired (`repair`) and validated before it is simulated: one that policy
    validation still refuses is told to the sampler as failed, appended to `invalid` (when given)
    and does not count as a trial; at most `20 x trials` candidates are drawn in all."""
    import time

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    evals: list[Evaluation] = []
    sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=min(10, max(2, trials // 4)))
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    raw = problem.raw
    for values in (current(raw, knobs), lend_idle(raw, knobs), demand_share(raw, knobs, problem.jobs)):
        study.enqueue_trial(values, skip_if_exists=True)
    started = time.monotonic()
    drawn = 0
    while len(evals) < trials and drawn < 20 * trials:
        if timeout_s is not None and time.monotonic() - started > timeout_s:
            break
        drawn += 1
        trial = study.ask()
        values: dict[str, Any] = {}
        for k in knobs:
            if k.kind == "choice":
                values[k.name] = trial.suggest_categorical(k.name, list(k.choices))
            else:
                values[k.name] = trial.suggest_int(k.name, k.low, k.high, step=k.step)
        fixed = repair(raw, knobs, values)
        error = problem.validate(knobs, fixed)
        if error is not None:
            if invalid is not None:
                invalid.append(Evaluation(fixed, error=error))
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            continue
        ev = problem.evaluate(knobs, values)
        evals.append(ev)
        # one constraint, the robust one: the worst excess when something is missed, else the
        # tightest margin (both across every tuning input)
        c = max(ev.violations.values(), default=0.0) if ev.feasible else ev.violation
        trial.set_constraint("targets", c)  # Optuna's constrained optimization: feasible when <= 0
        study.tell(trial, [ev.utilization or 0.0, ev.lost_gpu_hours or 0.0])
        if on_trial is not None:
            on_trial(len(evals), ev)
    return evals


def tuned_text(source_text: str, knobs: list[Knob], values: dict[str, Any]) -> str:
    """The input policy file with `values` written in, comments and order kept."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)  # the packaged policy's style: "  - name: ..."
    doc = yaml.load(source_text)

    def flow(d: dict) -> CommentedMap:
        m = CommentedMap(d)
        m.fa.set_flow_style()
        return m

    apply(doc, knobs, values, new_map=flow)
    buf = io.StringIO()
    yaml.dump(doc, buf)
    return buf.getvalue()


def diff(before: str, after: str, name: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{name}", f"b/{name}"))


def write_pareto_plot(path: Path, evals: list[Evaluation], front: list[Evaluation], chosen: Evaluation,
                      seed_input: Evaluation | None, fifo_util: float | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    ok = [e for e in evals if e.error is None]
    feas = [e for e in ok if e.feasible]
    infeas = [e for e in ok if not e.feasible]
    if infeas:
        ax.scatter([100 * e.utilization for e in infeas], [e.lost_gpu_hours for e in infeas], s=14, c="#bbbbbb",
                   label="misses a target")
    if feas:
        ax.scatter([100 * e.utilization for e in feas], [e.lost_gpu_hours for e in feas], s=18, c="#2ca02c",
                   label="meets every target")
    if front:
        ax.plot([100 * e.utilization for e in front], [e.lost_gpu_hours for e in front], "-", c="#2ca02c", lw=1,
                label="Pareto front")
    ax.scatter([100 * chosen.utilization], [chosen.lost_gpu_hours], marker="*", s=180, c="#1f77b4", label="tuned",
               zorder=5)
    if seed_input is not None and seed_input.error is None:
        ax.scatter([100 * seed_input.utilization], [seed_input.lost_gpu_hours], marker="X", s=90, c="#d62728",
                   label="input policy", zorder=5)
    if fifo_util is not None:
        ax.axvline(100 * fifo_util, color="#7f7f7f", ls="--", lw=0.8, label="FIFO with backfill")
    ax.set_xlabel("pool utilization on the sample (%)")
    ax.set_ylabel("GPU-hours lost to preemption")
    ax.set_title(f"policy tune: {len(ok)} candidates simulated, {len(feas)} meet every target")
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, dpi=110, format="png")
    write_file(path, buf.getvalue())
    plt.close(fig)
