"""Shared fixtures and helpers for the tf_lstm_ops test suite.

Inputs are generated in float64 and rounded once to the dtype under test; the rounded values
(as float64) are what the NumPy reference sees, so reference comparisons measure only the
kernel's own arithmetic error.
"""

import contextlib
import os
import re
import sys
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf

from tools.references import block_lstm as ref  # noqa: E402

DTYPES = {
    "half": tf.float16,
    "bfloat16": tf.bfloat16,
    "float32": tf.float32,
    "float64": tf.float64,
}

CELL_INPUTS = ("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b")
OUTPUTS = ref.OUTPUT_NAMES
GATE_OUTPUTS = ("i", "f", "o", "ci", "co")  # left uninitialised by TF for t >= seq_len_max

# (T, B, I, H, L): small and odd sizes, L from 0 to T.
SEQ_SHAPES = [
    (1, 1, 1, 1, 1),
    (1, 3, 2, 5, 1),
    (1, 2, 3, 2, 0),
    (2, 2, 3, 4, 2),
    (3, 1, 4, 2, 2),
    (4, 3, 1, 5, 4),
    (5, 2, 3, 3, 0),
    (5, 4, 6, 8, 3),
    (6, 3, 5, 7, 6),
    (7, 2, 2, 4, 5),
    (3, 5, 7, 3, 1),
    (8, 1, 3, 2, 8),
    (4, 2, 9, 6, 2),
    (2, 6, 4, 1, 2),
    (6, 8, 8, 16, 6),
    (9, 3, 5, 4, 7),
]
SEQ_SHAPE_IDS = ["T%dB%dI%dH%dL%d" % s for s in SEQ_SHAPES]

# (B, I, H) for the cell ops.
CELL_SHAPES = [
    (1, 1, 1),
    (3, 2, 5),
    (2, 3, 4),
    (1, 4, 2),
    (4, 1, 3),
    (5, 7, 8),
    (3, 6, 1),
    (8, 8, 16),
    (2, 9, 6),
    (7, 3, 5),
]
CELL_SHAPE_IDS = ["B%dI%dH%d" % s for s in CELL_SHAPES]

# Attribute sets (use_peephole, cell_clip, forget_bias); None = leave the op's default.
# cell_clip 0.5 / 0.8 make clipping actually active with the input scales below.
V1_ATTRS = [
    dict(use_peephole=None, cell_clip=None, forget_bias=None),  # defaults: clip 3, fb 1
    dict(use_peephole=True, cell_clip=3.0, forget_bias=1.0),
    dict(use_peephole=False, cell_clip=0.0, forget_bias=0.3),
    dict(use_peephole=True, cell_clip=0.5, forget_bias=-0.7),
    dict(use_peephole=True, cell_clip=-1.0, forget_bias=0.0),
    dict(use_peephole=False, cell_clip=0.8, forget_bias=2.0),
]
V2_ATTRS = [
    dict(use_peephole=None, cell_clip=None),  # defaults: no clip
    dict(use_peephole=True, cell_clip=0.0),
    dict(use_peephole=False, cell_clip=0.5),
    dict(use_peephole=True, cell_clip=0.8),
    dict(use_peephole=True, cell_clip=-1.0),
]
V1_ATTR_IDS = ["pp%s-clip%s-fb%s" % (a["use_peephole"], a["cell_clip"], a["forget_bias"])
               for a in V1_ATTRS]
V2_ATTR_IDS = ["pp%s-clip%s" % (a["use_peephole"], a["cell_clip"]) for a in V2_ATTRS]

OP_DEFAULTS = {
    "LSTMBlockCell": dict(forget_bias=1.0, cell_clip=3.0, use_peephole=False),
    "BlockLSTM": dict(forget_bias=1.0, cell_clip=3.0, use_peephole=False),
    "BlockLSTMV2": dict(forget_bias=0.0, cell_clip=0.0, use_peephole=False),
}
LAYOUT = {"LSTMBlockCell": "ICFO", "BlockLSTM": "ICFO", "BlockLSTMV2": "IFCO",
          "LSTMBlockCellGrad": "ICFO", "BlockLSTMGrad": "ICFO", "BlockLSTMGradV2": "IFCO"}


# ------------------------------------------------------------------------------------------
# fixtures
# ------------------------------------------------------------------------------------------

@pytest.fixture
def rng(request):
    """A NumPy generator seeded from the test's id: deterministic, different per test."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(scope="session")
def nvcc():
    """nvcc's path (tools/gpu_selftest/build.py); skips the test when it is missing: the only reason
    to skip the self-test module's tests, without nvcc nothing can be built."""
    from tools.gpu_selftest import build  # pytest.ini puts the repo on sys.path

    try:
        return build.find_nvcc()
    except RuntimeError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def selftest_module(nvcc):
    """The GPU self-test module (tools/gpu_selftest), built with nvcc for sm_80 and loaded once per
    session; shared by tests/test_gpu_block_lstm_engine.py and
    tests/test_gpu_cudnn_rnn_engine.py."""
    from tools.gpu_selftest import build

    return build.load(arch="80")


