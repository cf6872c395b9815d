"""Kueue's scheduler performance scenario, replayed through the admission engine.

The generator file has the schema of Kueue's `test/performance/scheduler` runner
(`configs/baseline/generator.yaml`): `cohorts` is a list of cohort sets
`{className, count, queuesSets}`; a queues set is `{className, count, nominalQuota,
borrowingLimit, reclaimWithinCohort, withinClusterQueue, workloadsSets}`; a workloads set is
`{count, creationIntervalMs, workloads: [{className, runtimeMs, priority, request}]}`.

Read as Kueue's runner reads it: every cluster queue of a set gets the set's quota on one
flavor (`rf`, resource `cpu`, Kueue's own choice) in cohort `<className>-<i>`, and is named
`<className>-<setIndex>-<i>-<cohort>`; each of its workloads sets creates, from time 0,
`count` rounds of its workloads, one every `creationIntervalMs` (the n-th created at n x the
interval); sets and queues generate concurrently. A workload runs `runtimeMs` from admission;
evicted, it is requeued and starts again from zero. Time to admission is measured from
creation to the last admission, as Kueue's recorder does.

Usage per cluster-queue class is Kueue's: the time integral of the class's quota usage over
the run (time 0 to the last finish), as a share of the class's summed nominal quota.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpu_platform.admission import ClusterQueueSpec, ClusterState, FlavorSpec, ResourceQuota, Workload
from gpu_platform.admission.model import NEVER
from gpu_platform.simulate.des import SimResult, simulate
from gpu_platform.simulate.scenarios import Scenario
from gpu_platform.simulate.trace import TraceError, TraceJob

FLAVOR = "rf"
RESOURCE = "cpu"
_POLICIES = ("Never", "LowerPriority", "LowerOrNewerEqualPriority", "Any")


@dataclass(frozen=True, slots=True)
class KueueScenario:
    scenario: Scenario
    jobs: list[TraceJob]
    cq_class: dict[str, str]
    nominal: dict[str, float]


def _quantity(v: Any, where: str, errors: list[str]) -> float | None:
    """A Kubernetes quantity as Kueue's generator allows it for cpu: `20`, `500m`, `1.5`."""
    if v is None:
        return None
    text = str(v).strip()
    try:
        return float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    except ValueError:
        errors.append(f"{where}: {text!r} is not a quantity")
        return None


def load_generator(path: str | Path) -> KueueScenario:
    """Read a generator file; raises TraceError listing every bad field with its path."""
    src = str(path)
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise TraceError([str(exc)], src) from exc
    errors: list[str] = []
    if not isinstance(raw, dict) or not isinstance(raw.get("cohorts"), list) or not raw["cohorts"]:
        raise TraceError(["cohorts: config must contain at least one cohort"], src)
    cqs: list[ClusterQueueSpec] = []
    cohorts: list[str] = []
    jobs: list[TraceJob] = []
    cq_class: dict[str, str] = {}
    nominal: dict[str, float] = {}
    for ci, cset in enumerate(raw["cohorts"]):
        cw = f"cohorts[{ci}]"
        if not isinstance(cset, dict):
            errors.append(f"{cw}: expected a mapping")
            continue
        for k in ("className", "count", "queuesSets"):
            if k not in cset:
                errors.append(f"{cw}.{k}: required")
        for idx in range(int(cset.get("count") or 0)):
            cohort = f"{cset.get('className')}-{idx}"
            cohorts.append(cohort)
            for qi, qset in enumerate(cset.get("queuesSets") or []):
                qw = f"{cw}.queuesSets[{qi}]"
                if idx == 0:
                    for k in ("className", "count", "nominalQuota", "workloadsSets"):
                        if k not in qset:
                            errors.append(f"{qw}.{k}: required")
                    for k in ("reclaimWithinCohort", "withinClusterQueue"):
                        if qset.get(k, NEVER) not in _POLICIES:
                            errors.append(f"{qw}.{k}: {qset.get(k)!r} is not one of {', '.join(_POLICIES)}")
                nom = _quantity(qset.get("nominalQuota", 0), f"{qw}.nominalQuota", errors if idx == 0 else [])
                bl = _quantity(qset.get("borrowingLimit"), f"{qw}.borrowingLimit", errors if idx == 0 else [])
                for i in range(int(qset.get("count") or 0)):
                    name = f"{qset.get('className')}-{qi}-{i}-{cohort}"
                    cq_class[name] = str(qset.get("className"))
                    nominal[name] = nom or 0.0
                    cqs.append(
                        ClusterQueueSpec(
                            name=name,
                            quotas=(ResourceQuota(FLAVOR, RESOURCE, nom or 0.0, bl),),
                            cohort=cohort,
                            within_cluster_queue=qset.get("withinClusterQueue", NEVER),
                            reclaim_within_cohort=qset.get("reclaimWithinCohort", NEVER),
                        )
                    )
                    for si, wset in enumerate(qset.get("workloadsSets") or []):
                        ww = f"{qw}.workloadsSets[{si}]"
                        interval = float(wset.get("creationIntervalMs", 0)) / 1000
                        created = 0
                        for rnd in range(int(wset.get("count") or 0)):
                            for ti, wlt in enumerate(wset.get("workloads") or []):
                                created += 1
                                if rnd == 0 and idx == 0 and i == 0:
                                    for k in ("className", "runtimeMs", "request"):
                                        if k not in wlt:
                                            errors.append(f"{ww}.workloads[{ti}].{k}: required")
                                req = _quantity(wlt.get("request", 0), f"{ww}.workloads[{ti}].request", [])
                                jobs.append(
                                    TraceJob(
                                        job_id=f"{name}/{wlt.get('className')}-{si}-{rnd}-{ti}",
                                        submit_ts=created * interval,
                                        duration_s=max(float(wlt.get("runtimeMs", 0)) / 1000, 1e-3),
                                        gpus=req or 0.0,
                                        lane=name,
                                        preemption_policy="requeue",
                                        cls=str(wlt.get("className")),
                                        priority=int(wlt.get("priority", 0)),
                                    )
                                )
    if errors:
        raise TraceError(errors, src)
    base = ClusterState(
        cluster_queues=tuple(cqs), flavors=(FlavorSpec(FLAVOR, False, None),), cohorts=tuple(cohorts)
    )

    def workload(job: TraceJob) -> Workload:
        return Workload(
            name=job.job_id,
            cq=job.lane,
            requests={RESOURCE: job.gpus},
            priority=job.priority or 0,
            created_at=job.submit_ts,
            expected_duration_s=job.duration_s,
        )

    scn = Scenario("kueue", f"Kueue scheduler performance scenario from {Path(path).name}", base, workload)
    return KueueScenario(scn, jobs, cq_class, nominal)


