"""Benchmark of the tf_lstm_ops kernels against TensorFlow's, Keras' and PyTorch's recurrent layers.

    python -m tf_lstm_ops.bench                               # default shapes, float32, lstm + gru
    python -m tf_lstm_ops.bench --shape 50,32,128,256 --dtype bfloat16 --family lstm
    python -m tf_lstm_ops.bench --quick --json - --quiet      # a tiny run, JSON on stdout
    python -m tf_lstm_ops.bench --plot bench.png --memory     # bar chart; peak memory of fwd+bwd

For every case (family x dtype x shape (T, B, I, H)) each contender times up to three phases:

  fwd      the forward pass as a training step runs it (the ops keep what backward needs; torch
           records its autograd graph). keras layers: a plain layer call.
  bwd      the backward pass alone, given the saved forward results: the gradient op fed the
           forward op's outputs (BlockLSTMGradV2, CudnnRNNBackpropV3); torch: autograd.grad on a
           retained graph.
  fwd+bwd  forward and backward in one tf.function (or one torch step), as a training step uses
           them; the tape rows take tf.GradientTape's gradient w.r.t. the inputs and weights.

Every TensorFlow callable is a tf.function with pre-made inputs; one element of every result is
read back to the host (`.numpy()`), so each call has really finished. The first call of every
callable (tracing) and --warmup more are untimed. The timed calls go round-robin over all
contenders and phases of a case, --repeats rounds (the order rotates each round), each call after
an untimed --cooldown pause (torch's OpenMP threads spin for milliseconds after a call and would
otherwise slow whichever contender comes next), and the table reports medians. GFLOP/s count GEMM FLOP only (multiply-add = 2): LSTM forward 8*B*H*(I+H)*T,
GRU 6*B*H*(I+H)*T, backward twice the forward; "% peak" divides by the median GFLOP/s of a float32
tf.matmul measured at the start of the run (for every dtype). "speedup" is the row's median
divided by the baseline contender's median for the same phase (default: ours BlockLSTMV2 for
lstm, ours CudnnRNNV3 for gru): above 1 the baseline (ours) is faster.

--memory measures the peak resident memory a fwd+bwd step adds (VmHWM after the step minus VmRSS
before it, with the peak reset through /proc/self/clear_refs), in one fresh subprocess per case
and contender, in which glibc returns every allocation of 64 KiB or more to the OS on free, so
caches of earlier steps do not hide memory. It covers everything a step allocates (TF tensors, kernel scratch,
Eigen/oneDNN buffers, torch), unlike TF's allocator statistics.

torch contenders run when `import torch` works; --torch-path DIR appends a site-packages
directory (e.g. of another venv with the same Python) to sys.path first. torch runs with
torch.set_num_threads equal to TF's intra-op thread count.
"""

import argparse
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

DEFAULT_SHAPES = ((50, 32, 128, 256), (100, 64, 512, 512), (20, 1, 256, 256), (200, 16, 64, 128))
QUICK_SHAPES = ((6, 3, 8, 8),)
DTYPES = ("float32", "bfloat16", "half", "float64")
DTYPE_ALIASES = {"float16": "half", "fp16": "half", "fp32": "float32", "bf16": "bfloat16",
                 "fp64": "float64", "double": "float64", "float": "float32"}
FAMILIES = ("lstm", "gru")
PHASES = ("fwd", "bwd", "fwd+bwd")
GATES = {"lstm": 4, "gru": 3}
DEFAULT_REPEATS, DEFAULT_WARMUP = 10, 1
QUICK_REPEATS, QUICK_WARMUP = 3, 0
# Untimed pause before every timed call: torch's OpenMP threads keep spinning for milliseconds
# after a call (GOMP_SPINCOUNT), which would steal the CPUs from whichever contender runs next.
DEFAULT_COOLDOWN_MS, QUICK_COOLDOWN_MS = 20.0, 0.0
SGEMM_N, QUICK_SGEMM_N = 2048, 256
# The --memory subprocess: TF's oneDNN builds allocate through a caching BFC allocator by default,
# which would hide a step's memory after the first call; the system allocator with these glibc
# settings returns every block of 64 KiB or more to the OS on free.
MEMORY_ENV = {"TF_ONEDNN_USE_SYSTEM_ALLOCATOR": "true", "MALLOC_MMAP_THRESHOLD_": "65536",
              "MALLOC_TRIM_THRESHOLD_": "0"}


