"""Partition definitions of the workload assets: one dynamic partition set per workload kind.

A request's id is a partition key only in the set of its own workload kind (`workload` of the
request): a label batch request is a partition of `label_batch`, a model release request a
partition of `released_model` (and of `model_evidence_pack`, the release's pack, which runs in
the same run). The admission sensor adds each admitted request to its kind's set.
"""

import dagster as dg

from gpu_platform.policy.model import WORKLOAD_KINDS

WORKLOAD_PARTITIONS: dict[str, dg.DynamicPartitionsDefinition] = {
    kind: dg.DynamicPartitionsDefinition(name=f"{kind}_requests") for kind in WORKLOAD_KINDS
}
"""Request workload kind -> its partition set (`<kind>_requests`)."""


def partitions_for(workload: str) -> dg.DynamicPartitionsDefinition:
    return WORKLOAD_PARTITIONS[workload]
