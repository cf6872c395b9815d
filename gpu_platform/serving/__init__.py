"""Online serving: long-running inference services as a workload class (docs/serving.md).

`model.py` holds a request's `service:` block (`ServiceSpec`); `render.py` the settings of its
Kubernetes objects (labels, the autoscaler's cadence, metric names, Kueue's integrations), which
`gpu_platform.cluster.services` builds (Deployment or LeaderWorkerSet, Service, KEDA ScaledObject
or HPA) beside the Jobs; `demand.py` reads a
service's traffic (a diurnal curve or a request-rate CSV) and the replicas it needs; `lending.py`
says what a serving lane lends (the engine's side is `admission/serving_lending.py`). No Dagster here.
"""