class Skip(Exception):
    """A contender that cannot run a case (unsupported dtype, missing package); the message is the
    note printed under the table."""


# ------------------------------------------------------------------------------------------------
# contenders
# ------------------------------------------------------------------------------------------------

class Contender:
    def __init__(self, key, family, name, phases, build, ours=False, dtypes=DTYPES, needs=None):
        self.key, self.family, self.name = key, family, name
        self.phases, self.build, self.ours = phases, build, ours
        self.dtypes, self.needs = dtypes, needs  # needs: "torch" or "ours_keras"


def _force(values):
    """A float32 scalar that depends on every tensor in values (one element of each): reading it
    back makes sure every producing op ran, without a reduction's cost."""
    import tensorflow as tf

    return tf.add_n([tf.cast(tf.reshape(v, [-1])[0], tf.float32) for v in values])


def _function(fn):
    """tf.function for the raw-op callables; they need no AutoGraph conversion (the loops are
    explicit tf.while_loops). Keras calls keep tf.function's defaults."""
    import tensorflow as tf

    return tf.function(fn, autograph=False)


class Case:
    """One (family, dtype, shape) with its pre-made inputs (built lazily, shared by contenders)."""

    def __init__(self, family, dtype, shape, threads, torch_module=None, seed=0):
        self.family, self.dtype, self.shape = family, dtype, tuple(shape)
        self.T, self.B, self.I, self.H = shape
        self.G = GATES[family]
        self.threads, self.torch = threads, torch_module
        self._seed, self._np, self._tf = seed, {}, {}

    @property
    def label(self):
        return "%s %s (%s)" % (self.family, self.dtype, ",".join(map(str, self.shape)))

    @property
    def fwd_flop(self):
        return 2 * self.G * self.B * self.H * (self.I + self.H) * self.T

    def flop(self, phase):
        return {"fwd": 1, "bwd": 2, "fwd+bwd": 3}[phase] * self.fwd_flop

    def array(self, name):
        """float32 NumPy inputs: x [T,B,I], dy [T,B,H], w [I+H, G*H], b [G*H], params (cuDNN)."""
        import numpy as np

        if name not in self._np:
            rng = np.random.default_rng(self._seed + sum(map(ord, name)))
            T, B, I, H, G = self.T, self.B, self.I, self.H, self.G
            scale = 1.0 / math.sqrt(H)
            shapes = {"x": (T, B, I), "dy": (T, B, H), "w": (I + H, G * H), "b": (G * H,),
                      "params": (G * H * (I + H) + 2 * G * H,)}
            if name in ("x", "dy"):
                value = rng.standard_normal(shapes[name])
            else:
                value = rng.uniform(-scale, scale, shapes[name])
            self._np[name] = value.astype(np.float32)
        return self._np[name]

    def tensor(self, name):
        """TF tensors in the case dtype: the arrays above, x_bm / dy_bm (batch-major), zeros_bh
        [B,H], zeros_h [H], zeros_1bh [1,B,H], the int64 T and int32 lengths [B]."""
        import tensorflow as tf

        if name not in self._tf:
            dtype = tf_dtype(self.dtype)
            if name == "zeros_bh":
                value = tf.zeros([self.B, self.H], dtype)
            elif name == "zeros_h":
                value = tf.zeros([self.H], dtype)
            elif name == "zeros_1bh":
                value = tf.zeros([1, self.B, self.H], dtype)
            elif name == "seq_len_max":
                value = tf.constant(self.T, tf.int64)
            elif name == "lengths":
                value = tf.fill([self.B], tf.constant(self.T, tf.int32))
            elif name.endswith("_bm"):
                value = tf.transpose(self.tensor(name[:-3]), [1, 0, 2])
            else:
                value = tf.cast(tf.constant(self.array(name)), dtype)
            self._tf[name] = value
        return self._tf[name]


