"""The admission gate that the Dagster sensor runs, free of Dagster: one tick's plan and its
ledger record (`tick`), the request's work and checkpoint directories (`checkpoints`), and the
Dagster instance's run-queue limits that back the gate up, written as a plain dict
(`instance_config`). May import `admission/`, `requests/`, `policy/`, `safeload/`.
"""
