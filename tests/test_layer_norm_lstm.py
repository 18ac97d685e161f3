"""The LayerNorm LSTM ops (docs/layer_norm_lstm.md): LayerNormLSTM against the float64 NumPy
reference written from the spec (tools/references/layer_norm_lstm.py) for both presets, every
layout, dtype and option (lengths, TF Addons' recurrent mask, zoneout); the fused LayerNormLSTMGrad
against TensorFlow's autodiff of the same function built from TensorFlow ops, and first and
second derivatives against finite differences; float32 at least as accurate as TensorFlow's own
float32 computation; every bad input an InvalidArgumentError naming it."""

import numpy as np
import pytest
import tensorflow as tf

from tools.references import cudnn_rnn as R
from tools.references import layer_norm_lstm as LN

T, B, I, H = 5, 4, 3, 4
LENGTHS = [T, 2, 0, 4]
# (as float32: the value the ops' float attribute holds, which the references then use too)
EPS = {"addons": float(np.float32(1e-3)), "paper": float(np.float32(1e-5))}


def op(name):
    from tf_lstm_ops._loader import library

    return library.op(name)


def case_inputs(rng, time_major=False, mask=False, zoneout=None, batch=B, steps=T):
    """(x, h0, c0, weights, recurrent_mask, zoneout_h, zoneout_c) in float64 NumPy: zoneout
    None, "masks" (per element 0/1) or "scalar"."""
    x = rng.uniform(-1, 1, (steps, batch, I) if time_major else (batch, steps, I))
    h0, c0 = rng.uniform(-1, 1, (batch, H)), rng.uniform(-1, 1, (batch, H))
    w = LN.random_weights(rng, I, H)
    m = (rng.uniform(size=(batch, H)) >= 0.3) / 0.7 if mask else None
    shape = (steps, batch, H) if time_major else (batch, steps, H)
    zh = zc = None
    if zoneout == "masks":
        zh, zc = ((rng.uniform(size=shape) >= rate).astype(np.float64) for rate in (0.3, 0.2))
    elif zoneout == "scalar":
        zh, zc = np.float64(0.7), np.float64(0.9)
    return x, h0, c0, w, m, zh, zc


def op_args(inputs, lengths, dtype, norm="addons", time_major=False):
    x, h0, c0, w, m, zh, zc = inputs

    def t(v):
        return tf.constant(np.zeros([0]) if v is None else v, dtype)

    return dict(input=t(x), input_h=t(h0), input_c=t(c0), **{k: t(w[k]) for k in LN.WEIGHTS},
                sequence_lengths=tf.constant(lengths, tf.int32), recurrent_mask=t(m),
                zoneout_h_weights=t(zh), zoneout_c_weights=t(zc), norm=norm,
                epsilon=EPS[norm], time_major=time_major)


def reference(inputs, lengths, dtype, norm, time_major):
    x, h0, c0, w, m, zh, zc = inputs
    if dtype in ("half", "bfloat16"):  # the reference of the rounded values
        x, h0, c0, m, zh, zc = (None if v is None else R.round_to(v, dtype)
                                for v in (x, h0, c0, m, zh, zc))
        w = {k: R.round_to(v, dtype) for k, v in w.items()}
    return LN.forward(x, h0, c0, w, lengths, norm, EPS[norm], time_major, m, zh, zc)


@pytest.mark.parametrize("dtype", ["float64", "float32", "half", "bfloat16"])
@pytest.mark.parametrize("time_major", [False, True], ids=["bm", "tm"])
@pytest.mark.parametrize("options", [(False, None), (True, None), (False, "masks"),
                                     (True, "scalar")], ids=["plain", "mask", "zoneout",
                                                             "mask-zoneout-scalar"])
@pytest.mark.parametrize("norm", ["addons", "paper"])
def test_forward_equals_the_reference(rng, norm, options, time_major, dtype):
    mask, zoneout = options
    inputs = case_inputs(rng, time_major, mask, zoneout)
    want = reference(inputs, LENGTHS, dtype, norm, time_major)
    args = op_args(inputs, LENGTHS, dtype, norm, time_major)
    tol = R.TOL[dtype] * (4 if dtype in ("half", "bfloat16") else 1)
    for training in (True, False):
        out = op("LayerNormLSTM")(**args, is_training=training)
        for k, name in enumerate(("output", "output_h", "output_c")):
            R.assert_close(tf.cast(out[k], tf.float64), want[name], tol, name)