def tf_dtype(name):
    import tensorflow as tf

    return {"float32": tf.float32, "bfloat16": tf.bfloat16, "half": tf.float16,
            "float64": tf.float64}[name]


def keras_dtype(name):
    return {"half": "float16"}.get(name, name)


def _block_lstm(raw, case):
    """BlockLSTMV2 + BlockLSTMGradV2 of `raw` (tf_lstm_ops.raw or tf.raw_ops)."""
    import tensorflow as tf

    t = case.tensor
    args = dict(seq_len_max=t("seq_len_max"), x=t("x"), cs_prev=t("zeros_bh"), h_prev=t("zeros_bh"),
                w=t("w"), wci=t("zeros_h"), wcf=t("zeros_h"), wco=t("zeros_h"), b=t("b"))
    dy = t("dy")
    fwd_op, grad_op = raw.BlockLSTMV2, raw.BlockLSTMGradV2

    def forward(a):
        return fwd_op(cell_clip=0.0, use_peephole=False, **a)

    def backward(a, out):
        acts = dict(zip(("i", "cs", "f", "o", "ci", "co", "h"), out))
        return grad_op(cs_grad=tf.zeros_like(dy), h_grad=dy, use_peephole=False, **a, **acts)

    fwd = _function(lambda a: _force([forward(a).h]))
    bwd = _function(lambda a, out: _force(backward(a, out)))
    both = _function(lambda a: _force(backward(a, forward(a))))
    saved = tuple(forward(args))  # the saved activations bwd starts from (eager, untimed)
    return {"fwd": lambda: fwd(args).numpy(),
            "bwd": lambda: bwd(args, saved).numpy(),
            "fwd+bwd": lambda: both(args).numpy()}


def build_ours_block(case):
    import tf_lstm_ops

    return _block_lstm(tf_lstm_ops.raw, case)


def build_tf_block(case):
    import tensorflow as tf

    return _block_lstm(tf.raw_ops, case)


def build_ours_tape(case):
    import tensorflow as tf
    import tf_lstm_ops

    t = case.tensor
    x, w, b, dy = t("x"), t("w"), t("b"), t("dy")
    rest = dict(seq_len_max=t("seq_len_max"), cs_prev=t("zeros_bh"), h_prev=t("zeros_bh"),
                wci=t("zeros_h"), wcf=t("zeros_h"), wco=t("zeros_h"))

    @_function
    def step(x, w, b):
        with tf.GradientTape() as tape:
            tape.watch([x, w, b])
            h = tf_lstm_ops.raw.BlockLSTMV2(x=x, w=w, b=b, cell_clip=0.0, use_peephole=False,
                                            **rest).h
            loss = tf.reduce_sum(h * dy)
        return _force(tape.gradient(loss, [x, w, b]))

    return {"fwd+bwd": lambda: step(x, w, b).numpy()}


def _cell_loop(cell_op, case):
    """An LSTMBlockCell op run over T in a tf.while_loop: the stacked h [T, B, H]."""
    import tensorflow as tf

    t = case.tensor
    zeros_h, T = t("zeros_h"), case.T

    def run(x, w, b, cs0, h0):
        def body(k, cs, h, hs):
            out = cell_op(x=x[k], cs_prev=cs, h_prev=h, w=w, wci=zeros_h, wcf=zeros_h, wco=zeros_h,
                          b=b, forget_bias=0.0, cell_clip=0.0, use_peephole=False)
            return k + 1, out.cs, out.h, hs.write(k, out.h)

        hs = tf.TensorArray(x.dtype, size=T)
        _, _, _, hs = tf.while_loop(lambda k, *_: k < T, body, (tf.constant(0), cs0, h0, hs))
        return hs.stack()

    return run


def _cell_loop_phases(cell_op, case, with_grad):
    import tensorflow as tf

    t = case.tensor
    run = _cell_loop(cell_op, case)
    args = (t("x"), t("w"), t("b"), t("zeros_bh"), t("zeros_bh"))
    dy = t("dy")
    fwd = _function(lambda *a: _force([run(*a)]))
    phases = {"fwd": lambda: fwd(*args).numpy()}
    if with_grad:
        @_function
        def both(x, w, b, cs0, h0):
            with tf.GradientTape() as tape:
                tape.watch([x, w, b])
                loss = tf.reduce_sum(run(x, w, b, cs0, h0) * dy)
            return _force(tape.gradient(loss, [x, w, b]))

        phases["fwd+bwd"] = lambda: both(*args).numpy()
    return phases


