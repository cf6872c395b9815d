"""Online serving: long-running inference services as a workload class (docs/serving.md).

`model.py` holds a request's `service:` block (`ServiceSpec`); `render.py` writes its Kubernetes
objects (Deployment or LeaderWorkerSet, Service, KEDA ScaledObject or HPA); `demand.py` reads a
service's traffic (a diurnal curve or a request-rate CSV) and the replicas it needs; `lending.py`
says what a serving lane lends (the engine's side is `admission/serving_lending.py`). No Dagster here.
"""
