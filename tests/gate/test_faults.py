"""Gate fault injection through a real DagsterInstance: the sensor's run requests are submitted
the way Dagster's sensor daemon does it (skip a run key that already has a launched run, resume a
run it created but never launched, else create the run NOT_STARTED and then launch it), and
crashes are injected at every step: before and after each ledger commit, between run creation
and launch, and during victim termination.

Asserted over every simulation: 0 double launches (one run per run key, never two running runs
of one request), 0 lost requests (every request finishes), 0 stuck requests (none left admitted
without a live run). Run liveness (NOT_STARTED / STARTING past the timeout) is tested first.
"""

from __future__ import annotations

import random
from collections import Counter

import dagster as dg
import pytest
from dagster._core.events import DagsterEvent, DagsterEventType
from dagster._core.storage.dagster_run import DagsterRun
from dagster._core.storage.tags import RUN_KEY_TAG, SENSOR_NAME_TAG

from assets.workloads import JOB_FOR_WORKLOAD
from gpu_platform.gate.tick import TAG_ATTEMPT, TAG_REQUEST_ID, RunInfo, reconcile
from gpu_platform.requests.ledger import TERMINAL_STATES, Ledger
from resources.settings import PlatformSettings
from tests.gate.helpers import add_run, submit, tick

WORKLOAD_JOB = JOB_FOR_WORKLOAD["training_run"]

SENSOR = "admission_sensor"
ACTIVE = {dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTING,
          dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING}


class Crash(Exception):
    """The process died here."""


def _event(instance, run_id: str, kind: DagsterEventType) -> None:
    instance.report_dagster_event(DagsterEvent(kind.value, job_name=WORKLOAD_JOB), run_id=run_id)


def _with_timeout(resources, seconds: float) -> dict:
    settings = resources["settings"]
    return {**resources, "settings": PlatformSettings(home=settings.home, run_start_timeout_seconds=seconds)}


def test_a_run_stuck_not_started_is_cancelled_and_the_request_relaunched(env, policy):
    instance, ledger, resources, _home = env
    rid = submit(ledger, policy, "research_best_effort")
    (first,) = tick(instance, resources).run_requests
    stuck = add_run(instance, rid, 1, status=dg.DagsterRunStatus.NOT_STARTED)  # created, never launched
    quiet = tick(instance, resources)  # default timeout (600s) not reached: nothing relaunched
    assert not quiet.run_requests and quiet.skip_reason is not None
    result = tick(instance, _with_timeout(resources, 0))
    (again,) = result.run_requests
    assert again.run_key == f"{rid}#2" and again.tags[TAG_ATTEMPT] == "2"
    assert instance.get_run_by_id(stuck).status in (dg.DagsterRunStatus.CANCELING, dg.DagsterRunStatus.CANCELED)
    last = ledger.events(rid)[-1]
    assert last.event == "admitted" and last.details["reason_code"] == "StartTimeout"
    assert f"run {stuck} stayed NOT_STARTED" in last.reason and "relaunched as attempt 2" in last.reason
    assert ledger.state(rid).attempts == 2


def test_a_run_stuck_starting_is_relaunched_too(env, policy):
    instance, ledger, resources, _home = env
    rid = submit(ledger, policy, "research_best_effort")
    tick(instance, resources)
    add_run(instance, rid, 1, status=dg.DagsterRunStatus.STARTING)
    (again,) = tick(instance, _with_timeout(resources, 0)).run_requests
    assert again.run_key == f"{rid}#2"
    stale = [e for e in ledger.events(rid) if e.details.get("reason_code") == "StartTimeout"]
    assert len(stale) == 1 and "stayed STARTING" in stale[0].reason


def test_queued_or_started_runs_are_never_timed_out(policy, sqlite_url):
    ledger = Ledger(sqlite_url)
    rid = submit(ledger, policy, "research_best_effort")
    ledger.record(rid, "admitted", "QuotaReserved", flavor="a100-spot")
    states = ledger.states()
    for phase in ("QUEUED", "STARTED", "CANCELING"):
        runs = [RunInfo("run-1", rid, 1, "active", phase=phase, starting_for=None)]
        settled = reconcile(policy, states, runs, start_timeout=0)
        assert (settled.relaunch, settled.events, settled.terminate) == ([], [], [])
    settled = reconcile(policy, states, [RunInfo("run-1", rid, 1, "active", phase="NOT_STARTED", starting_for=5.0)], start_timeout=10)
    assert settled.relaunch == []


