"""The gate's aging on the cluster: Kueue's `kueue.x-k8s.io/priority-boost` on waiting Workloads.

Kueue adds a Workload's `kueue.x-k8s.io/priority-boost` annotation to its priority when it
orders a ClusterQueue and compares priorities for preemption (KEP-7990, feature gate
`PriorityBoost`); Kueue never sets it. The gate does, for the Workloads of its own Jobs, each
tick after the read-back (`boost_patches`, then `send_boost_patches`):

- only a Workload Kueue holds pending (`Observation.waiting`: no quota reserved, or evicted and
  requeued) of the request's current attempt; an admitted or finished Workload is never patched,
  so it keeps the boost it had when admitted;
- the value is `gpu_platform.policy.aging.priority_boost` of the request's lane, submission
  time and now: the rule the simulator and the gate's own engine use;
- a patch is sent only when the annotation differs from the value due (a JSON merge patch of
  that one annotation; a boost of 0 removes it, as Kueue reads unset as 0), so a tick that
  finds every Workload at its boost sends nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from gpu_platform.cluster.client import SERVICE_ACCOUNT_DIR, api_client
from gpu_platform.cluster.names import KUEUE_API_GROUP, KUEUE_API_VERSION
from gpu_platform.cluster.readback import Observation
from gpu_platform.policy import Policy
from gpu_platform.policy.aging import PRIORITY_BOOST_ANNOTATION, aging_rules


@dataclass(frozen=True, slots=True)
class BoostPatch:
    """One Workload's annotation to set: `boost` (0: remove it); `was`: its value as read."""

    namespace: str
    workload: str
    request_id: str
    boost: int
    was: str | None

    def body(self) -> dict[str, Any]:
        """The JSON merge patch (`null` deletes the annotation)."""
        return {"metadata": {"annotations": {PRIORITY_BOOST_ANNOTATION: str(self.boost) if self.boost else None}}}

    def text(self) -> str:
        was = "unset" if self.was is None else repr(self.was)
        now = f"+{self.boost}" if self.boost else "removed (0)"
        return f"{self.namespace}/{self.workload} ({self.request_id}): priority boost {now}, was {was}"


def boost_patches(
    policy: Policy, states: Iterable[Any], observations: Iterable[Observation], now: datetime
) -> list[BoostPatch]:
    """The patches that bring the waiting Workloads of the gate's requests to the boost due at
    `now`, one per Workload whose annotation differs (none for one already at it).

    states: the ledger's pending and running `RequestState`s (request, lane, submission time,
    current attempt). A Workload of another attempt, of an unknown request, or one Kueue has
    admitted or finished is left alone. A lane that does not age is due 0: a boost left on its
    Workload (the lane's targets were removed) is removed."""
    by_id = {s.request_id: s for s in states}
    rules = aging_rules(policy)
    out: list[BoostPatch] = []
    for obs in observations:
        s = by_id.get(obs.request_id)
        if s is None or obs.workload is None or not obs.waiting or obs.attempt != s.attempts:
            continue
        rule = rules.get(s.request.lane or "")
        due = rule.boost((now - s.submitted_at).total_seconds()) if rule is not None else 0
        if obs.priority_boost == str(due) or (due == 0 and obs.priority_boost is None):
            continue
        out.append(BoostPatch(obs.namespace, obs.workload, obs.request_id, due, obs.priority_boost))
    return out


def send_boost_patches(patches: Iterable[BoostPatch], custom_api: Any) -> list[str]:
    """Send each patch (`CustomObjectsApi.patch_namespaced_custom_object`, merge patch); the
    problems, one line per Workload that could not be patched (the others are still sent)."""
    problems: list[str] = []
    for p in patches:
        try:
            custom_api.patch_namespaced_custom_object(
                KUEUE_API_GROUP, KUEUE_API_VERSION, p.namespace, "workloads", p.workload, p.body(),
                _content_type="application/merge-patch+json",
            )
        except Exception as exc:  # one refused Workload (gone, RBAC) must not stop the others
            reason = str(getattr(exc, "reason", "") or exc).splitlines()[0][:200]
            problems.append(f"{p.namespace}/{p.workload}: {type(exc).__name__}: {reason}")
    return problems


def sync_boosts(
    policy: Policy,
    states: Iterable[Any],
    observations: Iterable[Observation],
    now: datetime,
    kubeconfig: str = "",
    service_account_dir: str | Path = SERVICE_ACCOUNT_DIR,
    custom_api: Any = None,
) -> tuple[list[BoostPatch], list[str]]:
    """`boost_patches` sent through `cluster.client.api_client` (or `custom_api`): (the patches,
    the problems). Nothing is asked of the API when no patch is due. The gate's service account
    needs `patch` on workloads.kueue.x-k8s.io in the team namespaces."""
    patches = boost_patches(policy, states, observations, now)
    if not patches:
        return [], []
    if custom_api is None:
        from kubernetes import client

        custom_api = client.CustomObjectsApi(api_client(kubeconfig, service_account_dir))
    return patches, send_boost_patches(patches, custom_api)
