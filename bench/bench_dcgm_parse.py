"""Benchmark: gpu_platform.finops.feeds.dcgm.parse_text against prometheus_client's text parser.

Three inputs, all in one run, each printed as one JSON object:
- ``clean``: generated dcgm-exporter text (512 GPUs on 64 nodes, 20 metrics, Kubernetes pod
  labels, 100 scrapes concatenated: ~1M sample lines, ~280 MB, no line quarantined): a fleet's
  history re-read;
- ``reference``: the real dcgm-exporter output of the project's fixtures
  (tests/fixtures/feeds/dcgm-metrics-baremetal.txt + dcgm-metrics-k8s-unassigned.txt, from
  dcgm-exporter's README) replicated to as many sample lines: one line in three is DCGM's blank
  sentinel (quarantined with its reason) and most lines are HELP/TYPE comments, as the exporter
  prints them for a GPU that does not report every field;
- ``federate``: the clean input's fleet as Prometheus' ``/federate`` writes it (:func:`federate`):
  a timestamp on every sample, one label block per GPU with ``instance`` and ``job``, labels sorted,
  values as Go's shortest float text (up to 17 significant digits, exponent form past a million),
  the same number of scrapes.
Our parser runs 5 times (median; input as the bytes an HTTP answer or a file read gives),
``prometheus_client.parser.text_string_to_metric_families`` 3 times on a 50,000-line slice of
the same text. ``ratio``: our accepted samples per second over prometheus_client's samples per
second (it returns the sentinel lines as samples too: ``ratio_lines`` counts ours the same way).
``*_per_cpu_s`` divide by process CPU time, which other load on the machine disturbs less
than wall-clock time (ours may use a thread per core: its CPU time counts them all). ``scan``:
which scan the parser used (``compiled``: the C extension built at install; ``numpy``: its
fallback without a compiler).

Run: ``.venv/bin/python bench/bench_dcgm_parse.py [--scrapes N] [--input clean|reference|federate|all]``
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

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


def _go_float(v: float) -> str:
    """``v`` as Go's ``strconv.FormatFloat(v, 'g', -1, 64)`` writes it, which is what Prometheus'
    text encoder writes (expfmt ``writeFloat``): the shortest digits that read back as ``v`` (up to
    17), in exponent form when the decimal exponent is below -4 or at least 6 (ftoa.go: "if
    precision was the shortest possible, use precision 6 for this decision"): ``1.234567e+06``,
    ``999999``, ``1e-05``, ``84.30637193826486``."""
    if v == 0:
        return "0"
    sign = "-" if v < 0 else ""
    mantissa, _, e = f"{abs(v)!r}".partition("e")
    whole, _, frac = mantissa.partition(".")
    frac = "" if frac == "0" else frac
    raw = whole + frac
    lead = len(raw) - len(raw.lstrip("0"))
    digs = raw.lstrip("0").rstrip("0") or "0"
    point = len(whole) + (int(e) if e else 0) - lead  # digits before the decimal point
    x = point - 1  # decimal exponent of the first digit
    if x < -4 or x >= 6:
        m = digs[0] + ("." + digs[1:] if len(digs) > 1 else "")
        return f"{sign}{m}e{'-' if x < 0 else '+'}{abs(x):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digs}"
    if len(digs) <= point:
        return f"{sign}{digs}{'0' * (point - len(digs))}"
    return f"{sign}{digs[:point]}.{digs[point:]}"


def federate(n_gpus: int = 512, scrapes: int = 100, seed: int = 7, start_ms: int = 1_726_617_600_000) -> str:
    """The same fleet as Prometheus' ``/federate`` writes it (web/federate.go through expfmt's text
    encoder): per metric family one ``# TYPE <name> untyped`` line and no HELP; per GPU one series
    whose labels are sorted by name with the scrape target's ``instance`` and ``job`` added; every
    sample followed by its timestamp (milliseconds since the epoch; each series scraped at its own
    offset within the 15 s interval); values as Go's shortest ``%g`` prints them (integers without a
    point). ``scrapes`` federation answers concatenated: a history re-read from a federating
    Prometheus."""
    rng = random.Random(seed)
    blocks, offsets = [], []
    for g in range(n_gpus):
        node, idx = divmod(g, 8)
        labels = {
            "DCGM_FI_DRIVER_VERSION": "550.54.15",
            "Hostname": f"gpu-node-{node:03d}",
            "UUID": f"GPU-604ac76c-d9cf-fef3-62e9-{g:012x}",
            "device": f"nvidia{idx}",
            "gpu": str(idx),
            "instance": f"10.4.{node // 250}.{node % 250 + 2}:9400",
            "job": "dcgm-exporter",
            "modelName": "NVIDIA H100 80GB HBM3",
            "pci_bus_id": f"00000000:{idx + 16:02X}:00.0",
        }
        if g % 5:
            labels.update(container="trainer", namespace=f"team-{node % 7}", pod=f"job-{node}-worker-{idx}")
        blocks.append(",".join(f'{k}="{v}"' for k, v in sorted(labels.items())))
        offsets.append(rng.randrange(15_000))
    out: list[str] = []
    for s in range(scrapes):
        base = start_ms + s * 15_000
        for metric in METRICS:
            out.append(f"# TYPE {metric} untyped\n")
            for block, off in zip(blocks, offsets, strict=True):
                if metric.endswith(("_CLOCK", "_TEMP", "_ERRORS", "_COUNTER", "_STATUS")):
                    value = _go_float(float(rng.randrange(2000)))
                elif metric == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
                    value = _go_float(float(rng.randrange(10**11, 10**12)))
                else:
                    value = _go_float(rng.random() * 100)
                out.append(f"{metric}{{{block}}} {value} {base + off}\n")
    return "".join(out)


REFERENCE_FILES = ("dcgm-metrics-baremetal.txt", "dcgm-metrics-k8s-unassigned.txt")
FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "feeds"


def reference(samples: int) -> str:
    """The real reference feed replicated to about ``samples`` sample lines."""
    text = "".join((FIXTURES / name).read_text() for name in REFERENCE_FILES)
    per_copy = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    return text * max(1, round(samples / per_copy))


def _time(fn, runs: int) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU seconds of each run (CPU time is steadier on a shared machine)."""
    wall, cpu = [], []
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return wall, cpu


