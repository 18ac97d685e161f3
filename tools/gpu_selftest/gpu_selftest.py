#!/usr/bin/env python3
"""One-command self-test of tf_lstm_ops' GPU engines, without TensorFlow or Bazel.

    python3 tools/gpu_selftest/gpu_selftest.py [options]     (from the repository root)
    python3 -m tools.gpu_selftest.gpu_selftest [options]

With --backend cuda (the default; needs nvcc, pybind11, NumPy and PyTorch with CUDA) it
  1. builds the self-test module (the *.cu.cc launchers of cc/gpu, cc/block_lstm, cc/cudnn_rnn,
     cc/layer_norm_lstm and cc/layer_norm_rnn + bindings, build.py) with nvcc for the GPU's
     compute capability (or --arch) and prints the device, driver/runtime, torch and cuDNN
     versions;
  2. makes sure cuBLAS loads: the engines dlopen libcublas at their first call, reusing one the
     process already loaded (RTLD_NOLOAD), so a torch matmul runs first; if torch's cuBLAS is not
     under a name the engines look for, TF_LSTM_OPS_CUBLAS is pointed at it (torch's
     nvidia/.../lib) before the first call, and a failed load is retried once in a fresh process
     with it; then module.initialize() (driver check, cuBLAS) must succeed;
  3. correctness, every dtype (half, bfloat16, float32, float64), torch tensors as buffers on one
     stream:
       - the LSTM block-op, CudnnRNN, LayerNorm LSTM and LayerNorm GRU / SimpleRNN engine
         suites (block_lstm_checks.py, cudnn_rnn_checks.py, layer_norm_lstm_checks.py,
         layer_norm_rnn_checks.py; CudnnRNN with Keras' operand masks, the GRU resetting before
         and zoneout too, the LayerNorm LSTM with both presets, the LayerNorm GRU and SimpleRNN
         with Keras' activations, each with its recurrent mask and zoneout) against the float64
         NumPy references (tools/references/block_lstm.py, cudnn_rnn.py, layer_norm_lstm.py,
         layer_norm_rnn.py);
       - repeat runs bitwise equal;
       - the CudnnRNN engine against torch.nn.LSTM (also proj_size), GRU and RNN (tanh, relu):
         1-2 layers, uni-/bidirectional, time-/batch-major, fixed and variable lengths
         (pack_padded_sequence, enforce_sorted=False): outputs, final states and the gradients
         of the input, the initial states and every weight; torch's weights converted to our
         cuDNN-canonical params (torch_checks.py); TF32 off; ours must be within
         max(floor, 4 x torch's own error) of torch's float64 result (1e-9 in float64);
       - the BlockLSTMV2 engine (IFCO, no peephole, forget_bias 0) against a single-layer
         torch.nn.LSTM;
  4. benchmark (--bench, on by default with cuda): forward and forward+backward of our CudnnRNNV3
     LSTM and GRU and our BlockLSTMV2 against torch.nn.LSTM / GRU (cuDNN), at (T, B, I, H) =
     (50,32,128,256) (100,64,512,512) (20,1,256,256) (200,16,64,128) (100,256,1024,1024), in fp32
     (TF32 off), tf32 (fp32 storage, TF32 on: TF_LSTM_OPS_ALLOW_TF32=1 for ours, read once per
     process, so every precision runs in its own subprocess), fp16 and bf16. CUDA events on one
     stream, warm-up, median of --repeat. Table: ms fwd, ms fwd+bwd, GFLOP/s of fwd+bwd (LSTM fwd
     = 8*B*H*(I+H)*T FLOP, GRU 6*..., backward = 2 x forward), torch/ours time ratios (> 1: ours
     is faster) and the largest relative difference of our output, dx and dparams from torch's.
     Ours fwd+bwd = engine forward (training, reserve space) + engine backward with given output
     gradients; torch's = forward + autograd of the same cotangents. CudnnRNN rows whose forward
     recurrence ran as the persistent kernel (batch <= 16) say so, with the per-step forward's
     time for comparison (TF_LSTM_OPS_RNN_PERSISTENT=0, the engine's test-only switch).

With --backend host it builds the module (for sm_80 unless --arch: the tests' build, reused) and
runs the four engine suites and the bitwise-repeat checks of 3 on the engines' host backend with
NumPy buffers: no GPU and no torch needed (--quick: a covering subset; this is what
tests/test_gpu_selftest_cli.py runs). --with-torch adds the torch comparisons on the CPU, with
torch CPU tensors as the buffers, to check the harness itself (and --bench --with-torch a tiny
CPU benchmark).

--quick also trims the torch comparisons; without it a few larger shapes are checked too.

A PASS/FAIL line per group and a summary line ("SUMMARY: PASS ..." / "SUMMARY: FAIL ...");
exit status 0 when everything passed, 1 otherwise. --json FILE writes the results.
"""

import argparse
import contextlib
import ctypes
import functools
import glob
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:  # run as a script: make the repo's tools.gpu_selftest importable
    sys.path.insert(0, ROOT)
from tools.gpu_selftest import build, block_lstm_checks, cudnn_rnn_checks  # noqa: E402
from tools.gpu_selftest import layer_norm_lstm_checks, layer_norm_rnn_checks  # noqa: E402
from tools.gpu_selftest import storage  # noqa: E402

R = cudnn_rnn_checks.R  # tools/references/cudnn_rnn.py

DTYPES = storage.DTYPES
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
# what the engines try, in order, before the loader's search path (cc/gpu/cublas_runtime.cc)
CUBLAS_NAMES = ("libcublas.so.12", "libcublas.so.13", "libcublas.so")
RETRY_ENV = "_TF_LSTM_OPS_SELFTEST_CUBLAS_RETRY"


