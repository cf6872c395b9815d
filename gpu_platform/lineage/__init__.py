"""What a run leaves behind: the lineage graph of workload runs, artifacts and releases
(`graph`), and the content-addressed evidence store with holds and retention (`evidence`).
May import `requests/`, `policy/`, `safeload/`; not Dagster.
"""
