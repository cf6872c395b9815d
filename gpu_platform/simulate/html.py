"""`--out DIR`: the simulation as report.json, PNG plots (matplotlib, Agg) and one report.html."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import numpy as np

from gpu_platform.simulate.des import SimResult


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


LANE_COLOURS = {
    "incident_response": "#d62728",
    "release_eval": "#ff7f0e",
    "candidate_train": "#1f77b4",
    "baseline_rebuild": "#2ca02c",
    "map_semantic_batch": "#9467bd",
    "labeler_batch": "#8c564b",
    "platform_maintenance": "#7f7f7f",
    "research_best_effort": "#17becf",
}
"""One colour per lane in every plot of every report (lanes of other policies: a stable hash)."""

SCENARIO_COLOURS = {
    "policy": "#1f77b4", "fifo": "#7f7f7f", "fifo-backfill": "#2ca02c", "fifo-flavors": "#bcbd22",
    "fifo-flavors-backfill": "#9467bd", "strict": "#d62728",
}
_SPARE = ("#e377c2", "#bcbd22", "#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5", "#c49c94", "#f7b6d2")


def _colour(name: str, table: dict[str, str]) -> str:
    if name in table:
        return table[name]
    import zlib

    return _SPARE[zlib.crc32(name.encode()) % len(_SPARE)]


def lane_colour(lane: str) -> str:
    return _colour(lane, LANE_COLOURS)


def _grouped_bars(path: Path, title: str, ylabel: str, series: dict[str, dict[str, float | None]]) -> None:
    """Bars per lane (and "all"), one colour per scenario. When the largest bar is more than 30
    times the smallest non-zero one the axis is logarithmic (symlog, so zeros still show);
    nothing but zeros: the plot says so instead of drawing an empty axis."""
    plt = _plt()
    lanes = sorted({lane for s in series.values() for lane in s if lane != "all"})
    if any("all" in s for s in series.values()):
        lanes.append("all")
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(lanes) + 2), 4))
    width = 0.8 / max(1, len(series))
    x = np.arange(len(lanes))
    values = [v for vals in series.values() for v in vals.values() if v]
    for i, (name, vals) in enumerate(series.items()):
        ax.bar(x + i * width, [vals.get(lane) or 0.0 for lane in lanes], width, label=name,
               color=_colour(name, SCENARIO_COLOURS))
    ax.set_xticks(x + width * (len(series) - 1) / 2, lanes, rotation=20, ha="right", fontsize=8)
    ax.set_title(title)
    if not values:
        ax.set_ylim(0, 1)
        ax.set_yticks([])
        ax.text(0.5, 0.5, "all zero", transform=ax.transAxes, ha="center", va="center", color="#555")
    else:
        positive = [abs(v) for v in values if v]
        if max(positive) > 30 * min(positive):
            ax.set_yscale("symlog", linthresh=min(positive))
            ylabel += " (log scale)"
        ax.set_ylim(bottom=0)
    ax.set_ylabel(ylabel)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _usage_plot(path: Path, res: SimResult, title: str, common_end: float | None = None) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 3.6))
    lanes = sorted({lane for _t, lane, _d in res.usage_events})
    if res.usage_events:
        ev = sorted(res.usage_events, key=lambda e: e[0])
        t = np.array([e[0] for e in ev])
        grid = np.linspace(t.min(), t.max(), 600)
        stacks = []
        for lane in lanes:
            d = np.array([e[2] if e[1] == lane else 0.0 for e in ev])
            held = np.cumsum(d)
            idx = np.searchsorted(t, grid, side="right") - 1
            stacks.append(np.where(idx >= 0, held[np.clip(idx, 0, None)], 0.0))
        hours = (grid - grid[0]) / 3600
        ax.stackplot(hours, *stacks, labels=lanes, step="post", colors=[lane_colour(lane) for lane in lanes])
        ax.axhline(res.scenario.capacity, color="black", lw=0.8, ls="--", label="pool")
        ax.set_xlabel("hours since the first submission")
        if common_end is not None and common_end > t.min():
            ax.set_xlim(0, (common_end - t.min()) / 3600)  # every scenario on the report's horizon
    else:
        ax.set_ylim(0, 1)
        ax.text(0.5, 0.5, "no job ran", transform=ax.transAxes, ha="center", va="center", color="#555")
    ax.set_ylabel("GPUs held")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _table(rep: dict[str, Any]) -> str:
    cols = ("lane", "jobs", "never admitted", "wait p50 (h)", "wait p95 (h)", "wait max (h)", "GPU util", "GPU-h lost", "preemptions",
            "GPU-h stranded", "GPU-h idle by lending rule")
    rows = []
    for lane, f in list(rep["lanes"].items()) + [("all", rep["total"])]:
        w = f["wait_s"]

        def h(v: float | None) -> str:
            return "-" if v is None else f"{v / 3600:.2f}"

        rows.append(
            (lane, f["jobs"], f["never_admitted"], h(w["p50"]), h(w["p95"]), h(w["max"]),
             "-" if f["gpu_utilization"] is None else f"{100 * f['gpu_utilization']:.1f}%",
             f"{f['gpu_hours_lost_to_preemption']:.1f}", f["preemptions"],
             "-" if f.get("gpu_hours_stranded_by_fragmentation") is None
             else f"{f['gpu_hours_stranded_by_fragmentation']:.1f}",
             "-" if f.get("gpu_hours_idle_by_lending_rule") is None else f"{f['gpu_hours_idle_by_lending_rule']:.1f}")
        )
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


_CSS = "body{font-family:sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child,th:first-child{text-align:left}"


def write_trace_report(out: Path, doc: dict[str, Any], results: dict[str, SimResult]) -> list[str]:
    """Writes report.json, report.html and the plots; returns the file names written."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(doc, indent=2))
    scen = doc["scenarios"]
    files = ["report.json"]
    horizon = max((r["horizon_s"] for r in scen.values()), default=0.0)

    def per_lane(pick) -> dict[str, dict[str, float | None]]:
        return {n: {**{lane: pick(f, r) for lane, f in r["lanes"].items()}, "all": pick(r["total"], r)}
                for n, r in scen.items()}

    def share(f: dict, r: dict) -> float | None:
        # GPU-hours over the report's common horizon: the same GPU-hours give the same bar
        return None if not horizon or not r["capacity_gpus"] else f["gpu_hours"] * 3600 / (r["capacity_gpus"] * horizon)

    plots = {
        "wait_p95.png": ("wait p95 by lane", "hours", per_lane(lambda f, r: (f["wait_s"]["p95"] or 0) / 3600)),
        "utilization.png": (
            f"GPU-hours held by lane, as a share of the pool over the longest run ({horizon / 3600:.0f} h)",
            "share of pool x horizon", per_lane(share)),
        "busy_share.png": ("pool busy during each scenario's own run (its utilization)", "share",
                           per_lane(lambda f, r: f["gpu_utilization"])),
        "lost_gpu_hours.png": ("GPU-hours lost to preemption", "GPU-hours",
                               per_lane(lambda f, r: f["gpu_hours_lost_to_preemption"])),
        "never_admitted.png": ("jobs never admitted", "jobs", per_lane(lambda f, r: f["never_admitted"])),
    }
    if any(r["total"].get("gpu_hours_stranded_by_fragmentation") is not None for r in scen.values()):
        # a pool-wide figure: one bar per scenario
        plots["stranded_gpu_hours.png"] = (
            "GPU-hours stranded by fragmentation (free, but on no node the waiting head fits)", "GPU-hours",
            {n: {"all": r["total"].get("gpu_hours_stranded_by_fragmentation") or 0.0} for n, r in scen.items()})
    for name, (title, ylabel, series) in plots.items():
        _grouped_bars(out / name, title, ylabel, series)
        files.append(name)
    common_end = max((res.end for res in results.values()), default=None)
    for n, res in results.items():
        _usage_plot(out / f"usage_{n}.png", res, f"GPUs held by lane: {n}", common_end)
        files.append(f"usage_{n}.png")
    parts = [f"<h1>Policy simulation: {html.escape(str(doc['trace']['source']))}</h1>"]
    parts.append("<pre>" + html.escape(json.dumps({k: v for k, v in doc.items() if k not in ("scenarios",)}, indent=1)) + "</pre>")
    targets = doc.get("targets") or {}
    if targets.get("lanes"):
        from gpu_platform.simulate.targets import shown

        head = "".join(f"<th>{c}</th>" for c in ("lane", "target", "limit", "policy", "verdict"))
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (lane, r["target"], *shown(r))) + "</tr>"
            for lane, rows in targets["lanes"].items() for r in rows
        )
        parts.append(f"<h2>Lane targets: {targets['met']} met, {targets['missed']} missed, "
                     f"{targets['not_judged']} not judged</h2><table><tr>{head}</tr>{body}</table>")
    for n, r in scen.items():
        parts.append(f"<h2>{html.escape(n)}</h2><p>{html.escape(r['description'])}; pool {r['capacity_gpus']:g} GPUs, horizon {r['horizon_s'] / 3600:.1f} h</p>")
        parts.append(_table(r))
        parts.append(f'<img src="usage_{html.escape(n)}.png" alt="GPUs held over time, {html.escape(n)}">')
    for name in plots:
        parts.append(f'<img src="{name}" alt="{html.escape(plots[name][0])}">')
    (out / "report.html").write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>simulation</title><style>{_CSS}</style></head><body>{''.join(parts)}</body></html>")
    files.append("report.html")
    return files


