"""Job requests and their record: the request model and its fail-closed validation (`model`),
the append-only request ledger (`ledger`) and audited exceptions from the approver roster
(`approvals`). May import `policy/`, `safeload/`, `devices/` and `units`; not Dagster.
"""
