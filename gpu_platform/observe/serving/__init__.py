"""Running inference services as the platform reads them: each service's replicas in the ledger
and what keeps that view current (`replicas.py`: the cluster's Deployments or, locally, the
request counts' autoscaling rule). Cost per request is priced by the SQL models
(`unit_cost_inference_request`) and read through `gpu_platform.finops.sqlmodels.report.service_rows`.
"""
