"""What a GPU node offers: the local inventory and the NVML session it is read through (`gpus`:
NVML, or a declared simulated inventory), MIG slices and shared replicas (`sharing`). The bottom
of the domain: imports only `units` and the standard library, so policy, requests and cost may
all build on it. NVML *sampling* (utilization and memory over time) is a telemetry feed in the
DCGM schema and lives with the other feeds in `finops/feeds/nvml.py`.
"""
