"""Benchmark of the tf_lstm_ops kernels against TensorFlow's, Keras' and PyTorch's recurrent layers.

    python -m tf_lstm_ops.bench                               # default shapes, float32, lstm + gru
    python -m tf_lstm_ops.bench --shape 50,32,128,256 --dtype bfloat16 --family lstm
    python -m tf_lstm_ops.bench --quick --json - --quiet      # a tiny run, JSON on stdout
    python -m tf_lstm_ops.bench --plot bench.png --memory     # bar chart; peak memory of fwd+bwd
    python -m tf_lstm_ops.bench --hvp --memory                # Hessian-vector products
    python -m tf_lstm_ops.bench --inference                   # inference forward, TFLite too

For every case (family x dtype x shape (T, B, I, H)) each contender times some of these phases:

  fwd      the forward pass as a training step runs it (the ops keep what backward needs; torch
           records its autograd graph). keras layers: a plain layer call.
  bwd      the backward pass alone, given the saved forward results: the gradient op fed the
           forward op's outputs (BlockLSTMGradV2, CudnnRNNBackpropV3); torch: autograd.grad on a
           retained graph.
  fwd+bwd  forward and backward in one tf.function (or one torch step), as a training step uses
           them; the tape rows take tf.GradientTape's gradient w.r.t. the inputs and weights,
           with the same dy as the output's cotangent (output_gradients; torch: autograd.grad's
           grad_outputs), so no row times a loss's element-wise ops.
  hvp      (--hvp, or the *_hvp contenders by name) one Hessian-vector product w.r.t. the weights,
           d/dw <d loss/dw, v>, by double backpropagation in one tf.function: BlockLSTMV2 (LSTM),
           CudnnRNNV3 and the Keras layers, ours and Keras'. Counted as two fwd+bwd steps in
           GFLOP/s.
  inf      (--inference, or the *_inf contenders by name) the forward of inference
           (training=False) alone: BlockLSTMV2 (LSTM), CudnnRNNV3(is_training=False) in a
           tf.function and called eagerly (no tf.function: the op runs on the calling thread,
           without TF's executor and its thread pools, as a streaming loop may call it), our Keras
           layer and Keras' in a model with the same weights (model(x, training=False) in a
           tf.function), TFLite's interpreter on our model exported with to_stock_keras and
           converted for the fixed [B, T, I] (set_tensor + invoke + get_tensor; float32 only; an
           LSTM goes through a tf_keras twin, the one TFLite fuses into its
           UNIDIRECTIONAL_SEQUENCE_LSTM, and a note says what the converted model runs), torch
           under inference_mode. Default shapes: the usual four and a streaming step
           (1, 1, 256, 256); baseline: our Keras layer.

Every TensorFlow callable is a tf.function with pre-made inputs, called as a training or serving
step is: the input sequence x is its one argument, the weights, initial states and dy are captured
(a dict of nine tensors as arguments would add ~0.1 ms of Python per call, more than an op's
fixed cost, which torch's rows do not pay); one element of every result is read back to the host
(`.numpy()`), so each call has really finished. The first call of every callable (tracing) and
--warmup more are untimed. The timed calls go round-robin over all
contenders and phases of a case, --repeats rounds (the order rotates each round), each call after
an untimed --cooldown pause (torch's OpenMP threads spin for milliseconds after a call and would
otherwise slow whichever contender comes next) and --lead-in untimed calls of the same callable
(default 1: the timed call runs with its threads awake and its data in cache, as the ops of a
training loop run back to back; --inference defaults to 0, the first call after the pause, as
between the frames of a stream, which also pays TensorFlow's wake-up of its sleeping threads,
~0.6 ms even for an empty tf.function on a 2-core VM), and the table reports medians. GFLOP/s count
GEMM FLOP only (multiply-add = 2): LSTM forward 8*B*H*(I+H)*T, GRU 6*B*H*(I+H)*T, backward twice
the forward; "% peak" divides by the machine's float32 FMA peak measured at the start of the run
(for every dtype): the library's register-only FMA loop, in the ISA build that runs, on as many
threads at once as TF's intra-op threads, summed. The GFLOP/s of a float32 tf.matmul is measured
and printed beside it, as information. "speedup" is the row's median divided by the baseline
contender's median for the same phase (default: ours BlockLSTMV2 for lstm, ours CudnnRNNV3 for
gru): above 1 the baseline (ours) is faster.

--memory measures the peak resident memory a fwd+bwd step adds (VmHWM after the step minus VmRSS
before it, with the peak reset through /proc/self/clear_refs), in one fresh subprocess per case
and contender, in which glibc returns every allocation of 64 KiB or more to the OS on free, so
caches of earlier steps do not hide memory. It covers everything a step allocates (TF tensors,
kernel scratch, Eigen/oneDNN buffers, torch), unlike TF's allocator statistics.

torch contenders run when `import torch` works; --torch-path DIR appends a site-packages
directory (e.g. of another venv with the same Python) to sys.path first. torch runs with
torch.set_num_threads equal to TF's intra-op thread count.

Modules: cli (arguments, run, main), contenders (cases and what is timed), timing, memory
(--memory's subprocesses), environment (CPUs, threads, torch), table, charts (--plot).
"""

