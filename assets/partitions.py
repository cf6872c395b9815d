"""Partition definitions shared by the gate and the workload assets."""

import dagster as dg

requests_partitions = dg.DynamicPartitionsDefinition(name="requests")
"""One partition per admitted request id; the admission sensor adds them."""