# ------------------------------------------------------------------------------------------------
# command line
# ------------------------------------------------------------------------------------------------

def _sizes(text):
    sizes = []
    for part in text.replace(" ", "").split(";"):
        if part:
            vals = tuple(int(v) for v in part.split(","))
            if len(vals) != 4 or min(vals) < 1:
                raise argparse.ArgumentTypeError("sizes are T,B,I,H;T,B,I,H;... (positive)")
            sizes.append(vals)
    return sizes


def _list(choices):
    def parse(text):
        items = [t for t in text.replace(" ", "").split(",") if t]
        bad = [t for t in items if t not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError("choose from %s" % ", ".join(choices))
        return items
    return parse


def parse_args(argv):
    doc = __doc__.split("\n\n", 1)
    p = argparse.ArgumentParser(
        prog="gpu_selftest.py", description=doc[0],
        epilog=doc[1] if len(doc) > 1 else None,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=("cuda", "host"), default="cuda",
                   help="cuda: the GPU launchers on the GPU (default); host: the engines' "
                   "host backend on the CPU, NumPy buffers, no GPU or torch needed")
    p.add_argument("--quick", action="store_true",
                   help="a covering subset of the correctness cases (and no large shapes)")
    p.add_argument("--arch", help="compute capability to build for, e.g. 90 (default: the "
                   "GPU's, from torch.cuda.get_device_capability; host: 80, as the tests)")
    p.add_argument("--device", default="cuda", help="torch device of the GPU (default: cuda)")
    p.add_argument("--dtypes", type=_list(DTYPES), default=list(DTYPES),
                   help="storage types to check, comma-separated (default: all of %s)"
                   % ",".join(DTYPES))
    p.add_argument("--bench", dest="bench", action="store_true", default=None,
                   help="run the benchmark (default with --backend cuda)")
    p.add_argument("--no-bench", dest="bench", action="store_false",
                   help="skip the benchmark")
    p.add_argument("--bench-only", action="store_true", help="only the benchmark")
    p.add_argument("--precisions", type=_list(PRECISIONS), default=list(PRECISIONS),
                   help="benchmark precision modes (default: %s)" % ",".join(PRECISIONS))
    p.add_argument("--bench-sizes", type=_sizes, default=None, metavar="T,B,I,H;...",
                   help="benchmark sizes (default: the five above)")
    p.add_argument("--repeat", type=int, default=20, help="timed runs per measurement, median taken (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=3, help="untimed runs before timing (default: %(default)s)")
    p.add_argument("--with-torch", action="store_true",
                   help="--backend host: also compare with torch on the CPU (harness check)")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="nvcc commands, tracebacks and per-dtype details")
    # internal: one benchmark precision in a subprocess (TF_LSTM_OPS_ALLOW_TF32 is per process)
    p.add_argument("--bench-worker", choices=PRECISIONS, help=argparse.SUPPRESS)
    p.add_argument("--bench-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.bench is None:
        args.bench = args.backend == "cuda" or args.bench_only
    if args.bench_only:
        args.bench = True
    if args.bench and args.backend == "host" and not args.with_torch:
        p.error("the benchmark compares with torch: with --backend host add --with-torch")
    return args


def say(line=""):
    print(line, flush=True)


def indent(line):
    say("      " + line)


# ------------------------------------------------------------------------------------------------
# setup: torch, module, cuBLAS
# ------------------------------------------------------------------------------------------------

def _version(v):
    return "%d.%d" % (v // 1000, v % 1000 // 10) if v else "none"


def _cudnn_version(v):
    if not v:
        return "none"
    return ("%d.%d.%d" % (v // 10000, v // 100 % 100, v % 100) if v >= 90000
            else "%d.%d.%d" % (v // 1000, v // 100 % 10, v % 100))


class SetupError(Exception):
    """The self-test cannot start (no torch, no GPU, the module does not build or load)."""


def import_torch():
    try:
        import torch
    except ImportError as e:
        raise SetupError("PyTorch is needed for --backend cuda and --with-torch (%s); "
                         "--backend host runs without it" % e)
    return torch


def set_torch_tf32(torch, allow):
    """TF32 for torch's float32 matmuls and cuDNN (RNNs included)."""
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow


def load_module(arch, verbose):
    t0 = time.time()
    try:
        module = build.load(arch, verbose)  # builds if needed, then imports
        path = module.__file__
    except Exception as e:  # noqa: BLE001
        raise SetupError("building or loading the self-test module failed:\n%s" % e)
    say("module    %s (sm_%s, %.1f s)" % (os.path.relpath(path, ROOT), arch or "80_90",
                                          time.time() - t0))
    return module


def loaded_libraries(prefix):
    """Paths of the shared objects named prefix* mapped into this process."""
    paths = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and os.path.basename(parts[-1]).startswith(prefix):
                    paths.add(parts[-1])
    except OSError:
        pass
    return sorted(paths)


def cublas_loaded_name():
    """The first of CUBLAS_NAMES a dlopen(RTLD_NOLOAD) finds (what the engines will reuse)."""
    for name in CUBLAS_NAMES:
        try:
            ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
            return name
        except OSError:
            continue
    return None


def torch_cublas_files(torch):
    """libcublas files that come with torch: loaded ones, then nvidia/*/lib and torch/lib."""
    files = [p for p in loaded_libraries("libcublas.so")]
    bases = [os.path.dirname(os.path.dirname(torch.__file__))] + [p for p in sys.path if p]
    for base in bases:
        for pattern in (("nvidia", "cublas", "lib", "libcublas.so*"),
                        ("nvidia", "*", "lib", "libcublas.so*")):
            files += sorted(glob.glob(os.path.join(base, *pattern)))
    files += sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib",
                                           "libcublas.so*")))
    out = []
    for f in files:
        if os.path.isfile(f) and f not in out:
            out.append(f)
    return out


def prepare_cublas(torch, device, module, log=say):
    """Before the engines' first call: torch loads its cuBLAS (a matmul), and the engines are
    told where it is when they would not find it by name. Then module.initialize(); on a cuBLAS
    failure the whole command is retried once in a fresh process with TF_LSTM_OPS_CUBLAS set
    (the engines load cuBLAS once per process). Returns an error message or None."""
    a = torch.randn(64, 64, device=device)
    float((a @ a).sum())
    loaded = loaded_libraries("libcublas.so")
    user = os.environ.get("TF_LSTM_OPS_CUBLAS")
    name = cublas_loaded_name()
    if user:
        log("cuBLAS    TF_LSTM_OPS_CUBLAS=%s (from the environment): the engines load that file"
            % user)
    elif name:
        log("cuBLAS    %s (loaded by torch): the engines reuse it (dlopen %s, RTLD_NOLOAD)"
            % (", ".join(loaded) or name, name))
    else:
        files = torch_cublas_files(torch)
        if files:
            os.environ["TF_LSTM_OPS_CUBLAS"] = files[0]
            log("cuBLAS    torch's cuBLAS (%s) is not loaded under a name the engines look for "
                "(%s): TF_LSTM_OPS_CUBLAS=%s for this run" % (
                    ", ".join(loaded) or "none loaded", ", ".join(CUBLAS_NAMES), files[0]))
        else:
            log("cuBLAS    none loaded and none found with torch: the engines will try the "
                "loader's search path (%s)" % ", ".join(CUBLAS_NAMES))
    try:
        module.initialize()
    except RuntimeError as e:
        message = str(e)
        if ("cuBLAS" in message or "cublas" in message) and not os.environ.get(RETRY_ENV) \
                and not user:
            files = torch_cublas_files(torch)
            if files and files[0] != os.environ.get("TF_LSTM_OPS_CUBLAS"):
                log("cuBLAS    initialize() failed: %s" % message)
                log("cuBLAS    retrying in a fresh process with TF_LSTM_OPS_CUBLAS=%s" % files[0])
                env = dict(os.environ, TF_LSTM_OPS_CUBLAS=files[0], **{RETRY_ENV: "1"})
                sys.stdout.flush()
                os.execve(sys.executable, [sys.executable, os.path.abspath(__file__)]
                          + sys.argv[1:], env)
        hints = []
        if "driver" in message:
            hints.append("the module's CUDA runtime is newer than the driver: build with an "
                         "nvcc no newer than the driver's CUDA (NVCC=/path/to/nvcc or CUDA_HOME)")
        if "cuBLAS" in message or "cublas" in message:
            hints.append("point TF_LSTM_OPS_CUBLAS at a libcublas.so.12/13 (e.g. torch's "
                         "site-packages/nvidia/cublas/lib/libcublas.so.12) and rerun")
        return "module.initialize() failed: %s%s" % (
            message, "".join("\n      hint: " + h for h in hints))
    log("initialize() OK: driver check passed, cuBLAS loaded (%s)" % (
        ", ".join(loaded_libraries("libcublas.so")) or "?"))
    return None


def describe(torch, device, module, backend):
    info = dict(python=platform.python_version(), numpy=np.__version__,
                module_runtime=_version(module.runtime_version()),
                driver=_version(module.driver_version()),
                cuda_devices=module.cuda_device_count())
    if torch is not None:
        info.update(torch=torch.__version__, torch_cuda=torch.version.cuda)
        if backend == "cuda":
            dev = torch.device(device)
            prop = torch.cuda.get_device_properties(dev)
            info.update(device=prop.name, capability="%d.%d" % (prop.major, prop.minor),
                        sms=prop.multi_processor_count,
                        memory_gib=round(prop.total_memory / 2 ** 30, 1),
                        cudnn=_cudnn_version(torch.backends.cudnn.version()))
    if backend == "cuda":
        say("device    %s (compute capability %s, %d SMs, %.1f GiB)" % (
            info["device"], info["capability"], info["sms"], info["memory_gib"]))
    say("CUDA      driver supports %s; module built with runtime %s; %d device(s) visible" % (
        info["driver"], info["module_runtime"], info["cuda_devices"]))
    if torch is not None:
        say("torch     %s (CUDA %s, cuDNN %s); numpy %s; python %s" % (
            info["torch"], info["torch_cuda"], info.get("cudnn", "n/a"), info["numpy"],
            info["python"]))
    else:
        say("numpy     %s; python %s (torch not used)" % (info["numpy"], info["python"]))
    return info


# ------------------------------------------------------------------------------------------------
# correctness groups: fn(ctx) -> (ok, summary); details go to indent()
# ------------------------------------------------------------------------------------------------

class Ctx:
    pass


def _lengths_with_empty(T, B):
    """B lengths in [0, T] with 0 and T present."""
    return tuple([T, 0] + [(5 * k + 1) % (T + 1) for k in range(B - 2)])[:B]


LARGE_LSTM_CONFIGS = [
    block_lstm_checks.config(7, 67, 37, 130, 6, "ICFO", 1.0, 3.0, True),
    block_lstm_checks.config(9, 40, 64, 96, 9, "IFCO", 0.0, 0.0, False),
    block_lstm_checks.config(5, 300, 16, 33, 4, "IFCO", 0.0, 0.8, True),  # > 256 peephole chunks
]
LARGE_RNN_CASES = [
    cudnn_rnn_checks.Case("lstm", 2, 48, 20, "bidirectional", 24, time_major=False, time=9,
                          batch=37,
                    lengths=_lengths_with_empty(9, 37)),
    cudnn_rnn_checks.Case("gru", 2, 64, 33, "bidirectional", time=10, batch=40,
                    lengths=_lengths_with_empty(10, 40)),
    cudnn_rnn_checks.Case("rnn_relu", 2, 40, 40, "unidirectional", skip_input=True, time=8,
                          batch=30),
    cudnn_rnn_checks.Case("rnn_tanh", 3, 32, 17, "bidirectional", time_major=False, time=6,
                          batch=25,
                    dropout=0.5, seed=5, call=2),
    # operand masks (Keras' recurrent dropout): per step (batch > 16), and persistent
    cudnn_rnn_checks.Case("lstm", 1, 48, 20, time_major=False, time=9, batch=37,
                          lengths=_lengths_with_empty(9, 37), input_masks=True,
                          recurrent_masks=True),
    cudnn_rnn_checks.Case("gru", 1, 64, 33, time=10, batch=8, lengths=_lengths_with_empty(10, 8),
                          input_masks=True, recurrent_masks=True),
    # the GRU resetting before (Keras' reset_after=False): per step (batch > 16), and persistent
    # (two phases a step), with and without operand masks
    cudnn_rnn_checks.Case("gru", 2, 64, 33, "bidirectional", time=10, batch=40,
                          lengths=_lengths_with_empty(10, 40), reset_after=False),
    cudnn_rnn_checks.Case("gru", 2, 48, 20, "bidirectional", time_major=False, time=9, batch=8,
                          lengths=_lengths_with_empty(9, 8), activation="softsign",
                          reset_after=False),
    cudnn_rnn_checks.Case("gru", 1, 48, 20, time_major=False, time=9, batch=37,
                          lengths=_lengths_with_empty(9, 37), input_masks=True,
                          recurrent_masks=True, reset_after=False),
    cudnn_rnn_checks.Case("gru", 1, 64, 33, time=10, batch=8, lengths=_lengths_with_empty(10, 8),
                          input_masks=True, recurrent_masks=True, reset_after=False),
    # zoneout (docs/cudnn_rnn.md §4.9): per step (batch > 16), and persistent
    cudnn_rnn_checks.Case("lstm", 1, 48, 20, time=9, batch=37, lengths=_lengths_with_empty(9, 37),
                          recurrent_masks=True, zoneout_h=cudnn_rnn_checks.PER_ELEMENT,
                          zoneout_c=cudnn_rnn_checks.PER_ELEMENT),
    cudnn_rnn_checks.Case("lstm", 1, 64, 33, time_major=False, time=10, batch=8,
                          lengths=_lengths_with_empty(10, 8), zoneout_h=0.9, zoneout_c=0.75),
    cudnn_rnn_checks.Case("gru", 1, 48, 20, time_major=False, time=9, batch=37,
                          zoneout_h=cudnn_rnn_checks.PER_ELEMENT, reset_after=False),
    cudnn_rnn_checks.Case("gru", 1, 64, 33, time=10, batch=8, lengths=_lengths_with_empty(10, 8),
                          input_masks=True, zoneout_h=cudnn_rnn_checks.PER_ELEMENT),
    cudnn_rnn_checks.Case("rnn_tanh", 1, 40, 40, time=8, batch=30, zoneout_h=0.9),
]


def group_lstm_reference(ctx):
    configs = block_lstm_checks.seq_configs(1 if ctx.quick else None)
    if not ctx.quick:
        configs += [block_lstm_checks.config(6, 3, 4, 5, L, "IFCO", 0.0, 0.9,
                                             True) for L in range(7)]
        configs += LARGE_LSTM_CONFIGS
    failed = block_lstm_checks.run_all(ctx.module, ctx.alloc, ctx.dtypes, configs, log=indent)
    n = 5 * len(configs) * len(ctx.dtypes)
    return failed == 0, "%d checks (%d configs x %d dtypes x fwd/bwd/full bwd/cell bwd/bwd " \
        "grad), %d failed" % (n, len(configs), len(ctx.dtypes), failed)


def group_lstm_determinism(ctx):
    configs = [block_lstm_checks.config(5, 3, 4, 6, 4, "ICFO", 1.0, 0.6, True),
               block_lstm_checks.config(3, 20, 2, 3, 3, "IFCO", 0.0, 0.0, True)]
    if not ctx.quick:
        configs.append(block_lstm_checks.config(16, 64, 48, 96, 16, "IFCO", 0.0, 0.0, True))
    failed = n = 0
    for dtype in ctx.dtypes:
        for cfg in configs:
            _, problems = block_lstm_checks.check_deterministic(ctx.module, ctx.alloc, dtype, cfg)
            n += 1
            if problems:
                failed += 1
                indent("FAIL %s %s: %s" % (dtype, block_lstm_checks.config_id(cfg),
                                           "; ".join(problems)))
    return failed == 0, "%d forward + full backward + backward grad pairs, %d differ" % (
        n, failed)


def _rnn_try(what, fn, failures):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001  (a failed assertion or a module error: reported)
        failures.append("%s: %s: %s" % (what, type(e).__name__, str(e).splitlines()[0]
                                        if str(e) else ""))
        indent("FAIL " + failures[-1])
        return None


# The Keras layers' weight conversions (mode, bias rows, I, H): H = 256 makes an LSTM's Keras row
# 4 KiB.
KERAS_PARAMS_CASES = (("lstm", 1, 256, 256), ("gru", 2, 37, 33), ("rnn_tanh", 1, 0, 4))


def _run_checks(ctx, seed, checks, what):
    """Runs, for each dtype, the (name, check) pairs of checks(dtype, rng) (rng seeded from seed
    and the dtype) under _rnn_try; a check may return {name: relative error}, whose worst per
    dtype is reported with `what`. Returns the failures and the number of checks."""
    failures, n = [], 0
    for dtype in ctx.dtypes:
        worst = {}
        rng = np.random.default_rng(block_lstm_checks.seed_for(seed, dtype))
        for name, check in checks(dtype, rng):
            errors = _rnn_try("%s %s" % (dtype, name), check, failures)
            n += 1
            for k, v in (errors or {}).items():
                worst[k] = max(worst.get(k, 0.0), v)
        if worst:
            k = max(worst, key=worst.get)
            indent("%s: %s, worst error %.3g (%s)" % (dtype, what(dtype), worst[k], k))
    return failures, n


def _suite(ctx, checks, cases, header_cases, dtype, rng):
    """The (name, check) pairs of an engine suite (checks: a *_checks module): every case against
    the reference, the empty runs, the reserve-header mismatches."""
    on = (ctx.module, ctx.alloc)
    for case in cases:
        yield case.name, functools.partial(checks.check_case, *on, case, dtype, rng)
    for case in checks.empty_cases():
        yield case.name + " (empty)", functools.partial(checks.check_empty, *on, case, dtype, rng)
    for case in header_cases:
        yield (case.name + " (reserve header mismatch)",
               functools.partial(checks.check_header_mismatch, *on, case, dtype, rng))


def group_rnn_reference(ctx):
    C = cudnn_rnn_checks
    cases = C.engine_cases()
    if ctx.quick:
        cases = cases[::4]
    else:
        cases += LARGE_RNN_CASES
    header_cases = [C.Case(mode, 2, 4, 3, "bidirectional", 2 if mode == "lstm" else 0,
                           lengths=C.VARLEN, dropout=0.5 if mode == "gru" else 0.0)
                    for mode in (("lstm", "gru") if ctx.quick else R.MODES)]
    header_cases.append(C.Case("gru", 1, 4, 3, lengths=C.VARLEN, recurrent_masks=True,
                               reset_after=False))
    header_cases.append(C.Case("lstm", 1, 4, 3, lengths=C.VARLEN, zoneout_h=0.9,
                               zoneout_c=C.PER_ELEMENT))

    def checks(dtype, rng):
        yield from _suite(ctx, C, cases, header_cases, dtype, rng)
        for mode, bias_rows, I, H in KERAS_PARAMS_CASES:
            yield ("Keras weights %s I=%d H=%d, %d bias row(s)" % (mode, I, H, bias_rows),
                   functools.partial(C.check_keras_params, ctx.module, ctx.alloc, mode, I, H,
                                     bias_rows, dtype, rng))

    failures, n = _run_checks(ctx, "rnn", checks, lambda dtype: "%d cases" % len(cases))
    return not failures, "%d checks (%d cases + empty + header mismatch + Keras weights, x %d " \
        "dtypes), %d failed" % (n, len(cases), len(ctx.dtypes), len(failures))


LN = layer_norm_lstm_checks
# Larger LayerNorm LSTM runs: many rows per step, and rows of 4H = 2048 (a block of 256 threads,
# eight elements each, every group of sums full).
LARGE_LN_CASES = [
    LN.Case("addons", False, time=9, batch=37, input_size=20, num_units=48,
            lengths=_lengths_with_empty(9, 37), recurrent_mask=True, zoneout_h=LN.PER_ELEMENT,
            zoneout_c=LN.PER_ELEMENT),
    LN.Case("paper", True, time=10, batch=40, input_size=33, num_units=64,
            lengths=_lengths_with_empty(10, 40), zoneout_h=0.9),
    LN.Case("addons", True, time=6, batch=5, input_size=64, num_units=512,
            lengths=_lengths_with_empty(6, 5), recurrent_mask=True),
]


def group_ln_reference(ctx):
    cases = LN.engine_cases()
    if ctx.quick:
        cases = cases[::3]
    else:
        cases += LARGE_LN_CASES
    header_cases = [LN.Case("addons", lengths=LN.VARLEN, recurrent_mask=True,
                            zoneout_h=LN.PER_ELEMENT, zoneout_c=0.9),
                    LN.Case("paper", False, lengths=LN.VARLEN, zoneout_c=LN.PER_ELEMENT)]

    failures, n = _run_checks(
        ctx, "layer-norm", lambda dtype, rng: _suite(ctx, LN, cases, header_cases, dtype, rng),
        lambda dtype: "%d cases, tolerance %g" % (len(cases), LN.TOL[dtype]))
    return not failures, "%d checks (%d cases + empty + header mismatch, x %d dtypes), " \
        "%d failed" % (n, len(cases), len(ctx.dtypes), len(failures))


def _determinism_group(ctx, seed, checks_module, cases):
    failures, n = _run_checks(ctx, seed, lambda dtype, rng: (
        (case.name, functools.partial(checks_module.check_deterministic, ctx.module, ctx.alloc,
                                      case, dtype, rng)) for case in cases), None)
    return not failures, "%d forward (workspace included) + backward pairs, %d differ" % (
        n, len(failures))


def group_ln_determinism(ctx):
    cases = [LN.Case("addons", False, lengths=LN.VARLEN, recurrent_mask=True,
                     zoneout_h=LN.PER_ELEMENT, zoneout_c=0.9),
             LN.Case("paper", lengths=LN.VARLEN)]
    if not ctx.quick:
        cases += LARGE_LN_CASES[:1]
    return _determinism_group(ctx, "layer-norm-det", LN, cases)


LNR = layer_norm_rnn_checks
# Larger LayerNorm GRU / SimpleRNN runs: many rows per step, and the GRU's rows of 3H = 1536 (a
# block of 256 threads, six elements each, every group of sums full).
LARGE_LNR_CASES = [
    LNR.Case("gru", False, time=9, batch=37, input_size=20, num_units=48,
             lengths=_lengths_with_empty(9, 37), recurrent_mask=True, zoneout_h=LNR.PER_ELEMENT),
    LNR.Case("simple_rnn", True, time=10, batch=40, input_size=33, num_units=300,
             lengths=_lengths_with_empty(10, 40), zoneout_h=0.9, activation="elu"),
    LNR.Case("gru", True, time=6, batch=5, input_size=64, num_units=512,
             lengths=_lengths_with_empty(6, 5), recurrent_mask=True, activation="gelu",
             recurrent_activation="hard_sigmoid_keras2"),
]


def group_lnr_reference(ctx):
    cases = LNR.engine_cases()
    if ctx.quick:
        cases = cases[::3]
    else:
        cases += LARGE_LNR_CASES
    failures, n = _run_checks(
        ctx, "layer-norm-rnn",
        lambda dtype, rng: _suite(ctx, LNR, cases, LNR.header_cases(), dtype, rng),
        lambda dtype: "%d cases, tolerance %g" % (len(cases), LNR.TOL[dtype]))
    return not failures, "%d checks (%d cases + empty + header mismatch, x %d dtypes), " \
        "%d failed" % (n, len(cases), len(ctx.dtypes), len(failures))


def group_lnr_determinism(ctx):
    cases = LNR.header_cases() + ([] if ctx.quick else LARGE_LNR_CASES[:1])
    return _determinism_group(ctx, "layer-norm-rnn-det", LNR, cases)


def group_rnn_determinism(ctx):
    C = cudnn_rnn_checks
    cases = [C.Case("lstm", 2, 4, 3, "bidirectional", 2, time_major=False, lengths=C.VARLEN,
                    dropout=0.5, seed=11),
             C.Case("gru", 2, 5, 3, "bidirectional", lengths=C.VARLEN),
             C.Case("lstm", 1, 5, 3, time_major=False, lengths=C.VARLEN, input_masks=True,
                    recurrent_masks=True),
             C.Case("gru", 1, 5, 3, lengths=C.VARLEN, recurrent_masks=True, reset_after=False),
             C.Case("lstm", 1, 5, 3, time_major=False, lengths=C.VARLEN,
                    zoneout_h=C.PER_ELEMENT, zoneout_c=0.9)]
    if not ctx.quick:
        cases.append(C.Case("lstm", 2, 128, 64, "bidirectional", 32, time=16, batch=32,
                            lengths=_lengths_with_empty(16, 32), dropout=0.25, seed=3))
    return _determinism_group(ctx, "rnn-det", C, cases)


def _torch_group(ctx, items, check, label):
    """Runs check(item, dtype, rng) -> (errors {name: (ours, torch)}, problems) over items x
    dtypes; prints failures, notes and the worst errors per dtype."""
    failed = n = notes = 0
    for dtype in ctx.dtypes:
        worst = {}
        rng = np.random.default_rng(block_lstm_checks.seed_for("torch", label, dtype))
        for item in items:
            name = item.name if hasattr(item, "name") else "T%dB%dI%dH%d" % item
            n += 1
            try:
                errors, problems = check(item, dtype, rng)
            except Exception as e:  # noqa: BLE001
                failed += 1
                indent("FAIL %s %s: %s: %s" % (dtype, name, type(e).__name__, e))
                if ctx.verbose:
                    traceback.print_exc()
                continue
            hard = [p for p in problems if not p.startswith("note:")]
            notes += len(problems) - len(hard)
            if ctx.verbose:
                for p in problems:
                    if p.startswith("note:"):
                        indent("%s %s: %s" % (dtype, name, p))
            if hard:
                failed += 1
                indent("FAIL %s %s: %s" % (dtype, name, "; ".join(hard)))
            for k, (ours, theirs) in errors.items():
                if ours >= worst.get(k, (-1.0, None))[0]:
                    worst[k] = (ours, theirs)
        if worst:
            k, (ours, theirs) = max(worst.items(), key=lambda kv: kv[1][0])
            indent("%s: %d cases, worst error vs torch float64 %.3g (%s; torch %s itself: %s)" % (
                dtype, len(items), ours, k, dtype, "n/a" if theirs is None else "%.3g" % theirs))
    summary = "%d comparisons (%d cases x %d dtypes), %d failed" % (
        n, len(items), len(ctx.dtypes), failed)
    if notes:
        summary += ", %d notes (torch lacked a dtype; -v lists them)" % notes
    return failed == 0, summary


def group_torch_rnn(ctx):
    from tools.gpu_selftest import torch_checks as tc
    cases = tc.torch_cases(quick=ctx.quick, large=not ctx.quick and ctx.backend == "cuda")
    return _torch_group(ctx, cases, lambda case, dtype, rng: tc.check_rnn_vs_torch(
        ctx.module, ctx.alloc, ctx.torch, ctx.device, case, dtype, rng), "rnn")


def group_torch_block(ctx):
    from tools.gpu_selftest import torch_checks as tc
    shapes = list(tc.BLOCK_SHAPES)
    if not ctx.quick and ctx.backend == "cuda":
        shapes += list(tc.BLOCK_SHAPES_LARGE)
    if ctx.quick:
        shapes = shapes[:3]
    return _torch_group(ctx, shapes, lambda shape, dtype, rng: tc.check_block_lstm_vs_torch(
        ctx.module, ctx.alloc, ctx.torch, ctx.device, shape, dtype, rng), "block")


# ------------------------------------------------------------------------------------------------
# benchmark: one subprocess per precision mode
# ------------------------------------------------------------------------------------------------

def _sizes_text(sizes):
    return ";".join(",".join(str(v) for v in s) for s in sizes)


def group_bench(ctx):
    from tools.gpu_selftest import torch_checks as tc
    sizes = ctx.args.bench_sizes or list(
        tc.BENCH_SIZES if ctx.backend == "cuda" else tc.HOST_BENCH_SIZES)
    rows, failures = [], []
    if ctx.backend == "cuda":
        ctx.torch.cuda.synchronize()
        ctx.torch.cuda.empty_cache()  # the workers need the memory, not this process
    for precision in ctx.args.precisions:
        tf32 = tc.PRECISIONS[precision][1]
        env = dict(os.environ, TF_LSTM_OPS_ALLOW_TF32="1" if tf32 else "0")
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "bench.json")
            cmd = [sys.executable, os.path.abspath(__file__), "--bench-worker", precision,
                   "--bench-out", out, "--backend", ctx.backend, "--arch", ctx.arch,
                   "--device", ctx.args.device, "--bench-sizes", _sizes_text(sizes),
                   "--repeat", str(ctx.args.repeat), "--warmup", str(ctx.args.warmup)]
            if ctx.args.with_torch:
                cmd.append("--with-torch")
            indent("%s: subprocess with TF_LSTM_OPS_ALLOW_TF32=%s, torch TF32 %s" % (
                precision, env["TF_LSTM_OPS_ALLOW_TF32"], "on" if tf32 else "off"))
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, cwd=ROOT)
            for line in proc.stdout:
                indent("  " + line.rstrip())
            proc.wait()
            result = None
            if os.path.exists(out):
                with open(out) as f:
                    result = json.load(f)
            if proc.returncode != 0 or result is None:
                failures.append("%s: worker exit status %d" % (precision, proc.returncode))
            if result:
                rows += result["rows"]
                failures += ["%s: %s" % (precision, e) for e in result["errors"]]
    bad = [r for r in rows if not r["diff_ok"]]
    failures += ["%s %s T%dB%dI%dH%d: ours differs from torch by %.3g" % (
        r["precision"], r["engine"], r["T"], r["B"], r["I"], r["H"], r["max_rel_diff"])
        for r in bad]
    ctx.bench_rows = rows
    say("")
    say("      " + tc.BENCH_HEADER)
    for r in rows:
        indent(tc.format_bench_row(r))
    indent("ms: median of %d (after %d warm-up); GFLOP/s of fwd+bwd; x = torch time / our time "
           "(> 1: ours faster)" % (ctx.args.repeat, ctx.args.warmup))
    for f in failures:
        indent("FAIL " + f)
    return not failures, "%d rows (%d sizes x LSTM/GRU/BlockLSTM x %d precisions)%s" % (
        len(rows), len(sizes), len(ctx.args.precisions),
        "" if not failures else ", %d problems" % len(failures))


def bench_worker(args):
    """One precision mode (this process's TF_LSTM_OPS_ALLOW_TF32 is set by the parent)."""
    from tools.gpu_selftest import torch_checks as tc
    torch = import_torch()
    precision = args.bench_worker
    errors, rows = [], []
    cuda = args.backend == "cuda"
    device = args.device if cuda else "cpu"
    module = build.load(args.arch)
    stream = None
    if cuda:
        error = prepare_cublas(torch, device, module, log=lambda line: None)
        if error:
            errors.append(error)
        stream = torch.cuda.Stream(torch.device(device))
    set_torch_tf32(torch, tc.PRECISIONS[precision][1])
    say("ours: TF_LSTM_OPS_ALLOW_TF32=%s; torch: matmul.allow_tf32=%s cudnn.allow_tf32=%s" % (
        os.environ.get("TF_LSTM_OPS_ALLOW_TF32"), torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32))
    if not errors:
        alloc = storage.TorchAllocator(device, stream=stream, torch=torch)
        timer = tc.Timer(torch, stream)
        say(tc.BENCH_HEADER)
        ctx = torch.cuda.stream(stream) if cuda else contextlib.nullcontext()
        with ctx:
            for (T, B, I, H) in args.bench_sizes:
                for mode in ("lstm", "gru"):
                    try:
                        rows += tc.bench_size(torch, module, alloc, timer, device, precision,
                                              mode, T, B, I, H, args.warmup, args.repeat,
                                              log=say)
                    except Exception as e:  # noqa: BLE001
                        errors.append("%s T%dB%dI%dH%d: %s: %s" % (mode, T, B, I, H,
                                                                   type(e).__name__, e))
                        say("ERROR " + errors[-1])
                        if args.verbose:
                            traceback.print_exc(file=sys.stdout)
                    if cuda:
                        torch.cuda.synchronize()
                        torch.cuda.empty_cache()
    with open(args.bench_out, "w") as f:
        json.dump(dict(precision=precision, rows=rows, errors=errors), f)
    return 1 if errors else 0


# ------------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------------

def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.bench_worker:
        if not args.bench_sizes or not args.bench_out:
            raise SystemExit("--bench-worker needs --bench-sizes and --bench-out")
        return bench_worker(args)
    try:
        return run(args)
    except SetupError as e:
        say("FAIL  %s" % e)
        say("SUMMARY: FAIL (setup failed: see the line above)")
        return 1


def run(args):
    t_start = time.time()
    cuda = args.backend == "cuda"
    say("tf_lstm_ops GPU engine self-test: backend %s, %s%s" % (
        args.backend, "quick" if args.quick else "full",
        ", with torch on the CPU" if (args.with_torch and not cuda) else ""))
    if cuda and os.environ.get("TF_LSTM_OPS_ALLOW_TF32", "0") != "0":
        say("note      TF_LSTM_OPS_ALLOW_TF32=%s ignored for the correctness checks (fp32 is "
            "checked without TF32; the benchmark sets it per precision)"
            % os.environ["TF_LSTM_OPS_ALLOW_TF32"])
    os.environ["TF_LSTM_OPS_ALLOW_TF32"] = "0"  # read once, at the engines' first GEMM

    torch = import_torch() if (cuda or args.with_torch) else None
    if cuda and not torch.cuda.is_available():
        raise SetupError("torch sees no CUDA device (torch %s, built for CUDA %s); --backend "
                         "host runs without a GPU" % (torch.__version__, torch.version.cuda))
    if args.arch:
        arch = args.arch
    elif cuda:
        arch = "%d%d" % torch.cuda.get_device_capability(torch.device(args.device))
    else:
        arch = "80"  # the tests' build: shared, not rebuilt
    module = load_module(arch, args.verbose)
    info = describe(torch, args.device, module, args.backend)

    ctx = Ctx()
    ctx.args, ctx.module, ctx.torch, ctx.arch = args, module, torch, arch
    ctx.backend, ctx.quick, ctx.dtypes, ctx.verbose = args.backend, args.quick, args.dtypes, \
        args.verbose
    ctx.bench_rows = []
    stream = None
    if cuda:
        ctx.device = args.device
        error = prepare_cublas(torch, args.device, module)
        if error:
            raise SetupError(error)
        set_torch_tf32(torch, False)
        stream = torch.cuda.Stream(torch.device(args.device))
        ctx.alloc = storage.TorchAllocator(args.device, stream=stream, torch=torch)
        say("stream    one torch.cuda.Stream (0x%x) for the engines, the buffers and torch" %
            stream.cuda_stream)
    else:
        ctx.device = "cpu"
        ctx.alloc = (storage.TorchAllocator("cpu", torch=torch) if args.with_torch
                     else storage.NumpyAllocator())
    say("dtypes    %s" % ", ".join(args.dtypes))

    groups = []
    if not args.bench_only:
        groups += [("LSTM block-op engine vs float64 reference", group_lstm_reference),
                   ("LSTM block-op engine: repeat runs bitwise equal", group_lstm_determinism),
                   ("CudnnRNN engine vs float64 reference", group_rnn_reference),
                   ("CudnnRNN engine: repeat runs bitwise equal", group_rnn_determinism),
                   ("LayerNorm LSTM engine vs float64 reference", group_ln_reference),
                   ("LayerNorm LSTM engine: repeat runs bitwise equal", group_ln_determinism),
                   ("LayerNorm GRU/RNN engine vs float64 reference", group_lnr_reference),
                   ("LayerNorm GRU/RNN engine: repeat runs bitwise equal", group_lnr_determinism)]
        if torch is not None:
            where = "cuDNN" if cuda else "CPU"
            groups += [("CudnnRNN engine vs torch.nn LSTM/GRU/RNN (%s)" % where, group_torch_rnn),
                       ("BlockLSTMV2 engine vs torch.nn.LSTM (%s)" % where, group_torch_block)]
    if args.bench:
        groups.append(("benchmark vs torch.nn (%s)" % ("cuDNN" if cuda else "CPU"), group_bench))

    results = []
    for k, (title, fn) in enumerate(groups):
        say("")
        say("[%d/%d] %s" % (k + 1, len(groups), title))
        t0 = time.time()
        try:
            if stream is not None:
                with torch.cuda.stream(stream):
                    ok, summary = fn(ctx)
            else:
                ok, summary = fn(ctx)
        except Exception as e:  # noqa: BLE001  (a group that crashes fails; the rest still run)
            ok, summary = False, "%s: %s" % (type(e).__name__, e)
            if args.verbose:
                traceback.print_exc(file=sys.stdout)
        seconds = time.time() - t0
        say("%s  %s: %s (%.1f s)" % ("PASS" if ok else "FAIL", title, summary, seconds))
        results.append(dict(name=title, ok=bool(ok), summary=summary, seconds=round(seconds, 2)))

    failed = [r for r in results if not r["ok"]]
    say("")
    say("==== summary (%.0f s) ====" % (time.time() - t_start))
    for r in results:
        say("%s  %-52s %s" % ("PASS" if r["ok"] else "FAIL", r["name"], r["summary"]))
    if failed:
        line = "SUMMARY: FAIL (%d of %d groups failed: %s)" % (
            len(failed), len(results), "; ".join(r["name"] for r in failed))
    else:
        line = "SUMMARY: PASS (%d of %d groups passed, backend %s)" % (
            len(results), len(results), args.backend)
    say(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(backend=args.backend, quick=args.quick, arch=arch, info=info,
                           dtypes=args.dtypes, groups=results, bench=ctx.bench_rows,
                           ok=not failed, summary=line), f, indent=1)
        say("results written to %s" % args.json)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
