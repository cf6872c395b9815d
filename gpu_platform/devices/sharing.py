"""How a flavor offers its GPUs: whole (`exclusive`), as MIG slices (`mig`), or as shared replicas
(`shared`: time-slicing or MPS), and the resource names the NVIDIA device plugin exposes for each.

MIG geometry (NVIDIA's MIG user guide, "Supported MIG Profiles"): a GPU has 7 compute slices and 8
memory slices; each profile takes `g` compute slices (its `<g>g` prefix) and a number of memory
slices (its memory over an eighth of the GPU's), and may appear at most a fixed number of times.
A layout is valid when its profiles exist on the product, no profile exceeds its maximum count,
and the compute and memory slices add up to at most 7 and 8. That rules out, for example,
`2 x 3g.40gb + 1 x 1g.10gb` on an H100 (9 memory slices), which NVIDIA's placement table rejects
too; NVIDIA's table also fixes each instance's start slot, which this check does not model.

Resource names follow the device plugin: `nvidia.com/gpu` for whole GPUs, `nvidia.com/mig-<profile>`
under the `mixed` MIG strategy, `nvidia.com/gpu.shared` for time-slicing / MPS replicas
(`renameByDefault: true`), so quotas, Kueue ClusterQueues and Job limits use one name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"
MIG_PREFIX = "nvidia.com/mig-"
COMPUTE_SLICES = 7
MEMORY_SLICES = 8

SharingMode = Literal["exclusive", "mig", "shared"]
SHARING_MODES: tuple[SharingMode, ...] = ("exclusive", "mig", "shared")


@dataclass(frozen=True, slots=True)
class MigProfile:
    name: str  # e.g. "1g.10gb"
    compute: int
    memory: int  # memory slices (of 8)
    max_count: int
    memory_gb: int


def _profiles(gpu_gb: int, rows: list[tuple[str, int]]) -> dict[str, MigProfile]:
    out = {}
    for name, max_count in rows:
        m = re.fullmatch(r"(\d)g\.(\d+)gb", name)
        assert m, name
        g, mem = int(m.group(1)), int(m.group(2))
        out[name] = MigProfile(name, g, mem * MEMORY_SLICES // gpu_gb, max_count, mem)
    return out


# GPU product label (nvidia.com/gpu.product) -> profiles. From NVIDIA's MIG user guide.
MIG_GEOMETRY: dict[str, dict[str, MigProfile]] = {
    "NVIDIA-A100-SXM4-40GB": _profiles(
        40, [("1g.5gb", 7), ("1g.10gb", 4), ("2g.10gb", 3), ("3g.20gb", 2), ("4g.20gb", 1), ("7g.40gb", 1)]
    ),
    "NVIDIA-A100-SXM4-80GB": _profiles(
        80, [("1g.10gb", 7), ("1g.20gb", 4), ("2g.20gb", 3), ("3g.40gb", 2), ("4g.40gb", 1), ("7g.80gb", 1)]
    ),
    "NVIDIA-H100-80GB-HBM3": _profiles(
        80, [("1g.10gb", 7), ("1g.20gb", 4), ("2g.20gb", 3), ("3g.40gb", 2), ("4g.40gb", 1), ("7g.80gb", 1)]
    ),
}
MIG_GEOMETRY["NVIDIA-A100-PCIE-40GB"] = MIG_GEOMETRY["NVIDIA-A100-SXM4-40GB"]
MIG_GEOMETRY["NVIDIA-A100-80GB-PCIe"] = MIG_GEOMETRY["NVIDIA-A100-SXM4-80GB"]
MIG_GEOMETRY["NVIDIA-H100-SXM5-80GB"] = MIG_GEOMETRY["NVIDIA-H100-80GB-HBM3"]

_LAYOUT_TERM = re.compile(r"^\s*(\d+)\s*[x×*]\s*(\d+g\.\d+gb)\s*$")


def mig_resource(profile: str) -> str:
    return MIG_PREFIX + profile


def profile_of(resource: str) -> str | None:
    """The MIG profile a resource name asks for (`nvidia.com/mig-1g.10gb` -> `1g.10gb`), or None."""
    return resource[len(MIG_PREFIX) :] if resource.startswith(MIG_PREFIX) else None


def parse_layout(text: str | Mapping[str, int]) -> dict[str, int]:
    """`"3 x 2g.20gb + 1 x 1g.10gb"` (or a mapping) -> {"2g.20gb": 3, "1g.10gb": 1}.

    Raises ValueError naming the term that does not parse."""
    if isinstance(text, Mapping):
        out = {}
        for k, v in text.items():
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"count for {k!r} must be a positive integer, got {v!r}")
            out[str(k)] = v
        return out
    out: dict[str, int] = {}
    for term in str(text).split("+"):
        m = _LAYOUT_TERM.match(term)
        if not m:
            raise ValueError(f"{term.strip()!r} is not '<count> x <profile>' (e.g. '7 x 1g.10gb')")
        out[m.group(2)] = out.get(m.group(2), 0) + int(m.group(1))
    return out


def layout_errors(product: str, layout: Mapping[str, int]) -> list[str]:
    """Every reason `layout` (profile -> count per GPU) cannot be cut from one `product` GPU."""
    geometry = MIG_GEOMETRY.get(product)
    if geometry is None:
        return [f"GPU product {product!r} has no known MIG geometry (known: {', '.join(sorted(MIG_GEOMETRY))})"]
    errors = []
    compute = memory = 0
    for name, count in layout.items():
        p = geometry.get(name)
        if p is None:
            errors.append(f"profile {name!r} does not exist on {product} (one of: {', '.join(geometry)})")
            continue
        if count > p.max_count:
            errors.append(f"{count} x {name} exceeds the {p.max_count} a {product} can hold")
        compute += p.compute * count
        memory += p.memory * count
    if compute > COMPUTE_SLICES:
        errors.append(f"the layout takes {compute} compute slices; a GPU has {COMPUTE_SLICES}")
    if memory > MEMORY_SLICES:
        errors.append(f"the layout takes {memory} memory slices; a GPU has {MEMORY_SLICES}")
    return errors


def gpu_share(product: str, resource: str, replicas: int | None = None, weights: Mapping[str, float] | None = None) -> float:
    """The share of one physical GPU a unit of `resource` is priced at.

    Whole GPU: 1. MIG slice: the policy's weight for the profile when given, else its compute
    slices / 7 (a 1g.10gb slice of an H100 is 1/7). Shared replica: 1 / replicas.
    """
    if resource == GPU:
        return 1.0
    if resource == SHARED:
        if not replicas:
            raise ValueError("a shared resource needs the flavor's replicas per GPU")
        return 1.0 / replicas
    profile = profile_of(resource)
    if profile is None:
        raise ValueError(f"{resource!r} is not a GPU resource")
    if weights and profile in weights:
        return float(weights[profile])
    geometry = MIG_GEOMETRY.get(product, {})
    p = geometry.get(profile)
    if p is None:
        m = re.match(r"(\d)g\.", profile)
        return int(m.group(1)) / COMPUTE_SLICES if m else 1.0
    return p.compute / COMPUTE_SLICES


def is_gpu_resource(resource: str) -> bool:
    return resource in (GPU, SHARED) or resource.startswith(MIG_PREFIX)


def mode_of(resource: str) -> SharingMode:
    if resource == SHARED:
        return "shared"
    if resource.startswith(MIG_PREFIX):
        return "mig"
    return "exclusive"
