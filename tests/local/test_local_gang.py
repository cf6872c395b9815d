"""A multi-node request on one machine: one process per GPU group with the rendezvous env, every
process's log kept, the step failing (the others stopped) when one process fails; and the demo's
training program, data parallel over the ranks with CPU stand-ins, through the real asset."""


import json
import sys
import time
from datetime import timedelta
from pathlib import Path

import dagster as dg
import pytest

from gpu_platform.devices.gang import free_port, gpu_groups, rendezvous_env
from gpu_platform.requests.model import JobRequest
from resources.local_executor import LocalGpuExecutor

pytestmark = pytest.mark.filterwarnings("ignore::dagster.PreviewWarning")

RANK = """
import json, os, sys, time
out, mode = sys.argv[1], sys.argv[2]
rank = int(os.environ["NODE_RANK"])
keys = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NNODES", "NODE_RANK", "LOCAL_RANK", "NPROC_PER_NODE",
        "CUDA_VISIBLE_DEVICES", "PET_NODE_RANK", "GPU_PLATFORM_REQUEST_ID")
open(os.path.join(out, f"env-{rank}.json"), "w").write(json.dumps({k: os.environ.get(k) for k in keys}))
print(f"rank {rank} says hello", flush=True)
if mode == "fail" and rank == 1:
    sys.exit(3)
if mode == "fail":
    time.sleep(60)  # rank 0 would run on: the executor must stop it
"""


def _gang(script: Path, out: Path, mode: str, nodes: int = 2, per: int = 8) -> JobRequest:
    return JobRequest(
        request_id=f"req-20261202-gang-{mode}", team="perception", lane="candidate_train",
        gpu_count=nodes * per, nodes=nodes, gpus_per_node=per, timeout=timedelta(minutes=2),
        command=(sys.executable, str(script), str(out), mode),
    )


def _run(tmp_path: Path, mode: str, instance) -> dg.ExecuteInProcessResult:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    out = tmp_path / "out"
    out.mkdir()
    request = _gang(script, out, mode)

    @dg.asset
    def training_run(context: dg.AssetExecutionContext, gpu_executor: LocalGpuExecutor):
        gpu_executor.run(context, request, tmp_path / "ckpt", {"out_dir": str(out)})
        return dg.MaterializeResult(metadata={"ran": True})

    executor = LocalGpuExecutor(state_dir=str(tmp_path / "state"), local_gpus="16", use_nvml=False,
                                kill_grace_seconds=2)
    return dg.materialize([training_run], resources={"gpu_executor": executor}, instance=instance,
                          raise_on_error=False)


def test_one_process_per_gpu_group_with_the_rendezvous_env(tmp_path: Path) -> None:
    with dg.instance_for_test() as instance:
        result = _run(tmp_path, "report", instance)
    assert result.success
    envs = [json.loads((tmp_path / "out" / f"env-{r}.json").read_text()) for r in (0, 1)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0,1,2,3,4,5,6,7", "8,9,10,11,12,13,14,15"]
    assert {e["MASTER_ADDR"] for e in envs} == {"127.0.0.1"}
    assert len({e["MASTER_PORT"] for e in envs}) == 1 and int(envs[0]["MASTER_PORT"]) > 0
    assert [(e["NODE_RANK"], e["PET_NODE_RANK"], e["LOCAL_RANK"]) for e in envs] == [("0", "0", "0"), ("1", "1", "0")]
    assert {(e["WORLD_SIZE"], e["NNODES"], e["NPROC_PER_NODE"]) for e in envs} == {("16", "2", "8")}
    assert {e["GPU_PLATFORM_REQUEST_ID"] for e in envs} == {"req-20261202-gang-report"}
    for r in (0, 1):  # every process's output, in its own log
        assert f"rank {r} says hello" in (tmp_path / "out" / "ranks" / f"rank-{r}.log").read_text()


def test_one_failed_process_fails_the_step_and_stops_the_others(tmp_path: Path) -> None:
    started = time.monotonic()
    with dg.instance_for_test() as instance:
        result = _run(tmp_path, "fail", instance)
    assert not result.success
    assert time.monotonic() - started < 40  # rank 0 (sleeping 60 s) was stopped, not waited for
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    message = failure.event_specific_data.error.message
    assert "process rank 1 exited with code 3" in message and "the other 1 running process(es) were stopped" in message
    for r in (0, 1):
        assert f"rank {r} says hello" in (tmp_path / "out" / "ranks" / f"rank-{r}.log").read_text()


def test_rendezvous_env_matches_the_gangs_pods() -> None:
    """The same variables as the Indexed Job's pods (gpu_platform.cluster.jobs.rendezvous_env),
    with the local address and groups of devices."""
    from gpu_platform.cluster.jobs import rendezvous_env as pod_env
    from gpu_platform.requests.model import JobRequest as Req

    pod = {e["name"] for e in pod_env(Req(request_id="req-x", nodes=2, gpus_per_node=8, gpu_count=16))}
    port = free_port()
    local = rendezvous_env(2, 8, 1, port, gpu_groups(list(range(16)), 2, 8)[1])
    assert pod <= set(local)
    assert local["CUDA_VISIBLE_DEVICES"] == "8,9,10,11,12,13,14,15" and local["MASTER_PORT"] == str(port)
    with pytest.raises(ValueError, match="cannot form 2 groups of 8"):
        gpu_groups(list(range(12)), 2, 8)


def test_the_demo_training_program_runs_data_parallel_through_the_asset(tmp_path: Path) -> None:
    """The real training_run asset on a 2 x 8 request with 16 configured GPUs: two processes of
    the demo trainer, rank 1 sends its part to rank 0 over MASTER_ADDR:MASTER_PORT, rank 0 averages
    them into the model; both ranks' logs are evidence of the request."""
    from assets.workloads import workload_assets
    from gpu_platform.policy import load_policy
    from gpu_platform.requests.ledger import Ledger
    from gpu_platform.requests.model import validate_request_file
    from resources.build import build_resources

    root = Path(__file__).resolve().parents[2]
    home = tmp_path / "home"
    resources = build_resources("test", {"GPU_PLATFORM_HOME": str(home), "GPU_PLATFORM_LOCAL_GPUS": "16"})
    resources["executor"] = LocalGpuExecutor(state_dir=str(home / "gpus"), local_gpus="16", use_nvml=False)
    ledger = Ledger(resources["ledger"].url)
    req = validate_request_file(root / "examples" / "distributed" / "candidate_train_2x8.yaml", load_policy())
    rid = ledger.submit(req.model_copy(update={"command": (), "env": {"DEMO_STEPS": "40"}}))
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("training_run_requests", [rid])
        result = dg.materialize(workload_assets, selection=dg.AssetSelection.assets("training_run"),
                                partition_key=rid, instance=instance, resources=resources, raise_on_error=False)
    assert result.success
    md = {k: v.value for k, v in result.asset_materializations_for_node("training_run")[0].metadata.items()}
    assert md["nodes"] == 2 and set(md["parts"]) == {"rank-0", "rank-1"}
    assert md["steps_done"] == 40 and md["final_loss"] < 0.1
    assert set(md["rank_logs"]) == {"rank-0.log", "rank-1.log"}
    store = resources["evidence"].store()
    held = {r.digest for r in store.refs(rid) if r.kind == "log"}
    assert set(md["rank_logs"].values()) <= held