def build_ours_cell_loop(case):
    import tf_lstm_ops

    return _cell_loop_phases(tf_lstm_ops.raw.LSTMBlockCell, case, with_grad=True)


def build_tf_cell_loop(case):
    import tensorflow as tf

    return _cell_loop_phases(tf.raw_ops.LSTMBlockCell, case, with_grad=False)


def build_ours_cudnn(case):
    import tensorflow as tf
    import tf_lstm_ops

    t = case.tensor
    attrs = dict(rnn_mode=case.family, time_major=True)
    args = dict(input=t("x"), input_h=t("zeros_1bh"), input_c=t("zeros_1bh"), params=t("params"),
                sequence_lengths=t("lengths"))
    dy, zeros = t("dy"), t("zeros_1bh")
    fwd_op, bwd_op = tf_lstm_ops.raw.CudnnRNNV3, tf_lstm_ops.raw.CudnnRNNBackpropV3

    def forward(a):
        return fwd_op(is_training=True, **attrs, **a)

    def backward(a, out):
        output, output_h, output_c, reserve_space, host_reserved = out
        return bwd_op(output=output, output_h=output_h, output_c=output_c, output_backprop=dy,
                      output_h_backprop=zeros, output_c_backprop=zeros,
                      reserve_space=reserve_space, host_reserved=host_reserved, **attrs, **a)

    fwd = _function(lambda a: _force([forward(a).output]))
    bwd = _function(lambda a, out: _force(backward(a, out)))
    both = _function(lambda a: _force(backward(a, forward(a))))
    saved = tuple(forward(args))
    return {"fwd": lambda: fwd(args).numpy(),
            "bwd": lambda: bwd(args, saved).numpy(),
            "fwd+bwd": lambda: both(args).numpy()}


def _keras_phases(layer_cls, case, **kwargs):
    import tensorflow as tf

    # glorot_uniform: the default orthogonal initializer needs a QR, which has no bfloat16 kernel
    layer = layer_cls(case.H, return_sequences=True, dtype=keras_dtype(case.dtype),
                      recurrent_initializer="glorot_uniform", **kwargs)
    layer.build((case.B, case.T, case.I))
    x, dy = case.tensor("x_bm"), case.tensor("dy_bm")
    fwd = tf.function(lambda x: _force([layer(x)]))

    @tf.function
    def both(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(layer(x, training=True) * dy)
        return _force(tape.gradient(loss, [x] + list(layer.trainable_variables)))

    return {"fwd": lambda: fwd(x).numpy(), "fwd+bwd": lambda: both(x).numpy()}


def build_keras(case):
    import keras

    if case.family == "lstm":
        return _keras_phases(keras.layers.LSTM, case)
    return _keras_phases(keras.layers.GRU, case, reset_after=True)


def build_ours_keras(case):
    try:
        import tf_lstm_ops.keras as tlk
    except Exception as error:  # the module is optional for the benchmark
        raise Skip("tf_lstm_ops.keras not importable (%s: %s)"
                   % (type(error).__name__, _first_line(error)))
    if case.family == "lstm":
        return _keras_phases(tlk.LSTM, case)
    return _keras_phases(tlk.GRU, case, reset_after=True)


def build_torch(case):
    torch = case.torch
    if torch is None:
        raise Skip("torch not importable")
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "half": torch.float16,
             "float64": torch.float64}[case.dtype]
    torch.set_num_threads(case.threads)
    torch.manual_seed(0)
    cls = torch.nn.LSTM if case.family == "lstm" else torch.nn.GRU
    module = cls(case.I, case.H).to(dtype)  # time-major, like ours
    params = list(module.parameters())
    x = torch.from_numpy(case.array("x")).to(dtype).requires_grad_(True)
    dy = torch.from_numpy(case.array("dy")).to(dtype)
    inputs = [x] + params

    def force(tensors):
        return float(sum(v.reshape(-1)[0].float() for v in tensors))

    def fwd():
        return force([module(x)[0]])

    def both():
        y = module(x)[0]
        return force(torch.autograd.grad(y, inputs, dy))

    saved = module(x)[0]

    def bwd():
        return force(torch.autograd.grad(saved, inputs, dy, retain_graph=True))

    return {"fwd": fwd, "bwd": bwd, "fwd+bwd": both}


