"""The main job's picture (bench/results/recompute.png): time against measured peak memory for each
workload, one marker per tool and a label per strategy, and below it the time of every workload and
strategy side by side for tracekern and its peers."""
from __future__ import annotations

STYLE = {"tracekern": ("o", "#1f77b4"), "jax": ("s", "#ff7f0e"), "tensorflow": ("^", "#2ca02c"),
         "torch": ("D", "#d62728"), "torch_compile": ("v", "#9467bd")}
LABELS = {"tracekern": "tracekern", "jax": "JAX", "tensorflow": "TensorFlow", "torch": "PyTorch",
          "torch_compile": "torch.compile"}


def plot(result: dict, path: str) -> str | None:
    """Writes the PNG; None if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
    except ImportError:
        return None
    result = dict(result, rows=[r for r in result["rows"] if not r.get("load")])   # (the machine as it was)
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
        ax.set_title(name, fontsize=10)
        missing = {}
        for r in result["rows"]:
            if r["workload"] == name and (r["unsupported"] or (r["time_s"] and r["peak_bytes"] is None)):
                missing.setdefault(LABELS[r["tool"]], []).append(r["strategy"] if r["unsupported"] else "no peak")
        if missing:
            text = "not shown:\n" + "\n".join(f"{t}: {', '.join(dict.fromkeys(v))}" for t, v in missing.items())
            ax.text(0.02, 0.98, text, transform=ax.transAxes, fontsize=6.5, va="top", color="dimgray")
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
    legend_ax.text(0.5, 0.0, "labels: the strategy of each point (none = no annotation)\n"
                   "not shown: strategies a tool cannot run, and tools whose\npeak memory cannot be measured "
                   "(TensorFlow keeps freed\nmemory in its own allocator)", ha="center", fontsize=8.5,
                   transform=legend_ax.transAxes)

    ax = fig.add_subplot(spec[grid_rows, :])
    groups = list(dict.fromkeys((r["workload"], r["strategy"]) for r in result["rows"]))
    offset = 0.7 / max(len(tools), 1)
    for j, tool in enumerate(tools):
        marker, color = STYLE[tool]
        for g, (name, strategy) in enumerate(groups):
            r = next((r for r in result["rows"] if (r["workload"], r["strategy"], r["tool"]) == (name, strategy, tool)), None)
            x = g + (j - (len(tools) - 1) / 2) * offset
            if r is None:
                continue
            if r["time_s"] is None:
                ax.text(x, 0.03, "n/a", rotation=90, ha="center", va="bottom", fontsize=7, color=color,
                        transform=ax.get_xaxis_transform())
                continue
            y = r["time_s"] * 1e3
            ax.vlines(x, r["time_min_s"] * 1e3, r["time_max_s"] * 1e3, color=color, lw=1, alpha=0.5)
            ax.scatter(x, y, marker=marker, color=color, s=38, zorder=3)
            ax.annotate(f"{y:.0f}", (x, y), xytext=(0, 5), textcoords="offset points", ha="center", fontsize=6.5,
                        color=color)
    ax.set_yscale("log")
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{n}\n{s}" for n, s in groups], fontsize=7.5)
    ax.set_xlim(-0.6, len(groups) - 0.4)
    for g in range(1, len(groups)):
        if groups[g][0] != groups[g - 1][0]:
            ax.axvline(g - 0.5, color="gray", lw=0.6)
    ax.set_ylabel("time per step (ms, log scale)")
    ax.set_title("time of every workload and strategy, tool by tool: median (labelled, ms) and min to max (line); "
                 "n/a: the tool cannot run it (see the notes)", fontsize=10)
    ax.legend(handles=handles, fontsize=9, ncol=len(tools), loc="upper left")
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
