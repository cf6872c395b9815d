"""Cost: feed parsers and the DuckDB loader (`feeds/`: DCGM, FOCUS, cluster inventory), the
dbt-like SQL model runner over `dbt_like_sql/` (`sqlmodels/`), and the ledger snapshot the
models price (`snapshot`). May import `requests/`, `lineage/`, `policy/`, `safeload/`; not Dagster.
"""