def kueue_report(ks: KueueScenario, res: SimResult) -> dict[str, Any]:
    """Kueue's summary shape: clusterQueueClasses (usage) and workloadClasses (time to admission)."""
    horizon = max(res.end, 0.0)
    used: dict[str, float] = defaultdict(float)
    for r in res.runs:
        used[r.job.lane] += r.used_gpu_s
    classes: dict[str, dict[str, float]] = defaultdict(lambda: {"used": 0.0, "nominal": 0.0, "queues": 0})
    per_cq = {}
    for cq, cls in ks.cq_class.items():
        c = classes[cls]
        c["used"] += used.get(cq, 0.0)
        c["nominal"] += ks.nominal[cq]
        c["queues"] += 1
        per_cq[cq] = {
            "class": cls,
            "nominal_quota": ks.nominal[cq],
            "average_usage": round(used.get(cq, 0.0) / horizon, 4) if horizon else None,
            "usage_pct": round(100 * used.get(cq, 0.0) / (ks.nominal[cq] * horizon), 2)
            if horizon and ks.nominal[cq]
            else None,
        }
    wl: dict[str, dict[str, Any]] = defaultdict(lambda: {"count": 0, "admit": 0.0, "finish": 0.0, "evictions": 0, "never": 0})
    for r in res.runs:
        w = wl[r.job.cls or "-"]
        w["count"] += 1
        w["evictions"] += r.preemptions
        if r.last_admit is None:
            w["never"] += 1
            continue
        w["admit"] += r.last_admit - r.job.submit_ts
        w["finish"] += (r.end or horizon) - r.job.submit_ts
    return {
        "scenario": res.scenario.description,
        "workloads": len(res.runs),
        "cluster_queues": len(ks.cq_class),
        "wall_time_simulated_ms": round(horizon * 1000),
        "engine_calls": res.engine_calls,
        "clusterQueueClasses": {
            cls: {
                "queues": int(c["queues"]),
                "nominalQuota": c["nominal"],
                "averageUsage": round(c["used"] / horizon, 3) if horizon else None,
                "usagePct": round(100 * c["used"] / (c["nominal"] * horizon), 2) if horizon and c["nominal"] else None,
            }
            for cls, c in sorted(classes.items())
        },
        "workloadClasses": {
            cls: {
                "count": w["count"],
                "neverAdmitted": w["never"],
                "totalEvictions": w["evictions"],
                "averageTimeToAdmissionMs": round(1000 * w["admit"] / max(1, w["count"] - w["never"])),
                "averageTimeToFinishMs": round(1000 * w["finish"] / max(1, w["count"] - w["never"])),
            }
            for cls, w in sorted(wl.items())
        },
        "clusterQueues": per_cq,
    }


def run_generator(path: str | Path, *, tick: float = 0.0) -> tuple[KueueScenario, SimResult]:
    ks = load_generator(path)
    return ks, simulate(ks.scenario, ks.jobs, tick=tick, checkpoint_interval_s=0.0)
