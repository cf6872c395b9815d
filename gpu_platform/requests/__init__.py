"""Job requests and their record: the request model and its fail-closed validation (`model`),
the append-only request ledger (`ledger`) and audited exceptions from the approver roster
(`approvals`). May import `policy/`, `safeload/`, `devices/` and `units`; not Dagster.

One module per job: `ledger.py` the `Ledger` (writes and reads; every name below is re-exported
from it); `events.py` the event vocabulary and the fold of events into a request's state row;
`submission.py` request ids, the resubmission rule, the submitter check and the refusals;
`ledger_db.py` the database URL, engine and table creation, parsed payloads; `schema.py` the
tables; `identity.py` who is asking; `claims.py` artifact claims.
"""