@pytest.fixture
def raw():
    """tf_lstm_ops.raw (imported lazily: a missing library makes the test error, not skip)."""
    import tf_lstm_ops

    return tf_lstm_ops.raw


@pytest.fixture(params=["eager", "function"])
def eager_or_function(request):
    """run(fn, **kwargs): calls fn eagerly or inside a fresh tf.function; returns numpy."""
    mode = request.param

    def run(fn, **kwargs):
        if mode == "eager":
            result = fn(**kwargs)
        else:
            tensors = {k: v for k, v in kwargs.items() if isinstance(v, tf.Tensor)}
            static = {k: v for k, v in kwargs.items() if not isinstance(v, tf.Tensor)}

            @tf.function
            def wrapped(**kw):
                return fn(**kw, **static)

            result = wrapped(**tensors)
        return to_numpy(result)

    run.mode = mode
    return run


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------

def to_numpy(result):
    """Namedtuple/tuple/dict of tensors -> same structure of float64 numpy arrays (dict for
    namedtuples, keyed by field)."""
    if hasattr(result, "_fields"):
        return {k: np.asarray(getattr(result, k), dtype=np.float64) for k in result._fields}
    if isinstance(result, dict):
        return {k: np.asarray(v, dtype=np.float64) for k, v in result.items()}
    if isinstance(result, (list, tuple)):
        return [np.asarray(v, dtype=np.float64) for v in result]
    return np.asarray(result, dtype=np.float64)


def assert_gradients_to_second_order(loss, args, atol=2e-6, rtol=1e-5):
    """tf.test.compute_gradient, against finite differences, of loss(x, h, p) (first order:
    through a fused Backprop op) and of a function of its gradient (second order: through that
    op's own gradient), at float64 args (x, h, p)."""

    def grad_norm(x, h, p):
        with tf.GradientTape() as tape:
            tape.watch([x, h, p])
            value = loss(x, h, p)
        gx, gh, gp = tape.gradient(value, [x, h, p])
        return tf.reduce_sum(gx ** 2) + tf.reduce_sum(gh * h) + tf.reduce_sum(tf.sin(gp))

    for fn in (loss, grad_norm):
        theoretical, numerical = tf.test.compute_gradient(fn, list(args), delta=1e-6)
        for t, n in zip(theoretical, numerical):
            np.testing.assert_allclose(t, n, atol=atol, rtol=rtol,
                                       err_msg=getattr(fn, "__name__", "loss"))


def keras_op_args(cfg, inputs, lengths, time_major, dtype, input_masks=None,
                  recurrent_masks=None, zoneout_h=None, zoneout_c=None):
    """CudnnRNNV3Keras's (and its Backprop's) inputs and attributes for a reference Cfg and
    R.random_inputs: the operand masks and zoneout weights given, or the empty vector (none)."""
    def tensor(v, empty=np.zeros([0])):
        return tf.constant(empty if v is None else v, dtype)

    return dict(
        input=tensor(inputs["input"]), input_h=tensor(inputs["input_h"]),
        input_c=tensor(inputs["input_c"] if cfg.is_lstm else np.zeros(())),
        params=tensor(inputs["params"]), sequence_lengths=tf.constant(lengths, tf.int32),
        input_masks=tensor(input_masks), recurrent_masks=tensor(recurrent_masks),
        zoneout_h_weights=tensor(zoneout_h), zoneout_c_weights=tensor(zoneout_c),
        rnn_mode=cfg.rnn_mode, direction=cfg.direction, time_major=time_major,
        activation=cfg.activation, recurrent_activation=cfg.recurrent_activation,
        reset_after=cfg.reset_after)


def keras_backprop(args, out, cot, dtype):
    """CudnnRNNBackpropV3Keras for a forward's op arguments (keras_op_args) and outputs `out`,
    with R.random_cotangents' cotangents `cot` (dc ignored outside LSTM: the scalar 0 there)."""
    from tf_lstm_ops._loader import library

    lstm = args["rnn_mode"] == "lstm"
    return library.op("CudnnRNNBackpropV3Keras")(
        **args, output=out.output, output_h=out.output_h, output_c=out.output_c,
        output_backprop=tf.constant(cot["dy"], dtype),
        output_h_backprop=tf.constant(cot["dh"], dtype),
        output_c_backprop=tf.constant(cot["dc"] if lstm else np.zeros(()), dtype),
        reserve_space=out.reserve_space, host_reserved=out.host_reserved)