def _differentiable(args):
    from tf_lstm_ops._gradients.layer_norm_lstm import DIFFERENTIABLE

    return [args[k] for k in DIFFERENTIABLE]


def _loss(outputs, cot):
    return sum(tf.reduce_sum(tf.cast(o, tf.float64) * c) for o, c in zip(outputs, cot))


@pytest.mark.parametrize("time_major", [False, True], ids=["bm", "tm"])
@pytest.mark.parametrize("options", [(False, None), (True, "masks"), (False, "scalar")],
                         ids=["plain", "mask-zoneout", "zoneout-scalar"])
@pytest.mark.parametrize("norm", ["addons", "paper"])
def test_fused_gradients_equal_tensorflows_autodiff(rng, norm, options, time_major):
    """The fused LayerNormLSTMGrad against tf.GradientTape through the function built from
    TensorFlow ops, in float64: every input's gradient."""
    from tf_lstm_ops._gradients.layer_norm_lstm import forward

    inputs = case_inputs(rng, time_major, *options)
    args = op_args(inputs, LENGTHS, "float64", norm, time_major)
    theta = _differentiable(args)
    out_shape = (T, B, H) if time_major else (B, T, H)
    cot = [rng.uniform(-1, 1, s) for s in (out_shape, (B, H), (B, H))]
    grads = []
    for fn in (op("LayerNormLSTM"), forward):
        with tf.GradientTape() as tape:
            tape.watch(theta)
            value = _loss(fn(**args)[:3], cot)
        grads.append(tape.gradient(value, theta))
    for got, want in zip(*grads):
        np.testing.assert_allclose(got, want, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("norm", ["addons", "paper"])
def test_first_and_second_order_gradients_in_float64(rng, norm):
    """compute_gradient against finite differences, through the Grad op (first order) and its
    gradient, the composite (second order)."""
    from conftest import assert_gradients_to_second_order

    inputs = case_inputs(rng, False, True, "masks", batch=2, steps=3)
    args = op_args(inputs, [3, 2], "float64", norm)
    dy = tf.constant(rng.uniform(-1, 1, (2, 3, H)))

    def loss(x, h, kernel):
        out = op("LayerNormLSTM")(**dict(args, input=x, input_h=h, kernel=kernel))
        return tf.reduce_sum(out[0] * dy) + tf.reduce_sum(out[1] ** 2) + tf.reduce_sum(out[2] ** 2)

    assert_gradients_to_second_order(loss, [args["input"], args["input_h"], args["kernel"]])


def test_a_training_false_forward_is_differentiable(rng):
    """is_training=False keeps no reserve space; its gradient recomputes the training forward:
    the same gradients."""
    args = op_args(case_inputs(rng), LENGTHS, "float64")
    theta = _differentiable(args)
    grads = []
    for training in (True, False):
        with tf.GradientTape() as tape:
            tape.watch(theta)
            out = op("LayerNormLSTM")(**args, is_training=training)
            value = tf.reduce_sum(out[0] ** 2) + tf.reduce_sum(out[2])
        grads.append(tape.gradient(value, theta))
        assert out[3].shape == ((0,) if not training else out[3].shape)
    for a, b in zip(*grads):
        np.testing.assert_array_equal(a, b)


def test_float32_is_at_least_as_accurate_as_tensorflows(rng):
    """Against float64, the fused float32 forward and gradients err no more (RMS) than the same
    function computed by TensorFlow's float32 ops."""
    from tf_lstm_ops._gradients.layer_norm_lstm import forward

    errors = {}
    for seed in range(3):
        local = np.random.default_rng(seed)
        inputs = case_inputs(local, False, False, None, batch=8, steps=20)
        cot = [local.uniform(-1, 1, (8, 20, H)), local.uniform(-1, 1, (8, H)),
               local.uniform(-1, 1, (8, H))]
        results = {}
        for name, fn, dtype in (("exact", forward, "float64"), ("ours", op("LayerNormLSTM"),
                                                                 "float32"),
                                ("tf", forward, "float32")):
            args = op_args(inputs, [20] * 8, dtype)
            theta = _differentiable(args)
            with tf.GradientTape() as tape:
                tape.watch(theta)
                outs = fn(**args)[:3]
                value = _loss(outs, cot)
            results[name] = [np.asarray(v, np.float64)
                             for v in list(outs) + tape.gradient(value, theta)]
        for name in ("ours", "tf"):
            rms = [np.sqrt(np.mean((a - b) ** 2))
                   for a, b in zip(results[name], results["exact"])]
            errors.setdefault(name, []).append(rms)
    ours, theirs = np.array(errors["ours"]), np.array(errors["tf"])
    assert np.all(ours.mean(0) <= theirs.mean(0) * 1.1), (ours.mean(0), theirs.mean(0))


def _bad_cases():
    G = 4 * H
    return [  # (id, overrides, names)
        ("input-rank", dict(input=np.ones((B, T))), ["input"]),
        ("h-rank", dict(input_h=np.ones((1, B, H))), ["input_h"]),
        ("c-shape", dict(input_c=np.ones((B, H + 1))), ["input_c"]),
        ("h-batch", dict(input_h=np.ones((B + 1, H))), ["input_h"]),
        ("kernel-rows", dict(kernel=np.ones((I + 1, G))), ["kernel"]),
        ("kernel-cols", dict(kernel=np.ones((I, G - 1))), ["kernel"]),
        ("recurrent-shape", dict(recurrent_kernel=np.ones((G, H))), ["recurrent_kernel"]),
        ("bias-shape", dict(bias=np.ones((H,))), ["bias"]),
        ("bias-rank", dict(bias=np.ones((1, G))), ["bias"]),
        ("gamma_x", dict(gamma_x=np.ones((H,))), ["gamma_x"]),
        ("beta_h", dict(beta_h=np.ones((G + 1,))), ["beta_h"]),
        ("gamma_c", dict(gamma_c=np.ones((G,))), ["gamma_c"]),
        ("beta_c-rank", dict(beta_c=np.ones(())), ["beta_c"]),
        ("lengths-shape", dict(sequence_lengths=np.full((B + 1,), T, np.int32)),
         ["sequence_lengths"]),
        ("lengths-value", dict(sequence_lengths=np.array([T, T + 1, 0, 1], np.int32)),
         ["sequence_lengths"]),
        ("negative-length", dict(sequence_lengths=np.array([T, -1, 0, 1], np.int32)),
         ["sequence_lengths"]),
        ("mask-shape", dict(recurrent_mask=np.ones((B, H + 1))), ["recurrent_mask"]),
        ("mask-rank", dict(recurrent_mask=np.ones((4, B, H))), ["recurrent_mask"]),
        ("zoneout-shape", dict(zoneout_h_weights=np.ones((T, B, H))), ["zoneout_h_weights"]),
        ("zoneout-rank", dict(zoneout_c_weights=np.ones((B, H))), ["zoneout_c_weights"]),
        ("epsilon-zero", dict(epsilon=0.0), ["epsilon"]),
        ("epsilon-negative", dict(epsilon=-1e-3), ["epsilon"]),
    ]


BAD = _bad_cases()


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_inputs_are_invalid_arguments_naming_them(rng, case, mode):
    from test_cudnn_validation import expect_invalid

    _, overrides, names = case
    kwargs = op_args(case_inputs(rng), LENGTHS, "float32")
    for k, v in overrides.items():
        kwargs[k] = v if k == "epsilon" else tf.constant(
            v, tf.int32 if k == "sequence_lengths" else tf.float32)
    expect_invalid(op("LayerNormLSTM"), kwargs, mode, names)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_the_grad_op_rejects_bad_cotangents_and_lengths_naming_them(rng, mode):
    """Wrong rank, wrong size, an empty dimension and an out-of-range length, eagerly and in a
    tf.function of unknown shapes: InvalidArgumentError naming the argument."""
    from test_cudnn_validation import expect_invalid

    args = op_args(case_inputs(rng), LENGTHS, "float32")
    out = op("LayerNormLSTM")(**args)
    cot = dict(output_backprop=tf.ones_like(out[0]), output_h_backprop=tf.ones_like(out[1]),
               output_c_backprop=tf.ones_like(out[2]), reserve_space=out[3])
    for override, name in [
        (dict(output_backprop=tf.ones([B, T, H, 1])), "output_backprop"),
        (dict(output_backprop=tf.ones([B, T, H + 1])), "output_backprop"),
        (dict(output_h_backprop=tf.ones([0, H])), "output_h_backprop"),
        (dict(output_c_backprop=tf.ones([B])), "output_c_backprop"),
        (dict(sequence_lengths=tf.constant([T + 1] * B, tf.int32)), "sequence_lengths"),
    ]:
        expect_invalid(op("LayerNormLSTMGrad"), dict(args, **dict(cot, **override)), mode,
                       [name])


def test_the_grad_op_checks_its_cotangents_and_reserve_space(rng):
    args = op_args(case_inputs(rng), LENGTHS, "float32")
    out = op("LayerNormLSTM")(**args)
    cot = dict(output_backprop=tf.ones_like(out[0]), output_h_backprop=tf.ones_like(out[1]),
               output_c_backprop=tf.ones_like(out[2]), reserve_space=out[3])
    grad = op("LayerNormLSTMGrad")
    grad(**args, **cot)  # (valid)
    bad = [
        (dict(cot, output_backprop=tf.ones([B, T + 1, H])), "output_backprop"),
        (dict(cot, output_c_backprop=tf.ones([B, H + 1])), "output_c_backprop"),
        (dict(cot, reserve_space=out[3][:-1]), "reserve_space"),
        (dict(cot, reserve_space=tf.zeros_like(out[3])), "reserve_space"),
    ]
    for kwargs, name in bad:
        with pytest.raises(tf.errors.InvalidArgumentError, match=name):
            grad(**args, **kwargs)
    # another configuration's reserve space (paper, no zoneout) is rejected
    other = op("LayerNormLSTM")(**dict(args, norm="paper", epsilon=1e-3))
    with pytest.raises(tf.errors.InvalidArgumentError, match="reserve_space"):
        grad(**args, **dict(cot, reserve_space=other[3]))


@pytest.mark.parametrize("sizes", [(0, 2, 3, 4), (3, 0, 3, 4), (3, 2, 0, 4), (3, 2, 3, 0)],
                         ids=["T0", "B0", "I0", "H0"])
def test_empty_dimensions(sizes):
    steps, batch, inputs_, units = sizes
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (batch, steps, inputs_))
    h0, c0 = rng.uniform(-1, 1, (batch, units)), rng.uniform(-1, 1, (batch, units))
    w = LN.random_weights(rng, inputs_, units)
    kwargs = dict(input=x, input_h=h0, input_c=c0, **w)
    kwargs = {k: tf.constant(v, tf.float64) for k, v in kwargs.items()}
    empty = tf.zeros([0], tf.float64)
    kwargs.update(sequence_lengths=tf.fill([batch], steps), recurrent_mask=empty,
                  zoneout_h_weights=empty, zoneout_c_weights=empty)
    theta = _differentiable(kwargs)
    with tf.GradientTape() as tape:
        tape.watch(theta)
        out = op("LayerNormLSTM")(**kwargs)
        value = tf.reduce_sum(out[0]) + tf.reduce_sum(out[1] * 2) + tf.reduce_sum(out[2] * 3)
    grads = tape.gradient(value, theta)
    want = LN.forward(x, h0, c0, w, [steps] * batch)
    for k, name in enumerate(("output", "output_h", "output_c")):
        np.testing.assert_allclose(out[k], want[name], atol=1e-12)
    if steps == 0 or units == 0:  # the states pass through, the weights get nothing
        np.testing.assert_array_equal(grads[1], np.full((batch, units), 2.0))
        np.testing.assert_array_equal(grads[3], np.zeros_like(w["kernel"]))
