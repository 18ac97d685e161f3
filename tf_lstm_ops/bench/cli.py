"""The command line: arguments and their defaults, run() (every case timed, optionally its memory
measured, into one report) and main() (the table, --json, --plot). python -m tf_lstm_ops.bench
runs main()."""

import argparse
import gc
import json
import os
import sys
import time

from tf_lstm_ops.bench.charts import plot
from tf_lstm_ops.bench.contenders import (
    CONTENDER_KEYS,
    DEFAULT_BASELINE,
    DTYPES,
    FAMILIES,
    CONFIG_BASELINE,
    CONFIG_CONTENDERS,
    LAYER_NORM_BASELINE,
    LAYER_NORM_CONTENDERS,
    HVP_CONTENDERS,
    INFERENCE_BASELINE,
    INFERENCE_CONTENDERS,
    STEP_PHASES,
    Case,
    contenders_for,
)
from tf_lstm_ops.bench.environment import (
    cpu_snapshot,
    import_torch,
    machine_info,
    other_cpu_use,
    setup_threads,
)
from tf_lstm_ops.bench.memory import measure_memory, memory_worker
from tf_lstm_ops.bench.table import format_table
from tf_lstm_ops.bench.timing import (
    Progress,
    add_speedups,
    measure_call_overhead,
    measure_fma_peak,
    measure_sgemm,
    plan,
    results_of,
    run_case,
)

DEFAULT_SHAPES = ((50, 32, 128, 256), (100, 64, 512, 512), (20, 1, 256, 256), (200, 16, 64, 128))
STREAMING_SHAPE = (1, 1, 256, 256)  # one step of one stream: what a served model runs per token
INFERENCE_SHAPES = DEFAULT_SHAPES + (STREAMING_SHAPE,)
QUICK_SHAPES = ((6, 3, 8, 8),)
DTYPE_ALIASES = {"float16": "half", "fp16": "half", "fp32": "float32", "bf16": "bfloat16",
                 "fp64": "float64", "double": "float64", "float": "float32"}
DEFAULT_REPEATS, DEFAULT_WARMUP = 10, 1
QUICK_REPEATS, QUICK_WARMUP = 3, 0
# Untimed pause before every timed call: torch's OpenMP threads keep spinning for milliseconds
# after a call (GOMP_SPINCOUNT), which would steal the CPUs from whichever contender runs next.
DEFAULT_COOLDOWN_MS, QUICK_COOLDOWN_MS = 20.0, 0.0
# Untimed calls of the same callable right before each timed one, after the cooldown.
DEFAULT_LEAD_IN, QUICK_LEAD_IN = 1, 0
SGEMM_N, QUICK_SGEMM_N = 2048, 256
FMA_SECONDS, QUICK_FMA_SECONDS = 0.3, 0.05  # per thread, all threads at once


def _shape(text):
    parts = text.replace("x", ",").split(",")
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        values = ()
    if len(values) != 4 or min(values) < 1:
        raise argparse.ArgumentTypeError(
            "expected T,B,I,H: four positive integers (time steps, batch, input size, cell "
            "size), e.g. 50,32,128,256; got %r" % text)
    return values


def _choices(valid, aliases=None):
    def parse(text):
        values = []
        for item in text.split(","):
            item = item.strip().lower()
            item = (aliases or {}).get(item, item)
            if item not in valid:
                raise argparse.ArgumentTypeError(
                    "%r is not one of %s" % (item, ", ".join(valid)))
            values.append(item)
        return values
    return parse


