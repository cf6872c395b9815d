"""Online serving: long-running inference services as a workload class (docs/serving.md).

`model.py` holds a request's `service:` block (`ServiceSpec`); `render.py` writes its Kubernetes
objects (Deployment or LeaderWorkerSet, Service, KEDA ScaledObject or HPA). No Dagster here.
"""
