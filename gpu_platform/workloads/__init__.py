"""Demo workload programs: small, real, CPU-only stand-ins for the GPU jobs.

Each is an external process (`python -m gpu_platform.workloads.<name>`). Under Dagster they talk
back through `dagster_pipes`, the standalone protocol package; this is the only place in
`gpu_platform/` that imports it, and nothing here imports `dagster` itself. Standalone they write
the same result to `<out-dir>/result.json` and print it.
May import `lineage/`, `policy/`, `requests/`, `safeload/`.
"""

PROGRAMS: dict[str, str] = {
    "label_batch": "gpu_platform.workloads.label",
    "training_run": "gpu_platform.workloads.train",
    "replay": "gpu_platform.workloads.replay",
    "map_segmentation": "gpu_platform.workloads.mapseg",
}
"""Workload kind -> module of its demo program (`python -m <module>`)."""


def demo_command(request, kind: str, out_dir, python: str | None = None) -> tuple[str, ...]:
    """The demo program's command line for a request of `kind` (a request without `command`).

    Parameters come from the request: dataset/map ids seed the data, evaluator ids are the
    replay suites, `odd_cell` the cell; `env` may carry DEMO_STEPS, DEMO_CHECKPOINT_EVERY,
    DEMO_STEP_SECONDS, DEMO_FRAMES and DEMO_FAIL_SUITES to shape a demo.
    """
    import sys

    if kind not in PROGRAMS:
        raise KeyError(f"no demo program for workload {kind!r} (programs: {', '.join(PROGRAMS)})")
    env = request.env
    cmd = [python or sys.executable, "-m", PROGRAMS[kind], "--out-dir", str(out_dir)]
    if request.request_id:
        cmd += ["--request-id", request.request_id]
    if kind == "training_run":
        cmd += ["--steps", env.get("DEMO_STEPS", "200"), "--checkpoint-every", env.get("DEMO_CHECKPOINT_EVERY", "20")]
        cmd += ["--step-seconds", env.get("DEMO_STEP_SECONDS", "0"), "--dataset-ids", ",".join(request.dataset_ids)]
    elif kind == "replay":
        cmd += ["--suites", ",".join(request.evaluator_ids) or "default-suite", "--odd-cell", request.odd_cell or "unknown"]
        cmd += ["--model-ids", ",".join(request.artifact_set), "--fail-suites", env.get("DEMO_FAIL_SUITES", "")]
    elif kind == "label_batch":
        cmd += ["--frames", env.get("DEMO_FRAMES", "500"), "--dataset-ids", ",".join(request.dataset_ids)]
        cmd += ["--labeler-id", request.labeler_registry_id or "demo-labeler"]
    elif kind == "map_segmentation":
        cmd += ["--map-ids", ",".join(request.map_ids), "--suites", ",".join(request.evaluator_ids)]
        cmd += ["--odd-cell", request.odd_cell or ""]
    return tuple(cmd)
