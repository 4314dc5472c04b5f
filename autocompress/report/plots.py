"""Labelled charts of the reports, drawn with matplotlib (the optional ``[plots]`` extra).

``write_plots(folder, {name: data})`` draws each ``report.plot_data`` dict to ``folder/<name>.png``
and returns one entry per plot (file or the reason it was skipped); ``markdown(entries)`` embeds
them in a report. Without matplotlib every plot is skipped with that reason and the reports are
otherwise the same. Figures are built with ``matplotlib.figure.Figure`` and the Agg canvas, never
``pyplot``, so a library caller's backend and global state are left alone.
"""

from __future__ import annotations

import io
from pathlib import Path

from autocompress.cache import atomic_write_bytes

SKIPPED = "matplotlib is not installed (`pip install 'autocompress[plots]'`)"
PARTS = {"fixed_s": ("fixed prefill cost", "#9e9e9e"), "prefill_s": ("prefill", "#4c72b0"),
         "decode_ops_s": ("decode (ops)", "#55a868"), "decode_overhead_s": ("decode (engine overheads)", "#c44e52")}
MEMORY = {"weights": "#4c72b0", "kv_cache": "#55a868", "peak_activation": "#dd8452", "non_torch": "#8172b3",
          "gemm_shapes": "#64b5cd", "cuda_graphs": "#937860", "margin": "#da8bc3", "context_overhead": "#8c8c8c"}
