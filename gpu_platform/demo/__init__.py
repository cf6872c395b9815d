"""All of the demo but its CLI (`cli/demo.py`) and Dagster wiring (`assets/demo_seed.py`): the
generated ledger history (`history`: simulated and recorded; its fleet in `fleet`, job mix and
release chains in `job_mix`, types in `history_types`, node/pod/DCGM/FOCUS feeds in
`history_feeds`), the feeds' prices and FOCUS bill (`costs`), the instance config (`instance`)
and the supervisor of `dagster dev` (`supervisor`). May import every domain package.
"""
