"""Benchmark: gpu_platform.finops.feeds.dcgm.parse_text against prometheus_client's text parser.

Generates dcgm-exporter text in memory (512 GPUs on 64 nodes, 20 metrics, Kubernetes pod
labels, 100 scrapes concatenated: ~1M sample lines, ~280 MB), times our parser (median of
5 runs, input as the bytes an HTTP answer or a file read gives) and
``prometheus_client.parser.text_string_to_metric_families`` on a 50,000-line slice of the same
text (it is ~50x slower), and prints one JSON object. ``ours_samples_per_s_from_str`` adds
the cost of encoding a Python ``str`` to UTF-8 first; ``ours_samples_per_cpu_s`` divides by
process CPU time, which other load on the machine disturbs less than wall-clock time.

Run: ``.venv/bin/python bench/bench_dcgm_parse.py [--scrapes N]``
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from datetime import UTC, datetime

METRICS = (
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
)


def generate(n_gpus: int = 512, scrapes: int = 100, seed: int = 7) -> str:
    """dcgm-exporter-like text: HELP/TYPE per metric, one line per GPU, k8s pod labels."""
    rng = random.Random(seed)
    blocks = []
    for g in range(n_gpus):
        node, idx = divmod(g, 8)
        pod = (
            f'container="trainer",namespace="team-{node % 7}",pod="job-{node}-worker-{idx}"'
            if g % 5
            else ('container="",namespace="",pod=""')
        )
        blocks.append(
            f'gpu="{idx}",UUID="GPU-604ac76c-d9cf-fef3-62e9-{g:012x}",pci_bus_id="00000000:{idx + 16:02X}:00.0",'
            f'device="nvidia{idx}",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-{node:03d}",'
            f'DCGM_FI_DRIVER_VERSION="550.54.15",{pod}'
        )
    out: list[str] = []
    for _ in range(scrapes):
        for metric in METRICS:
            out.append(f"# HELP {metric} {metric.lower()}.\n# TYPE {metric} gauge\n")
            for block in blocks:
                out.append(f"{metric}{{{block}}} {rng.random() * 100:.3f}\n")
    return "".join(out)


def _time(fn, runs: int) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU seconds of each run (CPU time is steadier on a shared machine)."""
    wall, cpu = [], []
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--slice-lines", type=int, default=50_000)
    args = parser.parse_args()

    from prometheus_client.parser import text_string_to_metric_families

    from gpu_platform.finops.feeds.dcgm import parse_text

    text = generate(scrapes=args.scrapes)
    data = text.encode()
    at = datetime(2024, 9, 18, tzinfo=UTC)
    batch = parse_text(data, source="bench", scraped_at=at)
    samples = batch.accepted
    wall, cpu = _time(lambda: parse_text(data, source="bench", scraped_at=at), args.runs)
    ours, ours_cpu = statistics.median(wall), statistics.median(cpu)
    ours_str = statistics.median(_time(lambda: parse_text(text, source="bench", scraped_at=at), 3)[0])

    lines = text.splitlines(keepends=True)[: args.slice_lines]
    small = "".join(lines)

    def run_prom() -> int:
        return sum(len(f.samples) for f in text_string_to_metric_families(small))

    prom_samples = run_prom()
    prom = statistics.median(_time(run_prom, 3)[0])
    ours_rate = samples / ours
    prom_rate = prom_samples / prom
    print(
        json.dumps(
            {
                "lines": text.count("\n"),
                "bytes": len(data),
                "samples": samples,
                "quarantined": batch.quarantined,
                "ours_seconds_median": round(ours, 4),
                "ours_samples_per_s": round(ours_rate),
                "ours_samples_per_cpu_s": round(samples / ours_cpu),
                "ours_samples_per_s_from_str": round(samples / ours_str),
                "prometheus_client_samples": prom_samples,
                "prometheus_client_seconds_median": round(prom, 4),
                "prometheus_client_samples_per_s": round(prom_rate),
                "ratio": round(ours_rate / prom_rate, 1),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
