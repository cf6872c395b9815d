"""The demo's online service: `perception-serving` (examples/requests/online_serving.yaml, 1 L4 per
replica, 2 to 6 replicas at 40 QPS each) on the inference pool's nodes that no batch job of the
history uses, with a diurnal request curve.

- Traffic: QPS(t) = 35 + 165 x (1 - cos(2 pi (h - 3) / 24)) / 2 at hour h (UTC): 35 at 03:00, 200 at
  15:00, times a little noise. Its 5-minute increases are written as Prometheus `query_range`
  answers, `feeds/requests/<day>/prometheus.json` (what `sum by (service)
  (increase(http_requests_total[5m]))` answers at step 5m), for every history day and today up
  to now (never ahead of the clock: today's cost per request counts only requests answered).
- Replicas: every 5 minutes KEDA's rule (`desired_replicas`: ceil(QPS / 40) within [2, 6]) over the
  noise-free curve; each change is a `replicas` event in the ledger (source `cluster`), from the
  service's admission at 00:00 of the first day. Replica k holds GPU k of the serving nodes (the
  newest replica stops first), so its pods, node and DCGM samples are those of the history's
  cluster (`add_service` adds them to the history before its feeds are written).
- Lending: below 6 replicas the service leaves serving GPUs idle that batch may borrow; the
  service asset shows how many (`lendable_gpus`).
"""

from __future__ import annotations

import json
import math
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from gpu_platform.demo.history import FleetNode, HistJob, History, Segment
from gpu_platform.demo.instance import EXAMPLES
from gpu_platform.observe.serving.replicas import desired_replicas
from gpu_platform.policy import Policy
from gpu_platform.requests.ledger import Ledger
from gpu_platform.requests.model import JobRequest, validate_request_file
from gpu_platform.serving.model import service_name

SERVICE_ID = "svc-perception-serving"
EXAMPLE = "online_serving.yaml"
NIGHT_QPS, PEAK_QPS, LOW_HOUR = 35.0, 200.0, 3.0
STEP = timedelta(minutes=5)


def qps_at(t: datetime) -> float:
    """The demo's diurnal curve: requests per second at `t` (no noise)."""
    h = t.astimezone(UTC).hour + t.minute / 60 + t.second / 3600
    return NIGHT_QPS + (PEAK_QPS - NIGHT_QPS) * (1 - math.cos(2 * math.pi * (h - LOW_HOUR) / 24)) / 2


def requests_doc(service: str, day: date, until: datetime, rng: np.random.Generator) -> dict[str, Any]:
    """A Prometheus `query_range` answer of the requests of `day` per 5 minutes, points up to `until`."""
    d0 = datetime(day.year, day.month, day.day, tzinfo=UTC)
    values = []
    for k in range(1, 289):
        end = d0 + STEP * k
        if end > until:
            break
        mid = end - STEP / 2
        count = qps_at(mid) * STEP.total_seconds() * float(np.clip(rng.normal(1.0, 0.04), 0.8, 1.2))
        values.append([int(end.timestamp()), f"{count:.0f}"])
    return {"status": "success", "data": {"resultType": "matrix",
                                          "result": [{"metric": {"service": service}, "values": values}]}}


def serving_slots(history: History, flavor: str) -> list[tuple[FleetNode, int]]:
    """(node, GPU) of the `flavor` GPUs no history pod ever uses, the least used nodes first."""
    used = {(node, g) for job in history.jobs for seg in job.segments for node, gpus in seg.placement for g in gpus}
    nodes = sorted((n for n in history.nodes if n.flavor == flavor),
                   key=lambda n: sum((n.name, g) in used for g in range(n.gpus)))
    return [(n, g) for n in nodes for g in range(n.gpus) if (n.name, g) not in used]


def service_request(policy: Policy) -> JobRequest:
    return validate_request_file(EXAMPLES / EXAMPLE, policy).model_copy(update={"request_id": SERVICE_ID})


