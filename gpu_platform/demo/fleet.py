"""The demo's fleet: the policy's exclusive flavors cut into 8-GPU cloud nodes (h100-ondemand 32
GPUs = 4 x p5.48xlarge, l4-inference 16 = 2 x g6.48xlarge, a100-spot 16 = 2 x p4d.24xlarge), each
node with its instance type, GPU model, zone, instance id and hourly prices; fractional flavors get
no nodes.

May import `admission/policy_view.py`, `policy/`, `demo/costs.py`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from decimal import Decimal

from gpu_platform.admission.policy_view import nodes_for
from gpu_platform.policy import Policy


@dataclass(frozen=True)
class FleetType:
    flavor: str
    instance_type: str
    model_name: str
    """DCGM's modelName label."""
    profiling: bool
    hourly: tuple[str, str, str]
    """(ListCost, BilledCost = EffectiveCost, PricingCategory) per hour, USD."""
    zone: str
    gpus: int = 8
    """GPUs of one instance of this type."""
    vcpus: int = 192
    memory_mib: int = 2097152

    @property
    def memory_gib(self) -> float:
        """Framebuffer of one GPU (from the model name: 80, 40 or the L4's 24 GB)."""
        return 80.0 if "80GB" in self.model_name else 40.0 if "40GB" in self.model_name else 24.0


INSTANCE_TYPES: dict[str, tuple[FleetType, ...]] = {
    "h100-ondemand": (FleetType("h100-ondemand", "p5.48xlarge", "NVIDIA H100 80GB HBM3", True,
                                ("98.32", "63.908", "Committed"), "us-west-2a", 8, 192, 2097152),),
    "l4-inference": (FleetType("l4-inference", "g6.12xlarge", "NVIDIA L4", False,
                               ("4.6016", "4.6016", "Standard"), "us-west-2b", 4, 48, 196608),
                     FleetType("l4-inference", "g6.48xlarge", "NVIDIA L4", False,
                               ("13.3504", "13.3504", "Standard"), "us-west-2b", 8, 192, 786432)),
    "a100-spot": (FleetType("a100-spot", "p4d.24xlarge", "NVIDIA A100-SXM4-40GB", True,
                            ("32.7726", "9.8318", "Dynamic"), "us-west-2c", 8, 96, 1179648),),
}
"""The instance types behind each demo flavor, by GPUs per instance (on-demand list prices)."""


FLEET_TYPES = {flavor: types[-1] for flavor, types in INSTANCE_TYPES.items()}
"""The largest instance type of each flavor."""


def instance_type(flavor: str, gpus: int) -> FleetType:
    """The instance type of `flavor` with `gpus` GPUs; for a node size no type offers (a policy
    with other node shapes), the flavor's largest type with its hourly prices prorated by GPU."""
    types = INSTANCE_TYPES[flavor]
    for t in types:
        if t.gpus == gpus:
            return t
    big = types[-1]
    k = Decimal(gpus) / Decimal(big.gpus)
    hourly = (str(Decimal(big.hourly[0]) * k), str(Decimal(big.hourly[1]) * k), big.hourly[2])
    return replace(big, hourly=hourly, gpus=gpus)


@dataclass(frozen=True)
class FleetNode:
    name: str
    flavor: str
    instance_id: str
    kind: FleetType
    node_pool: str
    """The flavor's node pool (`training`, `inference`, `spot`): what the node's
    `gpu-platform.io/node-pool` label says, as on a real cluster (never the flavor's name)."""
    engine_name: str = ""
    """The admission engine's name for this node (`<flavor>/node-<i>`, `nodes_for`)."""

    @property
    def gpus(self) -> int:
        return self.kind.gpus

    @property
    def provider_id(self) -> str:
        return f"aws:///{self.kind.zone}/{self.instance_id}"


def fleet(policy: Policy) -> list[FleetNode]:
    """The nodes of the policy's node shapes (`nodes_for`: what the gate's node model places work
    on) for the flavors the demo has instance types for; fractional flavors have none."""
    nodes = []
    flavor_index = {f.name: i for i, f in enumerate(policy.flavors)}
    pool = {f.name: f.node_pool for f in policy.flavors}
    for spec in nodes_for(policy):
        if spec.flavor not in INSTANCE_TYPES:
            continue
        i = int(spec.name.rsplit("-", 1)[1])
        octet = 16 * (flavor_index[spec.flavor] + 1) + i
        name = f"ip-10-0-{octet}-{40 + i}.us-west-2.compute.internal"
        instance = "i-0" + hashlib.sha256(name.encode()).hexdigest()[:16]
        kind = instance_type(spec.flavor, int(spec.gpus))
        nodes.append(FleetNode(name, spec.flavor, instance, kind, pool[spec.flavor], spec.name))
    return nodes
