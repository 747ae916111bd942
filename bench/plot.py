"""The main job's picture (bench/results/recompute.png): time against measured peak memory for each
workload, one marker per tool and a label per strategy, and below it the time of every workload and
strategy side by side for tracekern and its peers."""
from __future__ import annotations

STYLE = {"tracekern": ("o", "#1f77b4"), "jax": ("s", "#ff7f0e"), "tensorflow": ("^", "#2ca02c"),
         "torch": ("D", "#d62728")}
LABELS = {"tracekern": "tracekern", "jax": "JAX", "tensorflow": "TensorFlow", "torch": "PyTorch"}


def plot(result: dict, path: str) -> str | None:
    """Writes the PNG; None if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
    except ImportError:
        return None
    rows = [r for r in result["rows"] if r["time_s"]]
    names = list(dict.fromkeys(r["workload"] for r in result["rows"]))
    tools = [t for t in STYLE if any(r["tool"] == t for r in result["rows"])]
    cols = 4
    grid_rows = -(-(len(names) + 1) // cols)
    fig = plt.figure(figsize=(17, 4.1 * grid_rows + 5.2))
    spec = fig.add_gridspec(grid_rows + 1, cols, height_ratios=[1] * grid_rows + [1.25])
    size = result.get("size", "")
    fig.suptitle(f"tracekern and its peers: value_and_grad of each workload in kernels/ ({size} sizes, "
                 f"medians; lower and further left is better)", fontsize=13)
    for i, name in enumerate(names):
        ax = fig.add_subplot(spec[i // cols, i % cols])
        mine = [r for r in rows if r["workload"] == name and r["peak_bytes"] is not None]
        for r in mine:
            marker, color = STYLE[r["tool"]]
            x, y = max(r["peak_bytes"], 2**16) / 2**20, r["time_s"] * 1e3
            ax.scatter(x, y, marker=marker, color=color, s=46, zorder=3)
            ax.annotate(r["strategy"], (x, y), xytext=(4, 3), textcoords="offset points", fontsize=7.5, color=color)
        peaks = [max(r["peak_bytes"], 2**16) for r in mine]
        if peaks and max(peaks) / min(peaks) > 20:
            ax.set_xscale("log")
        missing = sorted({LABELS[r["tool"]] for r in result["rows"] if r["workload"] == name and r["unsupported"]})
        ax.set_title(name + (f"  (no row: {', '.join(missing)})" if missing else ""), fontsize=10)
        ax.set_xlabel("measured peak memory of the step (MB)", fontsize=8)
        ax.set_ylabel("time per step (ms)", fontsize=8)
        ax.tick_params(labelsize=7.5)
        ax.margins(x=0.25, y=0.2)
        ax.grid(alpha=0.3)
    legend_ax = fig.add_subplot(spec[(len(names)) // cols, len(names) % cols])
    legend_ax.axis("off")
    handles = [Line2D([], [], marker=STYLE[t][0], color=STYLE[t][1], linestyle="", markersize=9, label=LABELS[t])
               for t in tools]
    legend_ax.legend(handles=handles, loc="center", title="tool (one marker each)", fontsize=11, title_fontsize=11,
                     frameon=False)
    legend_ax.text(0.5, 0.05, "labels: the strategy of each point\n(none = no annotation)", ha="center",
                   fontsize=9, transform=legend_ax.transAxes)

    ax = fig.add_subplot(spec[grid_rows, :])
    groups = list(dict.fromkeys((r["workload"], r["strategy"]) for r in result["rows"]))
    width = 0.8 / max(len(tools), 1)
    for j, tool in enumerate(tools):
        for g, (name, strategy) in enumerate(groups):
            r = next((r for r in result["rows"] if (r["workload"], r["strategy"], r["tool"]) == (name, strategy, tool)), None)
            x = g + (j - (len(tools) - 1) / 2) * width
            if r is None:
                continue
            if r["time_s"] is None:
                ax.text(x, 0.02, "n/a", rotation=90, ha="center", va="bottom", fontsize=6.5, color=STYLE[tool][1],
                        transform=ax.get_xaxis_transform())
                continue
            ax.bar(x, r["time_s"] * 1e3, width, color=STYLE[tool][1], label=LABELS[tool] if g == 0 or not ax.containers else None)
    ax.set_yscale("log")
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{n}\n{s}" for n, s in groups], fontsize=7.5)
    for g in range(1, len(groups)):
        if groups[g][0] != groups[g - 1][0]:
            ax.axvline(g - 0.5, color="gray", lw=0.6)
    ax.set_ylabel("time per step (ms, log scale)")
    ax.set_title("time of every workload and strategy, tool by tool (n/a: the tool cannot run it; see the notes)",
                 fontsize=10)
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=STYLE[t][1]) for t in tools], labels=[LABELS[t] for t in tools],
              fontsize=9, ncol=len(tools), loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
