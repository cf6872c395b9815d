"""gpu_platform: the domain, free of Dagster, one package per concern (see each package's
docstring and the layout in docs/architecture.md): `policy`, `requests`, `admission`, `gate`, `cluster`,
`devices`, `lineage`, `finops`, `observe`, `deploy`, `simulate`, `workloads`, `demo`, `safeload`,
`cli`;
plus two tiny shared modules, `paths` and `units`.
"""