@contextlib.contextmanager
def tf_keras_dropout_masks(cell, input_masks, recurrent_masks):
    """tf_keras' mask draws (get_dropout_mask_for_cell and its recurrent twin, functions of
    (self, inputs, training, count)) replaced, on the class that defines them, for every cell of
    that kind: ours and tf_keras' layers then apply the same masks."""
    with pytest.MonkeyPatch.context() as patch:
        owner = next(c for c in type(cell).__mro__ if "get_dropout_mask_for_cell" in vars(c))
        patch.setattr(owner, "get_dropout_mask_for_cell", input_masks)
        patch.setattr(owner, "get_recurrent_dropout_mask_for_cell", recurrent_masks)
        yield


def layer_call_and_gradients(layer, x, mask, cotangents, training, before=None):
    """A Keras layer's outputs on x (with a step mask or None) and the gradients of
    sum_k <output_k, cotangents[k]> (in float64) w.r.t. x and its trainable weights, as one
    list; before(layer), if given, runs inside the tape first (to inject dropout masks)."""
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        if before:
            before(layer)
        outs = list(layer(x, mask=None if mask is None else tf.constant(mask), training=training))
        loss = sum(tf.reduce_sum(tf.cast(o, tf.float64) * c) for o, c in zip(outs, cotangents))
    return outs + tape.gradient(loss, [x] + layer.trainable_weights)


def round_to(a, dtype):
    """Round float64 values to `dtype` and return them as float64."""
    return tf.cast(tf.constant(np.asarray(a, np.float64)), DTYPES[dtype]).numpy().astype(np.float64)


def to_tf(a, dtype):
    """float64 numpy -> tensor of `dtype` (same rounding as round_to)."""
    return tf.cast(tf.constant(np.asarray(a, np.float64)), DTYPES[dtype])


def f32(v):
    """A float attr as the op sees it (attrs are 32-bit floats)."""
    return float(np.float32(v))


def attrs_for(op, attrs):
    """Op kwargs (only the attrs given) and the effective values for the reference."""
    kwargs = {k: v for k, v in attrs.items() if v is not None}
    if op == "BlockLSTMV2":
        kwargs.pop("forget_bias", None)
    eff = dict(OP_DEFAULTS[op])
    eff.update(kwargs)
    # float attrs are 32-bit: the op sees float32(value)
    return kwargs, dict(forget_bias=f32(eff["forget_bias"]), cell_clip=f32(eff["cell_clip"]),
                        use_peephole=eff["use_peephole"], layout=LAYOUT[op])


def random_params(rng, B, I, H, dtype="float64", T=None, scale=1.0):
    """reference.random_inputs, rounded to dtype (as float64 numpy)."""
    p = ref.random_inputs(rng, B, I, H, T=T, scale=scale)
    return {k: round_to(v, dtype) for k, v in p.items()}


def tf_inputs(params, dtype, seq_len_max=None):
    """float64 numpy params -> dict of tensors for an op call."""
    out = {k: to_tf(v, dtype) for k, v in params.items()}
    if seq_len_max is not None:
        out["seq_len_max"] = tf.constant(seq_len_max, tf.int64)
    return out


def assert_close(actual, expected, tol, name="", scale_floor=1.0):
    """max|actual - expected| <= tol * max(scale_floor, max|expected|) (absolute for small
    values, relative for large ones); shapes must match; NaN/Inf in `actual` fail."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, "%s: shape %s != expected %s" % (
        name, actual.shape, expected.shape)
    if actual.size == 0:
        return
    assert np.all(np.isfinite(actual)), "%s: non-finite values: %s" % (name, actual)
    scale = max(scale_floor, float(np.max(np.abs(expected))))
    err = float(np.max(np.abs(actual - expected)))
    assert err <= tol * scale, "%s: max abs err %.3g > %.3g (scale %.3g); worst at %s" % (
        name, err, tol * scale, scale,
        np.unravel_index(np.argmax(np.abs(actual - expected)), actual.shape))


def name_pattern(name):
    """Regex matching `name` as a whole identifier (optionally followed by '_tensor')."""
    return re.compile(r"(?<![A-Za-z0-9_])%s(?:_tensor)?(?![A-Za-z0-9_])" % re.escape(name))


def message_names(message, names):
    return any(name_pattern(n).search(message) for n in names)


# ------------------------------------------------------------------------------------------
# reference wrappers keyed by op name
# ------------------------------------------------------------------------------------------

def activations_for_grad(rng, params, eff, seq_len_max, dtype, garbage=True):
    """Forward activations (rounded to dtype) for feeding a Grad op; with garbage=True the
    (never read) steps t >= seq_len_max hold large random junk instead of zeros."""
    acts = ref.block_lstm(seq_len_max, **params, **eff)
    acts = {k: round_to(v, dtype) for k, v in acts.items()}
    if garbage:
        T = params["x"].shape[0]
        for k in acts:
            for t in range(seq_len_max, T):
                acts[k][t] = round_to(rng.uniform(-50, 50, acts[k][t].shape), dtype)
    return acts
