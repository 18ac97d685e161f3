"""Timing: progress lines, the FMA peak, the sgemm rate and the tf.function call overhead, the
interleaved timed rounds of every (contender, phase) of a case, and each row's median, GFLOP/s,
% of peak and speedup."""

import gc
import statistics
import sys
import threading
import time

from tf_lstm_ops.bench._common import _first_line, _force, _function
from tf_lstm_ops.bench.contenders import (
    DEFAULT_BASELINE,
    UNSUPPORTED_NOTES,
    Skip,
    contenders_for,
)
from tf_lstm_ops.bench.environment import cpu_snapshot, other_cpu_use


class Progress:
    def __init__(self, quiet, total):
        self.quiet, self.total, self.done = quiet, total, 0
        self.start = time.perf_counter()
        self.tty = not quiet and sys.stderr.isatty()

    def say(self, text, step=False):
        if step:
            self.done += 1
        if self.quiet:
            return
        line = "[%6.1fs] %s" % (time.perf_counter() - self.start, text)
        if self.tty:
            sys.stderr.write("\r\033[K" + line)
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def close(self):
        if self.tty:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def measure_fma_peak(threads, seconds, progress, notes):
    """The machine's float32 FMA peak, the hardware limit "% peak" divides by: the library's
    register-only FMA loop (_loader.fma_peak_gflops, the ISA build that runs) on `threads` Python
    threads at once (ctypes releases the GIL), in rounds that start together and last
    `seconds` / rounds each; per thread the best round (interference from other processes can
    only lower a rate), summed. None, with a note, where the library predates the diagnostic."""
    from tf_lstm_ops._loader import cpu_isa, fma_peak_gflops

    progress.say("FMA peak: %d thread(s) x %.2f s ..." % (threads, seconds))
    try:
        fma_peak_gflops(0.001)
    except AttributeError as error:
        notes.append("FMA peak not measured (%s: an op library built before "
                     "tf_lstm_ops_fma_peak_gflops): %% peak is left empty" % _first_line(error))
        return None
    rounds = 5
    values = [0.0] * threads
    start_together = threading.Barrier(threads)

    def measure(k):
        fma_peak_gflops(0.01)  # brings this thread's core to its vector clock first
        for _ in range(rounds):
            start_together.wait()
            values[k] = max(values[k], fma_peak_gflops(seconds / rounds))

    workers = [threading.Thread(target=measure, args=(k,)) for k in range(threads)]
    before = cpu_snapshot()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return {"gflops": sum(values), "per_thread_gflops": values, "threads": threads,
            "seconds": seconds, "isa": cpu_isa(),
            "other_cpu_pct": other_cpu_use(before, cpu_snapshot())}


def measure_sgemm(n, repeats, progress):
    import tensorflow as tf

    progress.say("sgemm peak: tf.matmul %dx%d float32 ..." % (n, n))
    a = tf.random.stateless_normal([n, n], seed=[1, 2])
    b = tf.random.stateless_normal([n, n], seed=[3, 4])
    matmul = _function(lambda a, b: _force([tf.matmul(a, b)]))
    for _ in range(2):
        matmul(a, b).numpy()
    samples, before = [], cpu_snapshot()
    for _ in range(max(5, repeats)):
        start = time.perf_counter()
        matmul(a, b).numpy()
        samples.append((time.perf_counter() - start) * 1e3)
    median = statistics.median(samples)
    return {"n": n, "median_ms": median, "samples_ms": samples,
            "gflops": 2.0 * n ** 3 / (median * 1e-3) / 1e9,
            "other_cpu_pct": other_cpu_use(before, cpu_snapshot())}


def measure_call_overhead(repeats):
    """Median ms of calling a tf.function that does nothing but the result read-back every
    contender does: the fixed cost in each TF sample (it dominates tiny shapes)."""
    import tensorflow as tf

    x = tf.ones([4])
    noop = _function(lambda x: _force([x]))
    noop(x).numpy()
    samples = []
    for _ in range(max(20, 4 * repeats)):
        start = time.perf_counter()
        noop(x).numpy()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


class Cell:
    def __init__(self, contender, phase, fn):
        self.contender, self.phase, self.fn, self.samples = contender, phase, fn, []


def plan(args):
    """[(family, dtype, shape, [contender, ...])] and the number of (contender, phase) cells."""
    cases, total = [], 0
    for family in args.families:
        for dtype in args.dtypes:
            for shape in args.shapes:
                contenders = contenders_for(family, args.contenders)
                cases.append((family, dtype, tuple(shape), contenders))
                total += sum(len(c.phases) for c in contenders if dtype in c.dtypes)
    return cases, total


