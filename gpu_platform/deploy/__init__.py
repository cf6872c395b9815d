"""What a fresh cluster with Kueue needs for the platform, rendered as one kustomize tree
(`tree`: Namespaces, the Kueue objects, work-volume PVCs, the run launcher's ServiceAccount and
least-privilege RBAC, the Dagster instance ConfigMap) and, for the official Dagster Helm chart,
the values that make the chart's instance the same (`helm`). Above `admission/` (the Kueue export),
`cluster/` and `gate/` (the instance config) in the import graph; not Dagster.
"""