import os

# Set when the benchmark is imported, before anything imports keras (the contenders do, lazily):
# Keras runs on TensorFlow, TF's C++ logs stay quiet, and the --memory subprocesses inherit both.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

# Every public name of the benchmark, importable from tf_lstm_ops.bench as before it was split
# into modules (the tests and scripts use them).
from tf_lstm_ops.bench.charts import plot  # noqa: E402
from tf_lstm_ops.bench.cli import (  # noqa: E402
    DEFAULT_COOLDOWN_MS,
    DEFAULT_LEAD_IN,
    DEFAULT_REPEATS,
    DEFAULT_SHAPES,
    DEFAULT_WARMUP,
    DTYPE_ALIASES,
    FMA_SECONDS,
    INFERENCE_SHAPES,
    QUICK_FMA_SECONDS,
    QUICK_COOLDOWN_MS,
    QUICK_LEAD_IN,
    QUICK_REPEATS,
    QUICK_SGEMM_N,
    QUICK_SHAPES,
    QUICK_WARMUP,
    SGEMM_N,
    STREAMING_SHAPE,
    build_parser,
    main,
    parse_args,
    run,
)
from tf_lstm_ops.bench.contenders import (  # noqa: E402
    CONTENDER_KEYS,
    CONTENDERS,
    DEFAULT_BASELINE,
    DTYPES,
    FAMILIES,
    GATES,
    HALF_FLOAT,
    INFERENCE_BASELINE,
    INFERENCE_CONTENDERS,
    INFERENCE_PHASE,
    PHASES,
    UNSUPPORTED_NOTES,
    Case,
    Contender,
    Skip,
    build_keras,
    build_ours_block,
    build_ours_cell_loop,
    build_ours_cudnn,
    build_ours_keras,
    build_ours_tape,
    build_tf_block,
    build_tf_cell_loop,
    build_torch,
    contenders_for,
    keras_dtype,
    tf_dtype,
)
from tf_lstm_ops.bench.environment import (  # noqa: E402
    cpu_snapshot,
    import_torch,
    machine_info,
    other_cpu_use,
    setup_threads,
    usable_cpus,
)
from tf_lstm_ops.bench.memory import MEMORY_ENV, measure_memory, memory_worker  # noqa: E402
from tf_lstm_ops.bench.table import format_table  # noqa: E402
from tf_lstm_ops.bench.timing import (  # noqa: E402
    Cell,
    Progress,
    add_speedups,
    measure_call_overhead,
    measure_fma_peak,
    measure_sgemm,
    plan,
    results_of,
    run_case,
)
