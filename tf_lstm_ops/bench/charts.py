"""--plot: a grouped bar chart of the median times per case, drawn with matplotlib (imported only
here, so the benchmark runs without it)."""

import math

from tf_lstm_ops.bench.contenders import HVP_PHASE, INFERENCE_PHASE, PHASES, STEP_PHASES

CHART_PHASES = PHASES + (HVP_PHASE, INFERENCE_PHASE)


def plot(report, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    results = report["results"]
    cases = []
    for row in results:
        key = (row["family"], row["dtype"], tuple(row["shape"]))
        if key not in cases:
            cases.append(key)
    ncols = min(2, len(cases)) or 1
    nrows = max(1, math.ceil(len(cases) / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(7.5 * ncols, 4.6 * nrows), squeeze=False)
    colors = {"fwd": "#4c72b0", "bwd": "#dd8452", "fwd+bwd": "#55a868", HVP_PHASE: "#8172b3",
              INFERENCE_PHASE: "#937860"}
    width = 0.2
    for ax, (family, dtype, shape) in zip(axes.flat, cases):
        rows = [r for r in results
                if (r["family"], r["dtype"], tuple(r["shape"])) == (family, dtype, shape)]
        names = list(dict.fromkeys(r["name"] for r in rows))
        # the phases this case has, so the bars of a contender centre on its label
        present = [p for p in CHART_PHASES if any(r["phase"] == p for r in rows)]
        for k, phase in enumerate(present):
            for j, name in enumerate(names):
                row = next((r for r in rows if r["name"] == name and r["phase"] == phase), None)
                if row is None:
                    continue
                x = j + (k - (len(present) - 1) / 2) * width
                ax.bar(x, row["median_ms"], width, color=colors[phase],
                       hatch="//" if row["ours"] else None, edgecolor="white")
                if phase in STEP_PHASES and row["speedup"] is not None:
                    ax.annotate("%.2gx" % row["speedup"], (x, row["median_ms"]),
                                ha="center", va="bottom", fontsize=7, rotation=90,
                                xytext=(0, 2), textcoords="offset points")
        ax.set_yscale("log")
        low, high = ax.get_ylim()
        ax.set_ylim(low, high * 3)  # room for the speedup labels
        ax.set_ylabel("median ms (log)")
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=7)
        T, B, I, H = shape
        ax.set_title("%s %s T=%d B=%d I=%d H=%d" % (family, dtype, T, B, I, H), fontsize=10)
        ax.legend([Patch(color=colors[p]) for p in present], present, fontsize=7)
        ax.grid(axis="y", alpha=0.3, which="both")
    for ax in list(axes.flat)[len(cases):]:
        ax.axis("off")
    fig.suptitle("tf_lstm_ops bench (hatched: ours; labels: step ms / baseline ms, the step "
                 "fwd+bwd, hvp or inf)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