HALF_FLOAT = ("half", "float32")
CONTENDERS = (
    Contender("ours_block", "lstm", "ours BlockLSTMV2", PHASES, build_ours_block, ours=True),
    Contender("ours_tape", "lstm", "ours BlockLSTMV2 (tape)", ("fwd+bwd",), build_ours_tape,
              ours=True),
    Contender("ours_cudnn", "lstm", "ours CudnnRNNV3", PHASES, build_ours_cudnn, ours=True),
    Contender("ours_cell_loop", "lstm", "ours LSTMBlockCell loop", ("fwd", "fwd+bwd"),
              build_ours_cell_loop, ours=True),
    Contender("ours_keras", "lstm", "ours keras.LSTM", ("fwd", "fwd+bwd"), build_ours_keras,
              ours=True, needs="ours_keras"),
    Contender("tf_block", "lstm", "tf.raw_ops BlockLSTMV2", PHASES, build_tf_block,
              dtypes=HALF_FLOAT),
    Contender("tf_cell_loop", "lstm", "tf.raw_ops LSTMBlockCell loop", ("fwd",),
              build_tf_cell_loop, dtypes=HALF_FLOAT),
    Contender("keras", "lstm", "keras.layers.LSTM", ("fwd", "fwd+bwd"), build_keras),
    Contender("torch", "lstm", "torch.nn.LSTM", PHASES, build_torch, needs="torch"),
    Contender("ours_cudnn", "gru", "ours CudnnRNNV3 gru", PHASES, build_ours_cudnn, ours=True),
    Contender("ours_keras", "gru", "ours keras.GRU", ("fwd", "fwd+bwd"), build_ours_keras,
              ours=True, needs="ours_keras"),
    Contender("keras", "gru", "keras.layers.GRU", ("fwd", "fwd+bwd"), build_keras),
    Contender("torch", "gru", "torch.nn.GRU", PHASES, build_torch, needs="torch"),
)
DEFAULT_BASELINE = {"lstm": "ours_block", "gru": "ours_cudnn"}
CONTENDER_KEYS = tuple(dict.fromkeys(c.key for c in CONTENDERS))
UNSUPPORTED_NOTES = {"tf_block": "TF registers BlockLSTMV2/GradV2 CPU kernels for half and float32"
                                 " only",
                     "tf_cell_loop": "TF registers LSTMBlockCell CPU kernels for half and float32"
                                     " only"}


def contenders_for(family, keys):
    return [c for c in CONTENDERS if c.family == family and (keys is None or c.key in keys)]


