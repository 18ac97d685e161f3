"""Run in a subprocess by test_cpu_time_loop_slices.py: the intra-op thread count must be set
before TensorFlow starts, and it decides how many unit slices the CPU time loops use.

usage: python slices_worker.py THREADS [ISA]
    prints one line per failed check, then "DONE <n checks>"; with ISA (avx2, avx) the CPU GEMM
    blocks of that build run (TF_LSTM_OPS_CPU_ISA), and the worker first checks that they do.
usage: python slices_worker.py THREADS --digest
    prints "DIGEST <sha256>" of the outputs and gradients of fixed runs whose time loops split by
    batch rows on several threads (docs/performance.md §4): the same bits as on one thread.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
DIGEST = sys.argv[2:] == ["--digest"]
if len(sys.argv) > 2 and not DIGEST:
    os.environ["TF_LSTM_OPS_CPU_ISA"] = sys.argv[2]
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[1]))

from tools.references import cudnn_rnn as R  # noqa: E402
from tools.references import block_lstm as ref  # noqa: E402
import tf_lstm_ops  # noqa: E402
from tf_lstm_ops._loader import cpu_isa, in_place_backward_runs  # noqa: E402

TOL = {"float64": 1e-10, "float32": 2e-5, "half": 3e-3, "bfloat16": 3e-2}
checks = 0


def close(name, got, expect, tol, what):
    global checks
    checks += 1
    got = np.asarray(got, np.float64)
    err = np.max(np.abs(got - expect), initial=0.0) / max(1.0, np.max(np.abs(expect), initial=0.0))
    if not err <= tol:
        print("FAIL %s %s: relative error %.3g > %.3g" % (what, name, err, tol), flush=True)


# (H, B, use_peephole, cell_clip, layout). B = 130 and 100: 3 and 5 steps per chunk of the time
# loops (kChunkRows = 512), so the sweeps cross chunk boundaries.
BLOCK_SHAPES = [(37, 5, True, 0.8, "ICFO"), (48, 1, False, 0.0, "IFCO"), (64, 4, True, 0.0, "IFCO"),
                (70, 3, False, 3.0, "ICFO"), (20, 130, True, 0.8, "IFCO"), (40, 100, False, 0.0, "ICFO")]


def block_lstm_cases(rng, shapes=BLOCK_SHAPES, T=6):
    """BlockLSTM / BlockLSTMV2 forward and gradient with H from 20 to 70 (1 to 4 slices), and batches
    large enough for several chunks of steps."""
    for H, B, use_peephole, cell_clip, layout in shapes:
        # H = 40 with I = 64: L·I >= 8H, so the in-place gradient below stages its per-step dgates
        # in x_grad, with two slices.
        I = 64 if H == 40 else 9
        L = T - 1 if B < 100 else T
        # half/bfloat16 (forward only: their gradients' tolerances belong to the main suite):
        # the state each slice multiplies is h as stored, and bfloat16 runs the bf16 dot-product
        # kernels where the CPU has them.
        for dtype in ("float32", "float64", "half", "bfloat16"):
            p = ref.random_inputs(rng, B, I, H, T=T)
            p = {k: tf.constant(v, dtype).numpy().astype(np.float64) for k, v in p.items()}
            op = tf_lstm_ops.raw.BlockLSTM if layout == "ICFO" else tf_lstm_ops.raw.BlockLSTMV2
            grad = tf_lstm_ops.raw.BlockLSTMGrad if layout == "ICFO" else tf_lstm_ops.raw.BlockLSTMGradV2
            attrs = dict(cell_clip=cell_clip, use_peephole=use_peephole)
            if layout == "ICFO":
                attrs["forget_bias"] = 0.5
            tfp = {k: tf.constant(v, dtype) for k, v in p.items()}
            seq = tf.constant(L, tf.int64)
            out = op(seq_len_max=seq, **tfp, **attrs)
            forget_bias = 0.5 if layout == "ICFO" else 0.0
            expect = ref.block_lstm(L, **p, forget_bias=forget_bias, cell_clip=float(np.float32(cell_clip)),
                                    use_peephole=use_peephole, layout=layout)
            what = "BlockLSTM %s H=%d B=%d %s" % (layout, H, B, dtype)
            for k in ref.OUTPUT_NAMES:
                close(k, tf.cast(getattr(out, k), tf.float64), expect[k], TOL[dtype], what)
            if dtype in ("half", "bfloat16"):
                continue
            cs_grad = rng.standard_normal((T, B, H)).astype(dtype).astype(np.float64)
            h_grad = rng.standard_normal((T, B, H)).astype(dtype).astype(np.float64)

            def grad_of(fwd):
                return grad(seq_len_max=seq, **tfp, **{k: getattr(fwd, k) for k in ref.OUTPUT_NAMES},
                            cs_grad=tf.constant(cs_grad, dtype), h_grad=tf.constant(h_grad, dtype),
                            use_peephole=use_peephole)

            g = grad_of(out)
            expect_g = ref.block_lstm_grad(L, **p, **{k: expect[k] for k in ref.OUTPUT_NAMES},
                                           cs_grad=cs_grad, h_grad=h_grad, use_peephole=use_peephole,
                                           layout=layout)
            for k in ref.SEQ_GRAD_NAMES:
                close(k, getattr(g, k), expect_g[k], TOL[dtype], what)
            # The same gradient inside one tf.function with the forward, where the grad op takes
            # over i, f, ci, o and keeps the gate gradients in their place.
            def fused():
                return grad_of(op(seq_len_max=seq, **tfp, **attrs))

            runs = in_place_backward_runs()
            with tf.device("/CPU:0"):  # the counter counts the CPU kernel's runs
                g = tf.function(fused, autograph=False)()
            close("in-place runs", in_place_backward_runs() - runs, 1, 0, what)
            for k in ref.SEQ_GRAD_NAMES:
                close(k, getattr(g, k), expect_g[k], TOL[dtype], what + " in place")


def cudnn_forward_backward(rng, cfg, T, B, time_major, dtype, lens):
    """CudnnRNNV3 and CudnnRNNBackpropV3 on random inputs and cotangents rounded to dtype:
    (inputs, cotangents, forward outputs, backprop outputs)."""
    inp = R.rounded(R.random_inputs(rng, cfg, T, B, time_major), dtype)
    cot = R.rounded(R.random_cotangents(rng, cfg, T, B, time_major), dtype)
    kw = R.tf_forward_inputs(cfg, inp, dtype, lens, 3, time_major)
    attrs = R.tf_attrs(cfg, 3, time_major)
    fwd = tf_lstm_ops.raw.CudnnRNNV3(**kw, **attrs, is_training=True)
    zero = tf.zeros([], R.tf_dtype(dtype))
    bwd = tf_lstm_ops.raw.CudnnRNNBackpropV3(
        **kw, **attrs, output=fwd.output, output_h=fwd.output_h, output_c=fwd.output_c,
        output_backprop=R.to_tf(cot["dy"], dtype), output_h_backprop=R.to_tf(cot["dh"], dtype),
        output_c_backprop=R.to_tf(cot["dc"], dtype) if cfg.is_lstm else zero,
        reserve_space=fwd.reserve_space, host_reserved=fwd.host_reserved)
    return inp, cot, fwd, bwd


CUDNN_MODELS = [("lstm", "bidirectional", 48, 0), ("lstm", "unidirectional", 64, 20),
                ("lstm", "bidirectional", 40, 36), ("gru", "bidirectional", 37, 0),
                ("gru", "unidirectional", 64, 0), ("rnn_tanh", "bidirectional", 48, 0),
                ("rnn_relu", "unidirectional", 70, 0)]


def cudnn_cases(rng, models=CUDNN_MODELS, batches=None, T=6):
    """CudnnRNNV3 forward and backprop: every mode, both directions, projection, lengths."""
    for ci, (mode, direction, H, P) in enumerate(models):
        cfg = R.Cfg(mode, num_layers=2 if ci % 2 == 0 else 1, num_units=H, input_size=24,
                    direction=direction, num_proj=P)
        # (B = 24 and 17: time loops split by batch rows on 3 threads, except with a projection)
        for B, time_major, dtype in batches or (
                (5, ci % 3 != 0, "float32"), (1, True, "float64"), (4, False, "float64"),
                (24, ci % 2 == 0, "float32"), (17, True, "float64")):
            lens = rng.integers(0, T + 1, size=B)
            lens[0] = T
            inp, cot, fwd, bwd = cudnn_forward_backward(rng, cfg, T, B, time_major, dtype, lens)
            got = dict(fwd._asdict(), **bwd._asdict())
            what = "CudnnRNNV3 %s %s H=%d P=%d B=%d %s" % (mode, direction, H, P, B, dtype)
            expect = R.forward(cfg, inp["input"], inp["input_h"], inp["input_c"], inp["params"], lens,
                               time_major)
            expect.update(R.backward(cfg, inp["input"], inp["input_h"], inp["input_c"], inp["params"],
                                     cot["dy"], cot["dh"], cot["dc"], lens, time_major))
            for k, v in expect.items():
                close(k, R.to_np(got[k]), v, TOL[dtype], what)


def keras_params_cases(rng):
    """KerasToCudnnParams and back (the transposing copies of gemm::Transpose, per ISA build):
    exact, at sizes with partial register blocks and at H = 256 (4 KiB Keras rows)."""
    from tf_lstm_ops._loader import library

    for mode, bias_rows in (("lstm", 1), ("gru", 2), ("rnn_tanh", 1)):
        G = R.GATES[mode]
        for I, H in ((37, 33), (64, 256)):
            for dtype in ("float32", "float64"):
                kernel = rng.standard_normal((I, G * H))
                recurrent = rng.standard_normal((H, G * H))
                bias = rng.standard_normal((G * H,) if bias_rows == 1 else (2, G * H))
                cfg = R.Cfg(mode, 1, H, I)
                expect = R.canonical_to_params(cfg, *R.keras_canonical(mode, kernel, recurrent,
                                                                       bias))
                params = library.op("KerasToCudnnParams")(
                    kernel=R.to_tf(kernel, dtype), recurrent_kernel=R.to_tf(recurrent, dtype),
                    bias=R.to_tf(bias, dtype), rnn_mode=mode)
                what = "KerasToCudnnParams %s I=%d H=%d %s" % (mode, I, H, dtype)
                close("params", R.to_np(params), R.round_to(expect, dtype), 0.0, what)
                back = library.op("CudnnParamsToKeras")(
                    params=params, rnn_mode=mode, input_size=I, num_units=H, bias_rows=bias_rows)
                close("kernel", R.to_np(back[0]), R.round_to(kernel, dtype), 0.0, what + " back")
                close("recurrent_kernel", R.to_np(back[1]), R.round_to(recurrent, dtype), 0.0,
                      what + " back")


def keras_rnn_cases(rng, batches=((1, "float64"), (3, "float32"), (5, "float32"), (20, "float32")),
                    T=6):
    """KerasRNN and KerasRNNBackprop, which read Keras' weights in place (the unpacked products
    of B <= 3 rows and packing from the transposed layout, per ISA build; the GRU's gates in
    Keras' order, resetting after and before), against CudnnRNNV3Keras and its Backprop on the
    converted weights (checked against the reference above)."""
    from tf_lstm_ops._loader import library

    op = library.op
    for mode, H, bias_rows, reset_after in (("lstm", 48, 1, True), ("rnn_tanh", 70, 1, True),
                                            ("gru", 37, 2, True), ("gru", 40, 1, False)):
        G = R.GATES[mode] * H
        for B, dtype in batches:
            I = 24
            t = lambda v: R.to_tf(v, dtype)  # noqa: E731
            state = (B, 1, H)
            x, h, c = (t(rng.uniform(-1, 1, s)) for s in ((B, T, I), state, state))
            weights = dict(kernel=t(rng.uniform(-0.3, 0.3, (I, G))),
                           recurrent_kernel=t(rng.uniform(-0.3, 0.3, (H, G))),
                           bias=t(rng.uniform(-0.3, 0.3, (G,) if bias_rows == 1 else (2, G))))
            none = t(np.zeros([0]))
            kw = dict(input=x, input_h=h, input_c=c if mode == "lstm" else t(np.zeros(())),
                      sequence_lengths=tf.constant(rng.integers(0, T + 1, B), tf.int32),
                      input_masks=none, recurrent_masks=none, zoneout_h_weights=none,
                      zoneout_c_weights=none, rnn_mode=mode, time_major=False,
                      reset_after=reset_after)
            params = op("KerasToCudnnParams")(**weights, rnn_mode=mode)
            got = op("KerasRNN")(**kw, **weights)
            want = op("CudnnRNNV3Keras")(**kw, params=params)
            what = "KerasRNN %s H=%d B=%d %s reset_after=%s" % (mode, H, B, dtype, reset_after)
            for k in ("output", "output_h", "output_c"):
                close(k, R.to_np(getattr(got, k)), R.to_np(getattr(want, k)), TOL[dtype], what)
            cot = {k: t(rng.uniform(-1, 1, getattr(got, k).shape))
                   for k in ("output", "output_h", "output_c")}
            back = dict(output_backprop=cot["output"], output_h_backprop=cot["output_h"],
                        output_c_backprop=cot["output_c"])
            got_b = op("KerasRNNBackprop")(**kw, **weights, **back, output=got.output,
                                           output_h=got.output_h, output_c=got.output_c,
                                           reserve_space=got.reserve_space,
                                           host_reserved=got.host_reserved)
            want_b = op("CudnnRNNBackpropV3Keras")(**kw, params=params, **back,
                                                   output=want.output, output_h=want.output_h,
                                                   output_c=want.output_c,
                                                   reserve_space=want.reserve_space,
                                                   host_reserved=want.host_reserved)
            want_w = op("CudnnParamsToKeras")(params=want_b.params_backprop, rnn_mode=mode,
                                              input_size=I, num_units=H, bias_rows=bias_rows)
            for k in ("input_backprop", "input_h_backprop"):
                close(k, R.to_np(getattr(got_b, k)), R.to_np(getattr(want_b, k)), TOL[dtype],
                      what)
            for k, w in zip(("kernel_backprop", "recurrent_kernel_backprop", "bias_backprop"),
                            want_w):
                close(k, R.to_np(getattr(got_b, k)), R.to_np(w), TOL[dtype], what)


def digest_of_split_runs():
    """sha256 of BlockLSTMV2 and CudnnRNNV3 outputs and gradients at batches the time loops split
    by rows on 2-3 threads (float32 and float64; lengths; every cell; both directions)."""
    import hashlib

    rng = np.random.default_rng(7)
    digest = hashlib.sha256()

    def add(*tensors):
        for t in tensors:
            digest.update(np.ascontiguousarray(R.to_np(t)).tobytes())

    for dtype in ("float32", "float64"):
        T, B, I, H = 7, 24, 9, 40
        p = {k: tf.constant(v, dtype) for k, v in ref.random_inputs(rng, B, I, H, T=T).items()}
        seq = tf.constant(T - 1, tf.int64)
        out = tf_lstm_ops.raw.BlockLSTMV2(seq_len_max=seq, **p, cell_clip=0.9, use_peephole=True)
        grads = {k: tf.constant(rng.standard_normal((T, B, H)), dtype) for k in ("cs_grad", "h_grad")}
        g = tf_lstm_ops.raw.BlockLSTMGradV2(seq_len_max=seq, **p, **out._asdict(), **grads,
                                            use_peephole=True)
        add(*out, *g)
        for mode, direction in (("lstm", "bidirectional"), ("gru", "unidirectional"),
                                ("rnn_relu", "unidirectional")):
            cfg = R.Cfg(mode, num_layers=2, num_units=H, input_size=I, direction=direction)
            lens = rng.integers(0, T + 1, size=B)
            _, _, fwd, bwd = cudnn_forward_backward(rng, cfg, T, B, True, dtype, lens)
            add(fwd.output, fwd.output_h, fwd.output_c, *bwd)
    return digest.hexdigest()


if DIGEST:
    print("DIGEST %s" % digest_of_split_runs(), flush=True)
    sys.exit(0)
print("ISA %s" % cpu_isa(), flush=True)
rng = np.random.default_rng(int(sys.argv[1]))
block_lstm_cases(rng)
cudnn_cases(rng)
keras_params_cases(rng)
keras_rnn_cases(rng)
# Batches of 1-3 rows over 17-34 steps: the time loops pack the weights they read in place over
# fewer steps (PackFor: the forward's row-major Wh and Keras recurrent_kernel from 16 steps,
# params' R in the backward from 32).
block_lstm_cases(rng, [(48, 1, False, 0.0, "IFCO"), (70, 3, True, 0.8, "ICFO")], T=34)
cudnn_cases(rng, [("lstm", "bidirectional", 48, 0), ("gru", "unidirectional", 64, 0)],
            ((1, True, "float32"), (3, False, "float64")), T=33)
keras_rnn_cases(rng, ((1, "float32"), (2, "float64")), T=17)
print("DONE %d" % checks, flush=True)