def _positive(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError("expected a positive integer, got %r" % text)
    return value


def _non_negative(text):
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError("expected a non-negative integer, got %r" % text)
    return value


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m tf_lstm_ops.bench",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Times forward, backward and forward+backward of the tf_lstm_ops kernels\n"
                    "against tf.raw_ops (BlockLSTMV2 + GradV2, LSTMBlockCell), keras.layers.LSTM/GRU\n"
                    "and torch.nn.LSTM/GRU (when torch is importable), interleaved in one run, and\n"
                    "prints median ms, GFLOP/s, % of the CPUs' measured FMA peak and speedups.\n"
                    "--inference times the inference forward instead (TFLite too), --hvp HVPs.",
        epilog="contender keys (for --contenders and --baseline):\n  %s\n\n"
               "Progress goes to stderr, the table to stdout (to stderr with --json -).\n\n"
               "examples:\n"
               "  python -m tf_lstm_ops.bench --shape 50,32,128,256 --dtype bfloat16 --family lstm\n"
               "  python -m tf_lstm_ops.bench --quick --json - --quiet\n"
               "  python -m tf_lstm_ops.bench --plot bench.png --json bench.json --memory\n"
               "  python -m tf_lstm_ops.bench --hvp --family lstm\n"
               "  python -m tf_lstm_ops.bench --inference --quick\n"
               "  python -m tf_lstm_ops.bench --torch-path /path/to/venv/lib/python3.X/site-packages"
               % ", ".join(CONTENDER_KEYS),
    )
    parser.add_argument("--shape", type=_shape, action="append", metavar="T,B,I,H",
                        help="a case shape: time steps, batch, input size, cell size (repeatable; "
                             "default: %s)" % " ".join(",".join(map(str, s))
                                                       for s in DEFAULT_SHAPES))
    parser.add_argument("--dtype", type=_choices(DTYPES, DTYPE_ALIASES), action="append",
                        metavar="|".join(DTYPES),
                        help="dtypes to run (repeatable or comma-separated; default float32)")
    parser.add_argument("--family", type=_choices(FAMILIES), action="append",
                        metavar="lstm|gru",
                        help="op families to run (repeatable or comma-separated; default both)")
    parser.add_argument("--contenders", type=_choices(CONTENDER_KEYS), metavar="KEY,...",
                        help="run only these contenders (keys below; default all but the *_hvp "
                             "and *_inf ones)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--hvp", action="store_true",
                      help="time one Hessian-vector product w.r.t. the weights (double "
                           "backprop) through CudnnRNNV3 and the Keras layers, ours and "
                           "Keras', beside one fwd+bwd step of ours (contenders %s unless "
                           "--contenders is given; baseline ours_cudnn_hvp)"
                           % ",".join(HVP_CONTENDERS))
    mode.add_argument("--inference", action="store_true",
                      help="time the inference forward (training=False) alone: BlockLSTMV2, "
                           "CudnnRNNV3(is_training=False), the Keras layers, ours and Keras', "
                           "in a model with the same weights, TFLite's interpreter on our "
                           "model's to_stock_keras export, torch under inference_mode "
                           "(contenders %s unless --contenders is given; baseline %s; the "
                           "default shapes and a streaming step %s)"
                           % (",".join(INFERENCE_CONTENDERS), INFERENCE_BASELINE,
                              ",".join(map(str, STREAMING_SHAPE))))
    mode.add_argument("--configs", action="store_true",
                      help="time fwd and fwd+bwd of Keras' configurations beyond the defaults "
                           "(a pre-padded mask, activation='relu', recurrent_dropout=0.2 while "
                           "training, GRU(reset_after=False): all on our fused op), ours and "
                           "keras.layers', beside our default layer (contenders %s unless "
                           "--contenders is given; baseline %s)"
                           % (",".join(CONFIG_CONTENDERS), CONFIG_BASELINE))
    mode.add_argument("--layernorm", action="store_true",
                      help="time fwd and fwd+bwd of the LayerNorm LSTM and GRU: our "
                           "LayerNormLSTM / LayerNormGRU layers and TF Addons' LSTM cell / "
                           "haste's GRU cell written with Keras ops in keras.layers.RNN, beside "
                           "our plain layer (contenders %s unless "
                           "--contenders is given; baseline %s)"
                           % (",".join(LAYER_NORM_CONTENDERS), LAYER_NORM_BASELINE))
    parser.add_argument("--baseline", metavar="KEY", choices=CONTENDER_KEYS,
                        help="contender the speedup column divides by (default ours_block for "
                             "lstm, ours_cudnn for gru, --hvp's and --inference's above; the "
                             "default where KEY has no result)")
    parser.add_argument("--repeats", type=_positive, metavar="N",
                        help="timed rounds per case (default %d; --quick %d)"
                             % (DEFAULT_REPEATS, QUICK_REPEATS))
    parser.add_argument("--warmup", type=_non_negative, metavar="N",
                        help="untimed calls per callable after its first (tracing) call "
                             "(default %d; --quick %d)" % (DEFAULT_WARMUP, QUICK_WARMUP))
    parser.add_argument("--cooldown", type=float, metavar="MS",
                        help="untimed pause before every timed call, so threads a previous "
                             "contender left spinning (torch's OpenMP) do not slow the next one "
                             "(default %g; --quick %g)" % (DEFAULT_COOLDOWN_MS, QUICK_COOLDOWN_MS))
    parser.add_argument("--lead-in", type=_non_negative, metavar="N",
                        help="untimed calls of the same callable right after the cooldown and "
                             "before each timed call, so the timed one runs warm, as the ops of "
                             "a training loop run back to back (its threads awake, its data in "
                             "cache); 0 times the first call after the pause, which pays "
                             "TensorFlow's thread wake-up, as the frames of a stream do (default "
                             "%d; --quick and --inference %d)" % (DEFAULT_LEAD_IN, QUICK_LEAD_IN))
    parser.add_argument("--quick", action="store_true",
                        help="a tiny fast run: shape %s unless --shape is given, fewer repeats, "
                             "a %dx%d sgemm, a %g s FMA peak"
                             % (",".join(map(str, QUICK_SHAPES[0])), QUICK_SGEMM_N,
                                QUICK_SGEMM_N, QUICK_FMA_SECONDS))
    parser.add_argument("--threads", type=_positive, metavar="N",
                        help="TF intra-op threads (and torch's, TFLite's, the FMA peak's); "
                             "default: TF's default, the number of usable CPUs")
    parser.add_argument("--json", metavar="FILE",
                        help="write all raw numbers as JSON to FILE ('-' for stdout)")
    parser.add_argument("--plot", metavar="FILE.png",
                        help="draw a grouped bar chart per case with matplotlib")
    parser.add_argument("--memory", action="store_true",
                        help="also measure the peak memory of a step: fwd+bwd, hvp or inf (one "
                             "subprocess per case and contender)")
    parser.add_argument("--no-torch", action="store_true", help="skip the torch contenders")
    parser.add_argument("--torch-path", metavar="DIR", action="append",
                        help="a site-packages directory to append to sys.path before importing "
                             "torch (repeatable)")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument("--memory-worker", help=argparse.SUPPRESS)
    return parser