# ------------------------------------------------------------------------------------------------
# arguments
# ------------------------------------------------------------------------------------------------

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
                    "prints median ms, GFLOP/s, % of a measured sgemm peak and speedups.",
        epilog="contender keys (for --contenders and --baseline):\n  %s\n\n"
               "Progress goes to stderr, the table to stdout (to stderr with --json -).\n\n"
               "examples:\n"
               "  python -m tf_lstm_ops.bench --shape 50,32,128,256 --dtype bfloat16 --family lstm\n"
               "  python -m tf_lstm_ops.bench --quick --json - --quiet\n"
               "  python -m tf_lstm_ops.bench --plot bench.png --json bench.json --memory\n"
               "  python -m tf_lstm_ops.bench --torch-path /tmp/benchvenv/lib/python3.11/site-packages"
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
                        help="run only these contenders (keys below; default all)")
    parser.add_argument("--baseline", metavar="KEY", choices=CONTENDER_KEYS,
                        help="contender the speedup column divides by (default ours_block for "
                             "lstm, ours_cudnn for gru; the default where KEY has no result)")
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
    parser.add_argument("--quick", action="store_true",
                        help="a tiny fast run: shape %s unless --shape is given, fewer repeats, "
                             "a %dx%d sgemm" % (",".join(map(str, QUICK_SHAPES[0])),
                                                QUICK_SGEMM_N, QUICK_SGEMM_N))
    parser.add_argument("--threads", type=_positive, metavar="N",
                        help="TF intra-op threads (and torch threads); default: TF's default, the "
                             "number of usable CPUs")
    parser.add_argument("--json", metavar="FILE",
                        help="write all raw numbers as JSON to FILE ('-' for stdout)")
    parser.add_argument("--plot", metavar="FILE.png",
                        help="draw a grouped bar chart per case with matplotlib")
    parser.add_argument("--memory", action="store_true",
                        help="also measure the peak memory of fwd+bwd (one subprocess per case)")
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
    args.shapes = args.shape or list(QUICK_SHAPES if args.quick else DEFAULT_SHAPES)
    args.dtypes = list(dict.fromkeys(d for ds in (args.dtype or [["float32"]]) for d in ds))
    args.families = list(dict.fromkeys(f for fs in (args.family or [list(FAMILIES)]) for f in fs))
    if args.repeats is None:
        args.repeats = QUICK_REPEATS if args.quick else DEFAULT_REPEATS
    if args.warmup is None:
        args.warmup = QUICK_WARMUP if args.quick else DEFAULT_WARMUP
    if args.cooldown is None:
        args.cooldown = QUICK_COOLDOWN_MS if args.quick else DEFAULT_COOLDOWN_MS
    if args.cooldown < 0:
        parser.error("--cooldown: expected a non-negative number of milliseconds, got %g"
                     % args.cooldown)
    if args.contenders is not None:
        args.contenders = list(dict.fromkeys(args.contenders))
        if not any(contenders_for(f, args.contenders) for f in args.families):
            parser.error("--contenders %s: none of them runs for --family %s"
                         % (",".join(args.contenders), ",".join(args.families)))
    if args.plot and not args.plot.lower().endswith(".png"):
        parser.error("--plot: expected a .png file name, got %r" % args.plot)
    return args


# ------------------------------------------------------------------------------------------------
# environment
# ------------------------------------------------------------------------------------------------

def _first_line(error):
    text = str(error).strip().splitlines()
    return text[0][:200] if text else type(error).__name__


def usable_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def cpu_snapshot():
    """(wall s, busy CPU s of the whole machine, steal s, CPU s of this process and its children)
    from /proc/stat; None where that is unreadable."""
    try:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:9]]
        tick = float(os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError):
        return None
    user, nice, system, _, _, irq, softirq, steal = values + [0] * (8 - len(values))
    own = os.times()
    return (time.monotonic(), (user + nice + system + irq + softirq) / tick, steal / tick,
            own.user + own.system + own.children_user + own.children_system)


