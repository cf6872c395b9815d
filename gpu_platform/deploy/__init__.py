"""What a fresh cluster with Kueue needs for the platform (docs/deploy.md): the platform's objects
as one kustomize tree (`tree`: Namespaces, the Kueue objects, work-volume claims, the run
launcher's and the step ServiceAccounts with least-privilege RBAC, and the Dagster instance
ConfigMap or, with the chart, the chart's env ConfigMaps in the team namespaces); the values that
make the official Dagster Helm chart run this code location as the tree expects (`helm`); the
ordered commands that deploy both (`steps`, Kueue's pinned release among them); and the read-only
check of a live cluster against the tree (`check`). Above `admission/` (the Kueue export),
`cluster/` and `gate/` (the instance config) in the import graph; not Dagster.
"""