def write_kueue_report(out: Path, doc: dict[str, Any]) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(doc, indent=2))
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    cqc = doc["clusterQueueClasses"]
    a1.bar(list(cqc), [c["usagePct"] or 0 for c in cqc.values()])
    a1.set_title("usage per cluster-queue class (% of nominal)")
    wc = doc["workloadClasses"]
    a2.bar(list(wc), [c["averageTimeToAdmissionMs"] / 1000 for c in wc.values()])
    a2.set_title("average time to admission (s)")
    fig.tight_layout()
    fig.savefig(out / "kueue_summary.png", dpi=110)
    plt.close(fig)
    rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{v['count']}</td><td>{v['averageTimeToAdmissionMs']}</td><td>{v['totalEvictions']}</td><td>{v['neverAdmitted']}</td></tr>"
        for k, v in wc.items()
    )
    qrows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{v['queues']}</td><td>{v['nominalQuota']:g}</td><td>{v['usagePct']}</td></tr>" for k, v in cqc.items()
    )
    body = (
        f"<h1>{html.escape(doc['scenario'])}</h1><p>{doc['workloads']} workloads, {doc['cluster_queues']} cluster queues, "
        f"{doc['wall_time_simulated_ms']} ms simulated</p>"
        f"<table><tr><th>cluster-queue class</th><th>queues</th><th>nominal quota</th><th>usage %</th></tr>{qrows}</table>"
        f"<table><tr><th>workload class</th><th>count</th><th>avg time to admission (ms)</th><th>evictions</th><th>never admitted</th></tr>{rows}</table>"
        '<img src="kueue_summary.png" alt="usage and time to admission">'
    )
    (out / "report.html").write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>kueue scenario</title><style>{_CSS}</style></head><body>{body}</body></html>")
    return ["report.json", "kueue_summary.png", "report.html"]
