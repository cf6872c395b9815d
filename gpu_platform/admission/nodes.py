"""Where GPUs sit on nodes: the engine's node model for gang jobs (the platform's; Kueue's quota
check has none, its Topology Aware Scheduling does the same with node labels).

A `NodeBook` holds every node of the flavors the cluster state describes (`ClusterState.nodes`) and
which node each admitted workload's pods hold. A service's replicas (`Workload.replicas`) are independent
pods that may share a node: each goes to the fullest node that holds it. A workload of `pods` pods asks for
`requests[nvidia.com/gpu] / pods` GPUs per pod, all placed together or none: it fits when its
flavor's nodes hold `pods` such pods, a node as many as its free GPUs hold. That is
kube-scheduler's rule: each pod of an Indexed Job is placed on its own, and nothing in the Job
keeps two of them off one node. A gang of whole nodes (the platform's own gangs: `nodes x
gpus_per_node`, the node size) therefore needs whole free nodes, one pod each; pods of half a
node (a trace's gang split by a smaller node size, `simulate.scenario.pods_for`) go two to a
free node. Pods go to the fullest nodes that hold them (best fit), so small jobs pack and whole
nodes stay free for gangs. An admitted workload without a
recorded placement is placed the same way, in the order given, those with a placement first.

Only `nvidia.com/gpu` is placed; a flavor without nodes in the state is not node-checked at all
(so the Kueue-parity cases, which give none, see quota only).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpu_platform.admission.model import NodeSpec, Workload

GPU = "nvidia.com/gpu"
_EPS = 1e-9


def pod_shape(wl: Workload) -> tuple[int, float]:
    """(pods, GPUs per pod) of a workload."""
    pods = max(1, wl.pods)
    return pods, wl.requests.get(GPU, 0.0) / pods


def gpu_flavor(wl: Workload) -> str | None:
    if wl.resource_flavors and GPU in wl.resource_flavors:
        return wl.resource_flavors[GPU]
    return wl.flavor


def _n(v: float) -> str:
    return f"{v:g}"


class NodeBook:
    """Free GPUs per node, per flavor, and the nodes each workload holds (mutable within a cycle)."""

    def __init__(self, nodes: Iterable[NodeSpec]):
        self.size: dict[str, float] = {}
        self.free: dict[str, float] = {}
        self.flavor_of: dict[str, str] = {}
        self.by_flavor: dict[str, list[str]] = {}
        self.placed: dict[str, tuple[tuple[str, float], ...]] = {}
        self._memo: dict[str, tuple[tuple[str, float], ...]] = {}
        # flavor -> free GPUs -> nodes with that many free (insertion-ordered): a fit is found by
        # walking the few distinct free amounts, not every node
        self._buckets: dict[str, dict[float, dict[str, None]]] = {}
        for n in nodes:
            if n.name in self.size:
                raise ValueError(f"node {n.name!r} is listed twice")
            self.size[n.name] = float(n.gpus)
            self.free[n.name] = float(n.gpus)
            self.flavor_of[n.name] = n.flavor
            self.by_flavor.setdefault(n.flavor, []).append(n.name)
            self._buckets.setdefault(n.flavor, {}).setdefault(float(n.gpus), {})[n.name] = None

    def _set_free(self, node: str, value: float) -> None:
        buckets = self._buckets[self.flavor_of[node]]
        old = self.free[node]
        group = buckets[old]
        del group[node]
        if not group:
            del buckets[old]
        value = round(value, 9)
        self.free[node] = value
        buckets.setdefault(value, {})[node] = None

    def has(self, flavor: str | None) -> bool:
        return flavor in self.by_flavor

    def find(self, flavor: str, pods: int, per_pod: float) -> list[str] | None:
        """Nodes of `flavor` for `pods` pods of `per_pod` GPUs, best fit: each pod on the fullest
        node that still holds it, so a node takes as many pods as its free GPUs hold before the next
        fullest is used; a node appears once per pod it takes. None: the nodes hold fewer pods."""
        if per_pod <= _EPS:
            return []
        buckets = self._buckets.get(flavor)
        if not buckets:
            return None
        out: list[str] = []
        for free in sorted(buckets):
            if free + _EPS < per_pod:
                continue
            each = int((free + _EPS) // per_pod)
            for n in buckets[free]:
                out.extend([n] * min(each, pods - len(out)))
                if len(out) == pods:
                    return out
        return None

    def _find(self, wl: Workload, flavor: str) -> list[str] | None:
        pods, per = pod_shape(wl)
        return self.find(flavor, pods, per)

    def fits(self, wl: Workload, flavor: str) -> bool:
        if flavor not in self.by_flavor:
            return True
        return self._find(wl, flavor) is not None

    def place(self, wl: Workload) -> None:
        """Hold the workload's nodes: its recorded placement, the one it had before it was taken out
        within this cycle, or best fit (on a state already over its nodes: the nodes with most free)."""
        flavor = gpu_flavor(wl)
        if flavor not in self.by_flavor or wl.requests.get(GPU, 0.0) <= _EPS:
            return
        if wl.placement:
            spots = tuple((n, float(v)) for n, v in wl.placement.items() if n in self.free)
        elif wl.name in self._memo:
            spots = self._memo.pop(wl.name)
        else:
            pods, per = pod_shape(wl)
            found = self._find(wl, flavor)
            if found is None:
                found = sorted(self.by_flavor[flavor], key=lambda n: -self.free[n])[:pods]
            spots = tuple((n, per) for n in found)
        for n, v in spots:
            self._set_free(n, self.free[n] - v)
        self.placed[wl.name] = spots

    def release(self, wl: Workload, remember: bool = True) -> None:
        """Free the workload's nodes. remember: place() gives it the same nodes again within this
        book (a victim put back in a cycle); False: it is gone for good (a finished run)."""
        spots = self.placed.pop(wl.name, None)
        if spots is None:
            return
        for n, v in spots:
            self._set_free(n, self.free[n] + v)
        if remember:
            self._memo[wl.name] = spots

    def free_total(self, flavor: str) -> float:
        return sum(max(0.0, f) * len(g) for f, g in self._buckets.get(flavor, {}).items())

    def refusal(self, wl: Workload, flavor: str) -> str | None:
        """Why the workload's pods find no nodes on `flavor` now, or None when they do."""
        if flavor not in self.by_flavor:
            return None
        pods, per = pod_shape(wl)
        if self._find(wl, flavor) is not None:
            return None
        free = self.free_total(flavor)
        enough = sum(len(g) for f, g in self._buckets[flavor].items() if f + _EPS >= per)
        room = sum(int((f + _EPS) // per) * len(g) for f, g in self._buckets[flavor].items() if f + _EPS >= per)
        if wl.replicas:
            return (
                f"{_n(free)} GPUs free in {flavor} but its nodes hold {room} more pod(s) of {_n(per)} "
                f"(needs {pods}: {wl.replicas} replicas)"
            )
        if pods == 1:
            most = max(self._buckets[flavor], default=0.0)
            return (
                f"{_n(free)} GPUs free in {flavor} but no node has {_n(per)} free "
                f"(most free on one node: {_n(max(0.0, most))})"
            )
        if enough == 0:
            return f"{_n(free)} GPUs free in {flavor} but no node has {_n(per)} free (needs {pods} nodes of {_n(per)})"
        if room == enough:  # no node holds two of its pods
            return (
                f"{_n(free)} GPUs free in {flavor} but only {enough} node(s) have {_n(per)} free "
                f"(needs {pods} nodes of {_n(per)})"
            )
        return (
            f"{_n(free)} GPUs free in {flavor} but its nodes hold only {room} pod(s) of {_n(per)} "
            f"(needs {pods} pods of {_n(per)}, on {enough} node(s) with room)"
        )

def placement_of(book: NodeBook | None, name: str) -> Mapping[str, float] | None:
    """The nodes a workload holds in the book ({node: GPUs}), or None."""
    if book is None or name not in book.placed:
        return None
    out: dict[str, float] = {}
    for n, v in book.placed[name]:
        out[n] = out.get(n, 0.0) + v
    return out
