"""All of the demo but its CLI (`cli/demo.py`) and Dagster wiring (`assets/demo_seed.py`): the
generated ledger history (`history`), its feeds and FOCUS bill (`costs`), the instance config
(`instance`) and the supervisor of `dagster dev` (`supervisor`). May import every domain package.
"""