def other_cpu_use(before, after):
    """Percent of the machine's CPU time that other processes (and the hypervisor, as steal)
    used between two snapshots: the noise indicator printed with each case."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    capacity = (after[0] - before[0]) * (os.cpu_count() or 1)
    others = (after[1] - before[1]) - (after[3] - before[3]) + (after[2] - before[2])
    return max(0.0, min(100.0, 100.0 * others / capacity))


def import_torch(disabled, paths):
    """(torch module or None, note)."""
    if disabled:
        return None, "torch contenders disabled (--no-torch)"
    for path in paths or ():
        if path not in sys.path:
            sys.path.append(path)
    try:
        import torch
    except Exception as error:  # ImportError, or a broken install
        return None, "torch not importable (%s: %s): torch contenders skipped" % (
            type(error).__name__, _first_line(error))
    return torch, None


def setup_threads(threads, notes):
    """Applies --threads to TF; returns the intra-op thread count TF uses."""
    import tensorflow as tf

    if threads:
        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
        except RuntimeError as error:  # the TF context already exists (an in-process caller)
            notes.append("--threads %d not applied to TF: %s" % (threads, _first_line(error)))
    return tf.config.threading.get_intra_op_parallelism_threads() or usable_cpus()


def machine_info(intra_threads, torch):
    import tensorflow as tf
    import keras

    from tf_lstm_ops._loader import cpu_isa

    try:
        load = os.getloadavg()
    except OSError:
        load = None
    cpu_model = None
    try:
        with open("/proc/cpuinfo") as f:
            cpu_model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")),
                             None)
    except OSError:
        pass
    return {
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable_cpus(),
        "cpu_model": cpu_model,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "tf_version": tf.__version__,
        "keras_version": keras.__version__,
        "torch_version": getattr(torch, "__version__", None),
        "cpu_kernels_isa": cpu_isa(),
        "tf_intra_op_threads": intra_threads,
        "tf_inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "load_average_start": list(load) if load else None,
    }


# ------------------------------------------------------------------------------------------------
# timing
# ------------------------------------------------------------------------------------------------

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
                start = time.perf_counter()
                cell.fn()
                cell.samples.append((time.perf_counter() - start) * 1e3)
    finally:
        if gc_was_enabled:
            gc.enable()
    return cells


def results_of(case, cells, sgemm_gflops):
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
            "pct_peak": 100.0 * gflops / sgemm_gflops,
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


# ------------------------------------------------------------------------------------------------
# memory (--memory): one fresh subprocess per case and contender
# ------------------------------------------------------------------------------------------------

def _proc_status_mb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    raise OSError("no %s in /proc/self/status" % field)


def memory_worker(spec):
    """Runs in the subprocess: prints {contender key: peak MB or "error: ..."} as JSON."""
    torch, _ = import_torch(spec["no_torch"], spec["torch_path"])
    threads = setup_threads(spec["threads"], [])
    import tf_lstm_ops  # noqa: F401  (loads the ops)

    case = Case(spec["family"], spec["dtype"], spec["shape"], threads, torch)
    out = {}
    for contender in contenders_for(spec["family"], spec["contenders"]):
        if not _measures_memory(contender, spec["dtype"]):
            continue
        try:
            fn = contender.build(case)["fwd+bwd"]
            for _ in range(2):
                fn()
            growth = []
            for _ in range(2):
                gc.collect()
                base = _proc_status_mb("VmRSS")
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")  # resets VmHWM to the current RSS
                fn()
                growth.append(_proc_status_mb("VmHWM") - base)
            out[contender.key] = max(growth)
            del fn
        except Exception as error:
            out[contender.key] = "error: %s: %s" % (type(error).__name__, _first_line(error))
        gc.collect()
    print("MEMORY-RESULT " + json.dumps(out))


def _measures_memory(contender, dtype):
    return "fwd+bwd" in contender.phases and dtype in contender.dtypes


def measure_memory(family, dtype, shape, args, progress):
    """{contender key: peak MB or "error: ..."}, each contender in its own fresh subprocess: in a
    shared one, what earlier contenders left resident (freed heap, TF's and torch's caches) would
    serve the later ones' allocations and hide their memory."""
    env = dict(os.environ, **MEMORY_ENV)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    progress.say("%s %s (%s): peak memory of fwd+bwd (a subprocess per contender) ..."
                 % (family, dtype, ",".join(map(str, shape))))
    results, errors = {}, []
    for contender in contenders_for(family, args.contenders):
        if not _measures_memory(contender, dtype) or (contender.needs == "torch"
                                                       and args.no_torch):
            continue
        spec = {"family": family, "dtype": dtype, "shape": list(shape), "threads": args.threads,
                "contenders": [contender.key], "no_torch": args.no_torch,
                "torch_path": args.torch_path}
        proc = subprocess.run([sys.executable, "-m", "tf_lstm_ops.bench", "--memory-worker",
                               json.dumps(spec)], env=env, capture_output=True, text=True)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("MEMORY-RESULT ")]
        if lines:
            results.update(json.loads(lines[-1][len("MEMORY-RESULT "):]))
        else:
            errors.append("memory subprocess for %s failed (exit %d): %s" % (
                contender.key, proc.returncode,
                (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]))
    return results, "; ".join(errors) or None