MiB = 1 << 20


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def draw_architecture(d: dict):
    n = len(d["series"])
    fig = _figure(max(8.0, 0.28 * d["layers"] + 2), 2.8 * n + 0.6)
    axes = fig.subplots(n, 1, sharex=True, squeeze=False)[:, 0]
    x = list(range(d["layers"]))
    top = max([h for h in d["parent"]["heads"] if h] + [1])
    for ax, s in zip(axes, d["series"]):
        share = [v if v is not None else 0.0 for v in s["ffn_share"]]
        ax.bar(x, share, color="#4c72b0", width=0.8, label="FFN width kept (share of the parent's)")
        ax.set_ylim(0, 1.18)
        ax.set_ylabel("FFN kept")
        ax.scatter(s["removed_ffn"], [0.04] * len(s["removed_ffn"]), marker="v", color="#c44e52", zorder=3,
                   label="FFN removed")
        ax.scatter(s["removed_mixer"], [1.1] * len(s["removed_mixer"]), marker="x", color="#c44e52", zorder=3,
                   label=f"mixer removed ({d['heads_label']} 0)")
        hx = ax.twinx()
        hx.step(x, [h if h is not None else float("nan") for h in s["heads"]], where="mid", color="#dd8452",
                label=d["heads_label"])
        hx.plot(x, [h if h is not None else float("nan") for h in d["parent"]["heads"]], linestyle="--",
                color="#8c8c8c", linewidth=1, label=f"parent's {d['heads_label']}")
        hx.set_ylim(0, top * 1.18)
        hx.set_ylabel(d["heads_label"])
        ax.set_title(f"{s['label']}: hidden {s['hidden']} of {d['parent']['hidden']}, "
                     f"{s['params'] / 1e6:,.1f}M of {d['parent']['params'] / 1e6:,.1f}M params", fontsize=10)
        handles = ax.get_legend_handles_labels()[0] + hx.get_legend_handles_labels()[0]
    axes[-1].set_xlabel("layer")
    axes[-1].set_xticks(x[:: max(1, d["layers"] // 30)])
    fig.legend(handles=handles, loc="outside lower center", ncol=5, fontsize=8, frameon=False)
    fig.suptitle(d["title"], fontsize=11)
    return fig


def draw_costs(d: dict):
    nw = len(d["workloads"])
    fig = _figure(11, 2.2 + 1.6 * (nw + 2))
    axes = fig.subplots(nw + 2, 1, squeeze=False)[:, 0]
    for ax, w in zip(axes, d["workloads"]):
        labels = [b["label"] + (f" (x{b['waves']} waves)" if b["waves"] > 1 else "") for b in w["bars"]]
        left = [0.0] * len(labels)
        for part, (name, color) in PARTS.items():
            vals = [b[part] for b in w["bars"]]
            ax.barh(labels, vals, left=left, color=color, label=name)
            left = [a + v for a, v in zip(left, vals)]
        if "e2e" in w["bounds"]:
            ax.axvline(w["bounds"]["e2e"], color="black", linestyle="--", linewidth=1, label="e2e bound")
        if "ttft" in w["bounds"]:
            ax.axvline(w["bounds"]["ttft"], color="black", linestyle=":", linewidth=1, label="ttft bound")
        ax.invert_yaxis()
        ax.set_xlabel("seconds per request (one wave)")
        ax.set_title(f"workload {w['name']}: where one request's time goes (predicted)", fontsize=10)
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    ax = axes[nw]
    labels = [v["label"] for v in d["ratios"][0]["values"]] if d["ratios"] else []
    width = 0.8 / max(1, len(labels))
    for j, label in enumerate(labels):
        xs = [i + (j - (len(labels) - 1) / 2) * width for i in range(len(d["ratios"]))]
        ax.bar(xs, [r["values"][j]["ratio"] for r in d["ratios"]], width=width, label=label)
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="bound")
    ax.set_xticks(range(len(d["ratios"])), [r["bound"] for r in d["ratios"]])
    ax.set_ylabel("predicted / bound")
    ax.set_title("each bound: prediction over the bound (at most 1 passes; >= bounds inverted)", fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    ax = axes[nw + 1]
    labels = [b["label"] for b in d["memory"]["bars"]]
    left = [0.0] * len(labels)
    for term, color in MEMORY.items():
        vals = [b[term] / MiB for b in d["memory"]["bars"]]
        if any(vals):
            ax.barh(labels, vals, left=left, color=color, label=term.replace("_", " "))
        left = [a + v for a, v in zip(left, vals)]
    ax.axvline(d["memory"]["limit"] / MiB, color="black", linestyle="--", linewidth=1, label="memory limit")
    ax.invert_yaxis()
    ax.set_xlabel("MiB")
    ax.set_title("memory (engine accounting, predicted)", fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    fig.suptitle(d["title"], fontsize=11)
    return fig


def draw_pareto(d: dict):
    fig = _figure(7, 4.5)
    ax = fig.subplots()
    groups = sorted({p["group"] for p in d["points"]})
    for g in groups:
        pts = [p for p in d["points"] if p["group"] == g]
        ax.scatter([p["cost"] for p in pts], [p["quality"] for p in pts], label=g or None, zorder=3)
    for p in d["points"]:
        ax.annotate(p["label"], (p["cost"], p["quality"]), textcoords="offset points", xytext=(4, 4), fontsize=8)
    front = [next(p for p in d["points"] if p["label"] == name) for name in d["front"]]
    ax.plot([p["cost"] for p in front], [p["quality"] for p in front], color="#8c8c8c", linestyle="-",
            linewidth=1, label="Pareto front", zorder=2)
    if d["x_line"] is not None:
        ax.axvline(d["x_line"], color="black", linestyle="--", linewidth=1, label="bound")
    ax.set_xlabel(d["x_label"])
    ax.set_ylabel(d["y_label"] + (" (lower is better)" if d["lower_quality_is_better"] else " (higher is better)"))
    ax.set_title(d["title"], fontsize=11)
    ax.legend(fontsize=8)
    return fig


DRAW = {"architecture": draw_architecture, "costs": draw_costs, "pareto": draw_pareto}


def matplotlib_missing() -> str | None:
    """Why plots cannot be drawn here, or None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return SKIPPED
    return None


def write_plots(folder: str | Path, plots: dict[str, dict], prefix: str = "") -> list[dict]:
    """Draw each ``plot_data`` dict to ``folder/<prefix><name>.png`` (atomically); one entry per plot:
    ``{"name", "title", "file" (relative to folder) or None, "skipped" (the reason) or None}``."""
    why = matplotlib_missing()
    out = []
    for name, data in plots.items():
        entry = {"name": name, "title": data["title"], "file": None, "skipped": why}
        if why is None:
            from matplotlib.backends.backend_agg import FigureCanvasAgg

            fig = DRAW[data["kind"]](data)
            FigureCanvasAgg(fig)
            buf = io.BytesIO()
            fig.savefig(buf, format="png", metadata={"Software": None})
            entry["file"] = f"{prefix}{name}.png"
            atomic_write_bytes(Path(folder) / entry["file"], buf.getvalue())
        out.append(entry)
    return out


def markdown(entries: list[dict]) -> list[str]:
    """Markdown lines embedding the plots (relative links), or saying why one was skipped."""
    lines = []
    for e in entries:
        lines.append(f"![{e['title']}]({e['file']})" if e["file"] else f"> plot `{e['name']}` skipped: {e['skipped']}")
        lines.append("")
    return lines
