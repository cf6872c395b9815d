"""A checkpoint written on the work volume outlives its pod: the gate finds it there, so an evidence
job becomes preemptible, and the requeued job resumes from it.

The "pod" is the real training program run with the environment of its rendered Job (the work
volume's mount path replaced by the directory backing the volume, as the kubelet's mount does);
its own filesystem is deleted before the gate looks, as it is when a pod is gone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import dagster as dg

from gpu_platform.cluster.jobs import ENV_WORK_ROOT, WORK_VOLUME_NAME, WorkVolume
from gpu_platform.gate.checkpoints import checkpoints_under, has_checkpoint
from resources.build import build_resources
from resources.k8s import render_job_manifest
from resources.ledger import LedgerResource
from resources.policy import PolicyResource
from resources.settings import PlatformSettings
from tests.gate.helpers import add_run, submit, tick

MOUNT = "/var/lib/gpu-platform/work"


def _pod_env(job: dict, volume_dir) -> dict[str, str]:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert env[ENV_WORK_ROOT] == MOUNT
    env[ENV_WORK_ROOT] = str(volume_dir)  # the mount, as seen from this machine
    return env


def _run_program(env: dict[str, str], pod_fs, request_id: str, steps: int) -> dict:
    """The workload step in its pod: where the asset puts checkpoints, then the program."""
    pod_resources = build_resources("test", {**env, "GPU_PLATFORM_HOME": str(pod_fs / "home")})
    ckpt = pod_resources["evidence"].work_dir(request_id) / "checkpoints" / "training_run"
    out = subprocess.run(
        [sys.executable, "-m", "gpu_platform.workloads.train", "--steps", str(steps), "--checkpoint-every", "10",
         "--out-dir", str(pod_fs / "out"), "--request-id", request_id],
        env={**os.environ, "GPU_PLATFORM_CHECKPOINT_DIR": str(ckpt)},
        check=True, capture_output=True, text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_preempted_evidence_job_checkpoint_is_found_after_its_pod_is_gone(tmp_path, policy) -> None:
    volume = tmp_path / "pvc"  # what backs the PersistentVolumeClaim
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    settings = PlatformSettings(home=str(tmp_path / "gate-home"), work_root=str(volume), work_claim="gpu-platform-work")
    resources = {"ledger": LedgerResource(url=url), "policy": PolicyResource(), "settings": settings}
    ledger = resources["ledger"].ledger()
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        evidence = [
            submit(ledger, policy, "candidate_train", candidate_id=f"c{i}", output_artifact_ids=[f"m{i}"], gpu_count=8)
            for i in range(2)
        ] + [submit(ledger, policy, "release_eval", output_artifact_ids=[f"e{i}"], gpu_count=4) for i in range(4)]
        tick(instance, resources)
        runs = {c: add_run(instance, c, 1, lane=ledger.get(c).lane) for c in evidence}
        cand = evidence[1]

        # The candidate's GPU Job mounts the claim at the work root; the gate's pod mounts the same
        # claim at the same path (here: the directory backing it).
        assert settings.work_volume() == WorkVolume("gpu-platform-work", str(volume))
        req = ledger.get(cand).model_copy(update={"request_id": cand})
        job = render_job_manifest(req, "h100-ondemand", policy, work_volume=WorkVolume("gpu-platform-work", MOUNT))
        pod = job["spec"]["template"]["spec"]
        assert {"name": WORK_VOLUME_NAME, "persistentVolumeClaim": {"claimName": "gpu-platform-work"}} in pod["volumes"]
        assert {"name": WORK_VOLUME_NAME, "mountPath": MOUNT} in pod["containers"][0]["volumeMounts"]

        incident = submit(ledger, policy, "incident_response", gpu_count=8)
        tick(instance, resources)
        assert all(ledger.state(c).state == "admitted" for c in evidence), "no checkpoint yet: nothing preemptible"

        pod_fs = tmp_path / "pod-1"
        first = _run_program(_pod_env(job, volume), pod_fs, cand, steps=20)
        shutil.rmtree(pod_fs)  # the pod is gone; the volume stays
        assert has_checkpoint(checkpoints_under(settings.work_root_path(), cand))
        tick(instance, resources)
        assert ledger.state(cand).state == "requeued"
        assert ledger.state(incident).state == "waiting"
        # The victim's run is still stopping: its GPUs are not free, the incident waits for it.
        tick(instance, resources)
        assert ledger.state(incident).details.get("reason_code") == "WaitingForPreemptedVictims"
        instance.report_run_canceled(instance.get_run_by_id(runs[cand]))
        result = tick(instance, resources)
        assert incident in [r.tags["gpu-platform/request-id"] for r in result.run_requests]

        # Requeued and admitted again later, the job resumes from the checkpoint on the volume.
        again = _run_program(_pod_env(job, volume), tmp_path / "pod-2", cand, steps=30)
        assert (first["resumed_from_step"], again["resumed_from_step"]) == (0, 20)


def test_has_checkpoint_under_answers_as_the_long_way(tmp_path):
    """The gate's per-tick check says what has_checkpoint(checkpoints_under(...)) says, before and
    after a checkpoint appears (it keeps the path, never the answer)."""
    from gpu_platform.gate.checkpoints import checkpoints_under, has_checkpoint, has_checkpoint_under

    root = tmp_path / "work"
    rid = "perc:exp/1"

    def both() -> bool:
        short, long = has_checkpoint_under(root, rid), has_checkpoint(checkpoints_under(root, rid))
        assert short == long
        return short

    assert not both()  # no directory
    ckpt = checkpoints_under(root, rid)
    ckpt.mkdir(parents=True)
    assert not both()  # empty
    (ckpt / "notes.txt").write_text("x")
    assert not both()  # no ckpt-* file
    (ckpt / "training_run").mkdir()
    (ckpt / "training_run" / "ckpt-00000003.npz").write_bytes(b"x")
    assert both()
    assert not has_checkpoint_under(root, "perc_exp/1")  # another id, another directory