def parse_args(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.memory_worker:
        return args
    args.shapes = args.shape or list(QUICK_SHAPES if args.quick else
                                     INFERENCE_SHAPES if args.inference else DEFAULT_SHAPES)
    args.dtypes = list(dict.fromkeys(d for ds in (args.dtype or [["float32"]]) for d in ds))
    args.families = list(dict.fromkeys(f for fs in (args.family or [list(FAMILIES)]) for f in fs))
    if args.repeats is None:
        args.repeats = QUICK_REPEATS if args.quick else DEFAULT_REPEATS
    if args.warmup is None:
        args.warmup = QUICK_WARMUP if args.quick else DEFAULT_WARMUP
    if args.cooldown is None:
        args.cooldown = QUICK_COOLDOWN_MS if args.quick else DEFAULT_COOLDOWN_MS
    if args.lead_in is None:  # (--inference: a stream's calls come after pauses)
        args.lead_in = QUICK_LEAD_IN if args.quick or args.inference else DEFAULT_LEAD_IN
    if args.cooldown < 0:
        parser.error("--cooldown: expected a non-negative number of milliseconds, got %g"
                     % args.cooldown)
    if args.hvp:
        if args.contenders is None:
            args.contenders = list(HVP_CONTENDERS)
        if args.baseline is None:
            args.baseline = "ours_cudnn_hvp"
    if args.inference:
        if args.contenders is None:
            args.contenders = list(INFERENCE_CONTENDERS)
        if args.baseline is None:
            args.baseline = INFERENCE_BASELINE
    if args.configs:
        if args.contenders is None:
            args.contenders = list(CONFIG_CONTENDERS)
        if args.baseline is None:
            args.baseline = CONFIG_BASELINE
    if args.layernorm:
        if args.contenders is None:
            args.contenders = list(LAYER_NORM_CONTENDERS)
        if args.baseline is None:
            args.baseline = LAYER_NORM_BASELINE
    if args.contenders is not None:
        args.contenders = list(dict.fromkeys(args.contenders))
        if not any(contenders_for(f, args.contenders) for f in args.families):
            parser.error("--contenders %s: none of them runs for --family %s"
                         % (",".join(args.contenders), ",".join(args.families)))
    if args.plot and not args.plot.lower().endswith(".png"):
        parser.error("--plot: expected a .png file name, got %r" % args.plot)
    return args


def run(args):
    started = time.perf_counter()
    notes = []
    torch, torch_note = import_torch(args.no_torch, args.torch_path)
    if torch_note and any(c.needs == "torch" for f in args.families
                          for c in contenders_for(f, args.contenders)):
        notes.append(torch_note)
    threads = setup_threads(args.threads, notes)
    import tensorflow as tf  # noqa: F401
    import tf_lstm_ops  # noqa: F401  (loads the op library, registers the gradients)

    if torch is not None:
        torch.set_num_threads(threads)
    machine = machine_info(threads, torch)
    cases, total = plan(args)
    progress = Progress(args.quiet, total)
    fma_peak = measure_fma_peak(threads, QUICK_FMA_SECONDS if args.quick else FMA_SECONDS,
                                progress, notes)
    sgemm = measure_sgemm(QUICK_SGEMM_N if args.quick else SGEMM_N, args.repeats, progress)
    machine["tf_function_call_ms"] = measure_call_overhead(args.repeats)
    results, skipped = [], []
    run_start = cpu_snapshot()
    others = {}
    for family, dtype, shape, contenders in cases:
        case = Case(family, dtype, shape, threads, torch)
        before = cpu_snapshot()
        cells = run_case(case, contenders, args, progress, skipped)
        others[case.label] = other_cpu_use(before, cpu_snapshot())
        results.extend(results_of(case, cells, fma_peak and fma_peak["gflops"], sgemm["gflops"]))
        notes.extend(n for n in case.notes if n not in notes)  # once, not once per shape
        del case, cells
        gc.collect()
    others_total = other_cpu_use(run_start, cpu_snapshot())
    pairs = add_speedups(results, args.baseline)
    memory = None
    if args.memory:
        memory = {}
        for family, dtype, shape, _ in cases:
            values, error = measure_memory(family, dtype, shape, args, progress)
            if error:
                notes.append("%s %s %s: %s" % (family, dtype, shape, error))
            memory["%s %s %s" % (family, dtype, ",".join(map(str, shape)))] = values
            for row in results:
                if ((row["family"], row["dtype"], tuple(row["shape"])) == (family, dtype, shape)
                        and row["phase"] in STEP_PHASES):
                    row["peak_mb"] = values.get(row["contender"])
        notes.append("peak MB: resident memory a fwd+bwd step (an HVP in hvp rows, an inference "
                     "forward in inf rows) adds over its inputs and weights (VmHWM - VmRSS in a "
                     "fresh process per case and contender, glibc returning >= 64 KiB blocks to "
                     "the OS)")
    progress.close()
    try:
        load_end = list(os.getloadavg())
    except OSError:
        load_end = None
    if others_total is not None and others_total > 10:
        notes.append("other processes used %.0f%% of the machine's CPU time while the contenders "
                     "ran (per case in the headers): timings are perturbed; compare ratios within "
                     "a case rather than absolute times" % others_total)
    return {
        "config": {"shapes": [list(s) for s in args.shapes], "dtypes": args.dtypes,
                   "families": args.families, "repeats": args.repeats, "warmup": args.warmup,
                   "quick": args.quick, "inference": args.inference,
                   "cooldown_ms": args.cooldown, "lead_in": args.lead_in,
                   "baseline": args.baseline or DEFAULT_BASELINE,
                   "contenders": args.contenders, "memory": args.memory},
        "machine": machine,
        "fma_peak": fma_peak,
        "sgemm": sgemm,
        "results": results,
        "speedups": pairs,
        "skipped": skipped,
        "memory": memory,
        "notes": notes,
        "load_average_end": load_end,
        "other_cpu_pct": {"total": others_total, "cases": others},
        "runtime_s": time.perf_counter() - started,
    }


def main(argv=None):
    args = parse_args(argv)
    if args.memory_worker:
        memory_worker(json.loads(args.memory_worker))
        return 0
    report = run(args)
    table = format_table(report)
    table_stream = sys.stderr if args.json == "-" else sys.stdout
    print(table, file=table_stream)
    if args.json:
        text = json.dumps(report, indent=1)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    if args.plot:
        try:
            plot(report, args.plot)
        except ImportError as error:
            print("--plot: matplotlib is not importable (%s); no plot written" % error,
                  file=sys.stderr)
            return 1
    return 0
