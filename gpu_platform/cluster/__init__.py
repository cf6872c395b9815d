"""The platform on a Kubernetes cluster with Kueue: the pod and executor config a request's
run becomes (`jobs`), one naming scheme for every object the export and the step Jobs share
(`names`), and the cluster's own decisions read back (`readback`). Free of Dagster (dagster-k8s
builds the Job in `resources/k8s.py`); the `kubernetes` client is imported only where the
cluster is read. May import `policy/`, `requests/`, `devices/`.
"""