class World:
    """The instance, the daemon's submission of run requests, run workers and crash injection."""

    def __init__(self, instance, ledger, resources, rng: random.Random, monkeypatch):
        self.instance, self.ledger, self.rng = instance, ledger, rng
        self.resources = _with_timeout(resources, 0)
        self.armed = False
        self.crashes: Counter[str] = Counter()
        self.double_running = 0
        self.cancel_requested: set[str] = set()
        gate_ledger = resources["ledger"].ledger()
        original_record_many = gate_ledger.record_many
        original_cancel = instance.run_coordinator.cancel_run

        def record_many(rows, at=None):
            self._maybe_crash("before_commit")
            n = original_record_many(rows, at=at)
            self._maybe_crash("after_commit")
            return n

        def cancel_run(run_id):
            self._maybe_crash("termination")
            self.cancel_requested.add(run_id)
            return original_cancel(run_id)

        original_canceled = instance.report_run_canceled
        self.in_tick = False

        def report_run_canceled(run, message=None):
            # the gate cancels a run that has not started yet directly (assets/gate.py): a crash
            # there is a termination crash too; the run workers' own reports (step_runs) never crash
            if self.in_tick:
                self._maybe_crash("termination")
            return original_canceled(run, message=message)

        monkeypatch.setattr(gate_ledger, "record_many", record_many)
        monkeypatch.setattr(instance.run_coordinator, "cancel_run", cancel_run)
        monkeypatch.setattr(instance, "report_run_canceled", report_run_canceled)

    def _maybe_crash(self, point: str) -> None:
        """At most one crash per tick; terminations are rare, so a crash there is likelier."""
        if self.armed and self.rng.random() < CRASH_PROBABILITY[point]:
            self.crashes[point] += 1
            self.armed = False
            raise Crash(point)

    def daemon_submit(self, run_requests) -> None:
        for rr in run_requests:
            existing = self.instance.get_runs(
                filters=dg.RunsFilter(tags={RUN_KEY_TAG: rr.run_key, SENSOR_NAME_TAG: SENSOR})
            )
            if existing and existing[0].status != dg.DagsterRunStatus.NOT_STARTED:
                continue  # launched before the daemon crashed: skipped, as Dagster does
            if existing:
                run = existing[0]  # created, never launched: the daemon resumes it
            else:
                run = DagsterRun(
                    job_name=WORKLOAD_JOB,
                    status=dg.DagsterRunStatus.NOT_STARTED,
                    tags={**rr.tags, RUN_KEY_TAG: rr.run_key, SENSOR_NAME_TAG: SENSOR},
                )
                self.instance.add_run(run)
            self._maybe_crash("between_create_and_launch")
            _event(self.instance, run.run_id, DagsterEventType.RUN_START)

    def step_runs(self, finish_probability: float) -> None:
        """Run workers: cancelled runs stop, running runs finish at random."""
        running: Counter[str] = Counter()
        for run in self.instance.get_runs(filters=dg.RunsFilter(job_name=WORKLOAD_JOB)):
            if run.status not in ACTIVE:
                continue
            if run.run_id in self.cancel_requested or run.status == dg.DagsterRunStatus.CANCELING:
                self.instance.report_run_canceled(run)
                continue
            if run.status == dg.DagsterRunStatus.STARTED:
                running[run.tags[TAG_REQUEST_ID]] += 1
                if self.rng.random() < finish_probability:
                    _event(self.instance, run.run_id, DagsterEventType.RUN_SUCCESS)
        self.double_running += sum(1 for n in running.values() if n > 1)

    def tick(self, crashes: bool) -> None:
        self.armed = crashes
        try:
            self.in_tick = True
            result = tick(self.instance, self.resources)
            self.in_tick = False
            self.daemon_submit(getattr(result, "run_requests", []))
        except Crash:
            pass
        finally:
            self.in_tick = False


CRASH_PROBABILITY = {"before_commit": 0.2, "after_commit": 0.2, "between_create_and_launch": 0.3, "termination": 0.6}
POINTS = sorted(CRASH_PROBABILITY)


# seed 7, not 6: under issue 45's policy (the reserve lends) seed 6's run preempts nothing, so it
# never reaches the termination crash point the last assertion asks every seed to reach
@pytest.mark.parametrize("seed", [1, 3, 4, 7])
def test_crashes_at_every_step_never_double_launch_lose_or_strand_a_request(env, policy, monkeypatch, seed):
    instance, ledger, resources, home = env
    rng = random.Random(seed)
    world = World(instance, ledger, resources, rng, monkeypatch)
    ids = []
    for i in range(6):
        ids.append(submit(ledger, policy, "research_best_effort", gpu_type="h100-ondemand", gpu_count=8,
                          experiment_id=f"exp-{seed}-{i}", output_artifact_ids=[f"r-{seed}-{i}"]))
    ids += [submit(ledger, policy, "baseline_rebuild"), submit(ledger, policy, "candidate_train")]
    ticks = 0
    for step in range(40):
        if step in (5, 15, 25):
            ids.append(submit(ledger, policy, "incident_response", gpu_count=8, incident_id=f"inc-{seed}-{step}"))
        if step in (10, 20):
            ids += [submit(ledger, policy, "research_best_effort", gpu_type="h100-ondemand", gpu_count=8,
                           experiment_id=f"exp-{seed}-late-{step}-{i}") for i in range(2)]
        world.tick(crashes=rng.random() < 0.8)
        world.step_runs(finish_probability=0.25)
        ticks += 1
    for _ in range(60):  # the platform recovers without crashes
        if all(ledger.state(r).state in TERMINAL_STATES for r in ids):
            break
        world.tick(crashes=False)
        world.step_runs(finish_probability=1.0)
        ticks += 1
    runs = instance.get_runs(filters=dg.RunsFilter(job_name=WORKLOAD_JOB))
    per_key = Counter(r.tags[RUN_KEY_TAG] for r in runs)
    assert max(per_key.values()) == 1, "a run key was launched twice"
    assert world.double_running == 0
    final = {r: ledger.state(r).state for r in ids}
    assert all(s == "finished" for s in final.values()), final  # 0 lost, 0 stuck
    relaunched = sum(1 for r in ids for e in ledger.events(r) if e.details.get("reason_code") == "StartTimeout")
    preempted = sum(1 for r in ids for e in ledger.events(r) if e.event == "preempted")
    print(f"fault simulation seed={seed}: ticks={ticks} requests={len(ids)} runs={len(runs)} "
          f"crashes={dict(sorted(world.crashes.items()))} preemptions={preempted} start_timeouts={relaunched}")
    assert sum(world.crashes.values()) >= 8, world.crashes
    assert set(world.crashes) == set(POINTS), world.crashes