def measure(name: str, text: str, runs: int, slice_lines: int) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    from gpu_platform.finops.feeds.dcgm import SCAN_PATH, parse_text

    data = text.encode()
    at = datetime(2024, 9, 18, tzinfo=UTC)
    batch = parse_text(data, source="bench", scraped_at=at)
    samples, lines_parsed = batch.accepted, batch.accepted + batch.quarantined
    wall, cpu = _time(lambda: parse_text(data, source="bench", scraped_at=at), runs)
    ours, ours_cpu = statistics.median(wall), statistics.median(cpu)
    ours_str = statistics.median(_time(lambda: parse_text(text, source="bench", scraped_at=at), 3)[0])

    small = "".join(text.splitlines(keepends=True)[:slice_lines])

    def run_prom() -> int:
        return sum(len(f.samples) for f in text_string_to_metric_families(small))

    prom_samples = run_prom()
    prom_wall, prom_cpu = _time(run_prom, 3)
    prom, prom_c = statistics.median(prom_wall), statistics.median(prom_cpu)
    ours_rate, prom_rate = samples / ours, prom_samples / prom
    return {
        "benchmark": "dcgm_parse",
        "input": name,
        "scan": SCAN_PATH,
        "lines": text.count("\n"),
        "bytes": len(data),
        "samples": samples,
        "quarantined": batch.quarantined,
        "ours_seconds_median": round(ours, 4),
        "ours_cpu_seconds_median": round(ours_cpu, 4),
        "ours_samples_per_s": round(ours_rate),
        "ours_samples_per_cpu_s": round(samples / ours_cpu),
        "ours_samples_per_s_from_str": round(samples / ours_str),
        "prometheus_client_samples": prom_samples,
        "prometheus_client_seconds_median": round(prom, 4),
        "prometheus_client_samples_per_s": round(prom_rate),
        "prometheus_client_samples_per_cpu_s": round(prom_samples / prom_c),
        "ratio": round(ours_rate / prom_rate, 1),
        "ratio_cpu": round((samples / ours_cpu) / (prom_samples / prom_c), 1),
        "ratio_lines": round((lines_parsed / ours) / prom_rate, 1),
        "target_ratio": 100,
        "runs_s": [round(w, 4) for w in wall],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--slice-lines", type=int, default=50_000)
    parser.add_argument("--input", choices=["clean", "reference", "federate", "all"], default="all")
    args = parser.parse_args()
    samples = len(METRICS) * 512 * args.scrapes
    inputs = {
        "clean": lambda: generate(scrapes=args.scrapes),
        "reference": lambda: reference(samples),
        "federate": lambda: federate(scrapes=args.scrapes),
    }
    for name in inputs if args.input == "all" else (args.input,):
        print(json.dumps(measure(name, inputs[name](), args.runs, args.slice_lines), indent=2))


if __name__ == "__main__":
    main()
