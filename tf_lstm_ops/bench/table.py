"""The text table a run prints: a header on the machine, its FMA peak and the sgemm rate, a block
of rows per case, and the notes (skipped contenders included)."""

from tf_lstm_ops.bench.contenders import GATES, STEP_PHASES


def _fmt(value, spec, missing="-"):
    return missing if value is None else format(value, spec)


def format_table(report):
    results, memory = report["results"], report.get("memory")
    lines = []
    m, sg = report["machine"], report["sgemm"]
    lines.append("tf_lstm_ops benchmark: TF %s, Keras %s, torch %s; %s usable CPUs, TF intra-op "
                 "threads %s%s; our CPU kernels: %s"
                 % (m["tf_version"], m["keras_version"], m["torch_version"] or "-",
                    m["usable_cpus"], m["tf_intra_op_threads"],
                    ", torch threads %s" % m["torch_threads"] if m["torch_threads"] else "",
                    m.get("cpu_kernels_isa", "?")))
    fma = report.get("fma_peak")
    if fma:
        lines.append("FMA peak (hardware, what %% peak divides by for every dtype): %.1f GFLOP/s "
                     "float32, %s, %d thread(s) at once (per thread %s; %g s each%s)"
                     % (fma["gflops"], fma["isa"], fma["threads"],
                        ", ".join("%.1f" % v for v in fma["per_thread_gflops"]), fma["seconds"],
                        _others(fma)))
    else:
        lines.append("FMA peak: not measured (see the notes); % peak is empty")
    lines.append("sgemm (information): tf.matmul %dx%d float32 %.1f GFLOP/s%s (median of %d%s); "
                 "%d repeats, %d warm-up, %g ms cooldown + %d lead-in call(s) before each timed "
                 "call; load average %s -> %s"
                 % (sg["n"], sg["n"], sg["gflops"],
                    ", %.0f%% of the FMA peak" % (100.0 * sg["gflops"] / fma["gflops"])
                    if fma else "", len(sg["samples_ms"]), _others(sg),
                    report["config"]["repeats"], report["config"]["warmup"],
                    report["config"].get("cooldown_ms", 0), report["config"].get("lead_in", 0),
                    _load(m["load_average_start"]), _load(report.get("load_average_end"))))
    lines.append("tf.function call + read-back overhead: %.3f ms per sample (in every TF row)"
                 % m.get("tf_function_call_ms", float("nan")))
    lines.append("speedup = row median / baseline median, same phase (>1: the baseline, ours, is "
                 "faster); GFLOP/s: GEMM FLOP only, bwd = 2x fwd, hvp = 2x fwd+bwd, inf = fwd; "
                 "% peak = GFLOP/s / FMA peak")
    header = "%-30s %-7s %10s %10s %9s %7s %8s" % ("contender", "phase", "median ms", "min ms",
                                                   "GFLOP/s", "% peak", "speedup")
    if memory is not None:
        header += " %9s" % "peak MB"
    cases = []
    for row in results:
        key = (row["family"], row["dtype"], tuple(row["shape"]))
        if key not in cases:
            cases.append(key)
    for family, dtype, shape in cases:
        T, B, I, H = shape
        rows = [r for r in results
                if (r["family"], r["dtype"], tuple(r["shape"])) == (family, dtype, shape)]
        fwd_gflop = 2 * GATES[family] * B * H * (I + H) * T / 1e9
        lines.append("")
        other = report.get("other_cpu_pct", {}).get("cases", {}).get(
            "%s %s (%s)" % (family, dtype, ",".join(map(str, shape))))
        lines.append("== %s %s  T=%d B=%d I=%d H=%d  (fwd %.3g GFLOP; baseline %s%s)"
                     % (family, dtype, T, B, I, H, fwd_gflop, rows[0]["baseline"],
                        "" if other is None else "; other processes used %.0f%% of the CPUs"
                        % other))
        lines.append(header)
        lines.append("-" * len(header))
        previous = None
        for r in rows:
            name = r["name"] if r["contender"] != previous else ""
            previous = r["contender"]
            line = "%-30s %-7s %10s %10s %9s %7s %8s" % (
                name, r["phase"], _fmt(r["median_ms"], ".3f"), _fmt(r["min_ms"], ".3f"),
                _gflops(r["gflops"]), _pct(r["pct_peak"]),
                _fmt(r["speedup"], ".2f") + ("x" if r["speedup"] is not None else ""))
            if memory is not None:
                peak = r.get("peak_mb") if r["phase"] in STEP_PHASES else None
                line += " %9s" % (_fmt(peak, ".1f") if not isinstance(peak, str) else "error")
            lines.append(line)
    notes = list(report["notes"]) + _skip_notes(report["skipped"])
    if notes:
        lines.append("")
        lines.append("notes:")
        lines.extend("  - " + n for n in notes)
    lines.append("")
    lines.append("runtime %.1f s" % report["runtime_s"])
    return "\n".join(lines)


def _skip_notes(skipped):
    """One line per (contender, phases, reason), naming the cases it applies to."""
    groups = {}
    for s in skipped:
        key = (s["name"], "/".join(s["phases"]), s["reason"])
        case = "%s %s (%s)" % (s["family"], s["dtype"], ",".join(map(str, s["shape"])))
        groups.setdefault(key, []).append(case)
    notes = []
    for (name, phases, reason), cases in groups.items():
        where = cases[0] if len(cases) == 1 else "%d cases: %s" % (
            len(cases), ", ".join(cases) if len(cases) <= 3 else ", ".join(cases[:3]) + ", ...")
        notes.append("skipped %s %s in %s: %s" % (name, phases, where, reason))
    return notes


def _pct(value):
    return "-" if value is None else format(value, ".1f" if value >= 1 else ".2f") + "%"


def _others(measured):
    """", others used N% of the CPUs" for a measurement that recorded it."""
    other = measured.get("other_cpu_pct")
    return "" if other is None else ", others used %.0f%% of the CPUs" % other


def _gflops(value):
    return "-" if value is None else format(value, ".1f" if value >= 10 else ".3g")


def _load(load):
    return "-" if not load else "%.2f" % load[0]