def add_service(history: History, ledger: Ledger, policy: Policy, feeds: Path, now: datetime | None = None,
                seed: int = 11) -> dict[str, Any]:
    """Run the demo service from 00:00 of the history's first day to `now`: its request, admission
    and replica changes in the ledger, its replica pods in `history` (their pods, nodes and DCGM
    samples go out with the history's feeds), and its request counts under `feeds/requests/`.
    Returns what it did (replica changes, serving GPUs, request files), or `skipped` with why when
    the history leaves too few GPUs of the service's flavor free all along (nothing recorded)."""
    now = (now or datetime.now(UTC)).astimezone(UTC)
    req = service_request(policy)
    spec = req.service
    name = service_name(spec, req.name) or SERVICE_ID
    flavor = req.gpu_type or "l4-inference"
    slots = serving_slots(history, flavor)[: spec.replicas.max * (req.gpu_count or 1)]
    per = req.gpu_count or 1
    top = min(spec.replicas.max, len(slots) // per)
    if top < spec.replicas.min:
        return {"service": name, "skipped": f"{len(slots)} {flavor} GPU(s) free all along, fewer than "
                                            f"{spec.replicas.min} replicas x {per} GPU(s)"}
    first = history.days[0]
    start = datetime(first.year, first.month, first.day, tzinfo=UTC)
    end_of_history = datetime.combine(history.days[-1] + timedelta(days=1), datetime.min.time(), UTC)
    ledger.submit(req, at=start - timedelta(minutes=10))

    def want(t: datetime) -> int:
        return min(desired_replicas(spec, qps_at(t)), top)

    count = want(start)
    node0 = slots[0][0]
    ledger.record(SERVICE_ID, "admitted", f"QuotaReserved on {flavor}", flavor=flavor,
                  details={"attempt": 1, "replicas": count, "hostname": node0.name}, at=start)
    open_since: list[datetime] = [start] * count
    windows: list[tuple[int, datetime, datetime | None]] = []  # (replica slot, start, end)
    events = []
    t = start + STEP
    while t <= now:
        n = want(t)
        if n != count:
            events.append((SERVICE_ID, "replicas", f"{count} -> {n} replicas (cluster)", None, None,
                           {"replicas": n, "previous": count, "source": "cluster"}, t))
            while len(open_since) > n:
                windows.append((len(open_since) - 1, open_since.pop(), t))
            while len(open_since) < n:
                open_since.append(t)
            count = n
        t += STEP
    windows += [(k, s, None) for k, s in enumerate(open_since)]
    for rid, event, reason, flv, run_id, details, at in events:
        ledger.record(rid, event, reason, flavor=flv, run_id=run_id, details=details, at=at)
    segments = []
    for i, (k, s, e) in enumerate(sorted(windows, key=lambda w: (w[1], w[0])), start=1):
        if s >= end_of_history:
            continue  # today: no pod feed is written for today (the ledger's replica pods price it)
        node, _ = slots[k * per]
        gpus = tuple(g for _, g in slots[k * per:(k + 1) * per])
        stop = min(e or now, now)
        segments.append(Segment(attempt=i, start=s.timestamp(), end=stop.timestamp(), flavor=flavor,
                                outcome="finished" if e is not None else "running",
                                nodes={node.engine_name: per}, placement=[(node.name, gpus)]))
    history.jobs.append(HistJob(request=req, submit=(start - timedelta(minutes=10)).timestamp(),
                                segments=segments, waited_s=0.0))
    rng = np.random.default_rng(seed)
    files = []
    day = first
    while day <= now.date():
        path = feeds / "requests" / day.isoformat() / "prometheus.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(requests_doc(name, day, now, rng)) + "\n")
        files.append(path)
        day += timedelta(days=1)
    return {"service": name, "request_id": SERVICE_ID, "replica_changes": len(events), "replicas_now": count,
            "serving_gpus": len(slots), "request_files": len(files)}