# ------------------------------------------------------------------------------------------------
# output
# ------------------------------------------------------------------------------------------------

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
    lines.append("sgemm peak: tf.matmul %dx%d float32 %.1f GFLOP/s (median of %d%s); %d repeats, "
                 "%d warm-up; load average %s -> %s"
                 % (sg["n"], sg["n"], sg["gflops"], len(sg["samples_ms"]),
                    "" if sg.get("other_cpu_pct") is None
                    else ", others used %.0f%% of the CPUs" % sg["other_cpu_pct"],
                    report["config"]["repeats"], report["config"]["warmup"],
                    _load(m["load_average_start"]), _load(report.get("load_average_end"))))
    lines.append("tf.function call + read-back overhead: %.3f ms per sample (in every TF row)"
                 % m.get("tf_function_call_ms", float("nan")))
    lines.append("speedup = row median / baseline median, same phase (>1: the baseline, ours, is "
                 "faster); GFLOP/s: GEMM FLOP only, bwd = 2x fwd")
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
                _gflops(r["gflops"]), _pct(r["pct_peak"]) + "%",
                _fmt(r["speedup"], ".2f") + ("x" if r["speedup"] is not None else ""))
            if memory is not None:
                peak = r.get("peak_mb") if r["phase"] == "fwd+bwd" else None
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
    return "-" if value is None else format(value, ".1f" if value >= 1 else ".2f")


def _gflops(value):
    return "-" if value is None else format(value, ".1f" if value >= 10 else ".3g")


def _load(load):
    return "-" if not load else "%.2f" % load[0]


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
    colors = {"fwd": "#4c72b0", "bwd": "#dd8452", "fwd+bwd": "#55a868"}
    width = 0.27
    for ax, (family, dtype, shape) in zip(axes.flat, cases):
        rows = [r for r in results
                if (r["family"], r["dtype"], tuple(r["shape"])) == (family, dtype, shape)]
        names = list(dict.fromkeys(r["name"] for r in rows))
        for k, phase in enumerate(PHASES):
            for j, name in enumerate(names):
                row = next((r for r in rows if r["name"] == name and r["phase"] == phase), None)
                if row is None:
                    continue
                x = j + (k - 1) * width
                ax.bar(x, row["median_ms"], width, color=colors[phase],
                       hatch="//" if row["ours"] else None, edgecolor="white")
                if phase == "fwd+bwd" and row["speedup"] is not None:
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
        present = [p for p in PHASES if any(r["phase"] == p for r in rows)]
        ax.legend([Patch(color=colors[p]) for p in present], present, fontsize=7)
        ax.grid(axis="y", alpha=0.3, which="both")
    for ax in list(axes.flat)[len(cases):]:
        ax.axis("off")
    fig.suptitle("tf_lstm_ops bench (hatched: ours; labels: fwd+bwd ms / baseline ms)",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------------

def run(args):
    started = time.perf_counter()
    notes = []
    torch, torch_note = import_torch(args.no_torch, args.torch_path)
    if torch_note and (args.contenders is None or "torch" in args.contenders):
        notes.append(torch_note)
    threads = setup_threads(args.threads, notes)
    import tensorflow as tf  # noqa: F401
    import tf_lstm_ops  # noqa: F401  (loads the op library, registers the gradients)

    if torch is not None:
        torch.set_num_threads(threads)
    machine = machine_info(threads, torch)
    cases, total = plan(args)
    progress = Progress(args.quiet, total)
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
        results.extend(results_of(case, cells, sgemm["gflops"]))
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
                        and row["phase"] == "fwd+bwd"):
                    row["peak_mb"] = values.get(row["contender"])
        notes.append("peak MB: resident memory a fwd+bwd step adds over its inputs and weights "
                     "(VmHWM - VmRSS in a fresh process per case and contender, glibc returning "
                     ">= 64 KiB blocks to the OS)")
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
                   "quick": args.quick, "cooldown_ms": args.cooldown,
                   "baseline": args.baseline or DEFAULT_BASELINE,
                   "contenders": args.contenders, "memory": args.memory},
        "machine": machine,
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


if __name__ == "__main__":
    sys.exit(main())
