"""The platform on a Kubernetes cluster with Kueue: one naming scheme for every object the
export and the step Jobs share (`names`), and the cluster's own decisions read back
(`readback`). Free of Dagster; the `kubernetes` client is imported only where the cluster is read.
"""