def run_case(case, contenders, args, progress, skipped):
    """Builds, warms up and times every (contender, phase) of one case; returns its Cells."""
    cells = []
    for contender in contenders:
        def skip(reason, phases=contender.phases):
            skipped.append({"family": case.family, "dtype": case.dtype, "shape": list(case.shape),
                            "contender": contender.key, "name": contender.name,
                            "phases": list(phases), "reason": reason})

        if case.dtype not in contender.dtypes:
            skip("%s: %s" % (case.dtype, UNSUPPORTED_NOTES.get(contender.key, "unsupported")))
            continue
        progress.say("%s: building %s ..." % (case.label, contender.name))
        try:
            fns = contender.build(case)
        except Skip as error:
            skip(str(error))
            progress.done += len(contender.phases)
            continue
        except Exception as error:  # report it, go on with the others
            skip("%s: %s" % (type(error).__name__, _first_line(error)))
            progress.done += len(contender.phases)
            continue
        for phase in contender.phases:
            progress.say("[%d/%d] %s (%s) %s %s: compile + warm-up ..."
                         % (progress.done + 1, progress.total, contender.name,
                            ",".join(map(str, case.shape)), case.dtype, phase), step=True)
            try:
                for _ in range(1 + args.warmup):
                    fns[phase]()
            except Exception as error:
                skip("%s: %s" % (type(error).__name__, _first_line(error)), [phase])
                continue
            cells.append(Cell(contender, phase, fns[phase]))
    gc.collect()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(args.repeats):
            progress.say("%s: timing round %d/%d (%d callables)"
                         % (case.label, r + 1, args.repeats, len(cells)))
            shift = r % max(1, len(cells))
            for cell in cells[shift:] + cells[:shift]:
                if args.cooldown > 0:
                    time.sleep(args.cooldown / 1e3)
                for _ in range(args.lead_in):
                    cell.fn()
                start = time.perf_counter()
                cell.fn()
                cell.samples.append((time.perf_counter() - start) * 1e3)
    finally:
        if gc_was_enabled:
            gc.enable()
    return cells


def results_of(case, cells, peak_gflops, sgemm_gflops):
    """The case's rows; pct_peak relative to the FMA peak (None where unmeasured), pct_sgemm to
    the tf.matmul rate."""
    rows = []
    for cell in cells:
        median = statistics.median(cell.samples)
        gflops = case.flop(cell.phase) / (median * 1e-3) / 1e9
        rows.append({
            "family": case.family, "dtype": case.dtype, "shape": list(case.shape),
            "T": case.T, "B": case.B, "I": case.I, "H": case.H,
            "contender": cell.contender.key, "name": cell.contender.name,
            "ours": cell.contender.ours, "phase": cell.phase,
            "median_ms": median, "min_ms": min(cell.samples), "samples_ms": cell.samples,
            "flop": case.flop(cell.phase), "gflops": gflops,
            "pct_peak": 100.0 * gflops / peak_gflops if peak_gflops else None,
            "pct_sgemm": 100.0 * gflops / sgemm_gflops,
        })
    return rows


def add_speedups(results, baseline):
    """speedup (row ms / baseline ms, same case and phase) on every row, and the list of every
    ours-vs-other ratio (their ms / our ms)."""
    by_case = {}
    for row in results:
        by_case.setdefault((row["family"], row["dtype"], tuple(row["shape"])), []).append(row)
    pairs = []
    for (family, _, _), rows in by_case.items():
        base_key = baseline if any(r["contender"] == baseline for r in rows) else None
        base_key = base_key or DEFAULT_BASELINE[family]
        base = {r["phase"]: r for r in rows if r["contender"] == base_key}
        for row in rows:
            row["baseline"] = base_key
            ref = base.get(row["phase"])
            row["speedup"] = row["median_ms"] / ref["median_ms"] if ref else None
        for ours in (r for r in rows if r["ours"]):
            for other in rows:
                if other["phase"] == ours["phase"] and not other["ours"]:
                    pairs.append({"family": family, "dtype": ours["dtype"],
                                  "shape": ours["shape"], "phase": ours["phase"],
                                  "ours": ours["contender"], "other": other["contender"],
                                  "ratio": other["median_ms"] / ours["median_ms"]})
    return pairs
