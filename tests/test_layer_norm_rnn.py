"""The LayerNorm GRU / SimpleRNN op (docs/layer_norm_rnn.md): LayerNormRNN against the float64
NumPy reference written from the spec (tools/references/layer_norm_rnn.py) for both cells, every
layout, dtype and option (lengths, the recurrent mask, zoneout, Keras' activations); the fused
LayerNormRNNGrad against TensorFlow's autodiff of the same function built from TensorFlow ops, and
first and second derivatives against finite differences; float32 at least as accurate as
TensorFlow's own float32 computation; every bad input an InvalidArgumentError naming it."""

import numpy as np
import pytest
import tensorflow as tf

from tools.references import cudnn_rnn as R
from tools.references import layer_norm_rnn as LR

T, B, I, H = 5, 4, 3, 4
LENGTHS = [T, 2, 0, 4]
EPS = float(np.float32(1e-5))  # (as float32: the value the op's float attribute holds)


def op(name):
    from tf_lstm_ops._loader import library

    return library.op(name)


def case_inputs(rng, cell, time_major=False, mask=False, zoneout=None, batch=B, steps=T,
                units=H):
    """(x, h0, weights, recurrent_mask, zoneout weights) in float64 NumPy: zoneout None,
    "masks" (per element 0/1) or "scalar"."""
    x = rng.uniform(-1, 1, (steps, batch, I) if time_major else (batch, steps, I))
    h0 = rng.uniform(-1, 1, (batch, units))
    w = LR.random_weights(rng, cell, I, units)
    m = (rng.uniform(size=(batch, units)) >= 0.3) / 0.7 if mask else None
    shape = (steps, batch, units) if time_major else (batch, steps, units)
    z = None
    if zoneout == "masks":
        z = (rng.uniform(size=shape) >= 0.3).astype(np.float64)
    elif zoneout == "scalar":
        z = np.float64(0.7)
    return x, h0, w, m, z


def op_args(inputs, lengths, dtype, cell, time_major=False, activation="tanh",
            recurrent_activation="sigmoid"):
    x, h0, w, m, z = inputs

    def t(v):
        return tf.constant(np.zeros([0]) if v is None else v, dtype)

    return dict(input=t(x), input_h=t(h0), kernel=t(w["kernel"]),
                recurrent_kernel=t(w["recurrent_kernel"]), bias=t(w["bias"]),
                gamma_x=t(w["gamma_x"]), gamma_h=t(w.get("gamma_h")),
                sequence_lengths=tf.constant(lengths, tf.int32), recurrent_mask=t(m),
                zoneout_weights=t(z), cell=cell, activation=activation,
                recurrent_activation=recurrent_activation, epsilon=EPS, time_major=time_major)


def reference(inputs, lengths, dtype, cell, time_major, activation="tanh",
              recurrent_activation="sigmoid"):
    x, h0, w, m, z = inputs
    if dtype in ("half", "bfloat16"):  # the reference of the rounded values
        x, h0, m, z = (None if v is None else R.round_to(v, dtype) for v in (x, h0, m, z))
        w = {k: R.round_to(v, dtype) for k, v in w.items()}
    return LR.forward(cell, x, h0, w, lengths, EPS, time_major, m, z, activation,
                      recurrent_activation)


# (cell, activation, recurrent_activation): haste's GRU, Addons' SimpleRNN, and other Keras
# activations the op fuses
CELLS = [("gru", "tanh", "sigmoid"), ("simple_rnn", "tanh", "sigmoid"),
         ("gru", "relu", "hard_sigmoid"), ("simple_rnn", "relu", "sigmoid"),
         ("simple_rnn", "gelu", "sigmoid")]
CELL_IDS = ["-".join(c) for c in CELLS]


@pytest.mark.parametrize("dtype", ["float64", "float32", "half", "bfloat16"])
@pytest.mark.parametrize("time_major", [False, True], ids=["bm", "tm"])
@pytest.mark.parametrize("options", [(False, None), (True, "masks"), (False, "scalar")],
                         ids=["plain", "mask-zoneout", "zoneout-scalar"])
@pytest.mark.parametrize("cell", CELLS[:2], ids=CELL_IDS[:2])
def test_forward_equals_the_reference(rng, cell, options, time_major, dtype):
    inputs = case_inputs(rng, cell[0], time_major, *options)
    want = reference(inputs, LENGTHS, dtype, cell[0], time_major)
    args = op_args(inputs, LENGTHS, dtype, cell[0], time_major)
    tol = R.TOL[dtype] * (4 if dtype in ("half", "bfloat16") else 1)
    for training in (True, False):
        out = op("LayerNormRNN")(**args, is_training=training)
        for k, name in enumerate(("output", "output_h")):
            R.assert_close(tf.cast(out[k], tf.float64), want[name], tol, name)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("cell", CELLS[2:], ids=CELL_IDS[2:])
def test_other_activations_equal_the_reference(rng, cell, dtype):
    inputs = case_inputs(rng, cell[0], False, True, "masks")
    want = reference(inputs, LENGTHS, dtype, *cell[:1], False, *cell[1:])
    out = op("LayerNormRNN")(**op_args(inputs, LENGTHS, dtype, cell[0], False, *cell[1:]))
    for k, name in enumerate(("output", "output_h")):
        R.assert_close(tf.cast(out[k], tf.float64), want[name], R.TOL[dtype], name)


def _differentiable(args):
    from tf_lstm_ops._gradients.layer_norm_rnn import DIFFERENTIABLE

    return [args[k] for k in DIFFERENTIABLE]


def _loss(outputs, cot):
    return sum(tf.reduce_sum(tf.cast(o, tf.float64) * c) for o, c in zip(outputs, cot))


@pytest.mark.parametrize("time_major", [False, True], ids=["bm", "tm"])
@pytest.mark.parametrize("options", [(False, None), (True, "masks"), (False, "scalar")],
                         ids=["plain", "mask-zoneout", "zoneout-scalar"])
@pytest.mark.parametrize("cell", CELLS, ids=CELL_IDS)
def test_fused_gradients_equal_tensorflows_autodiff_and_the_reference(rng, cell, options,
                                                                     time_major):
    """The fused LayerNormRNNGrad against tf.GradientTape through the function built from
    TensorFlow ops and against the reference's chain rule, in float64: every input's gradient
    (a SimpleRNN's gamma_h, the empty vector, has none)."""
    from tf_lstm_ops._gradients.layer_norm_rnn import DIFFERENTIABLE, forward

    name, activation, recurrent_activation = cell
    inputs = case_inputs(rng, name, time_major, *options)
    args = op_args(inputs, LENGTHS, "float64", name, time_major, activation,
                   recurrent_activation)
    theta = _differentiable(args)
    out_shape = (T, B, H) if time_major else (B, T, H)
    cot = [rng.uniform(-1, 1, s) for s in (out_shape, (B, H))]
    grads = []
    for fn in (op("LayerNormRNN"), forward):
        with tf.GradientTape() as tape:
            tape.watch(theta)
            value = _loss(fn(**args)[:2], cot)
        grads.append(tape.gradient(value, theta,
                                   unconnected_gradients=tf.UnconnectedGradients.ZERO))
    x, h0, w, m, z = inputs
    want = LR.backward(name, x, h0, w, cot[0], cot[1], LENGTHS, EPS, time_major, m, z,
                       activation, recurrent_activation)
    for k, (got, autodiff) in enumerate(zip(*grads)):
        np.testing.assert_allclose(got, autodiff, atol=1e-12, rtol=1e-10)
        if DIFFERENTIABLE[k] in want:
            np.testing.assert_allclose(got, want[DIFFERENTIABLE[k]], atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("cell", ["gru", "simple_rnn"])
def test_first_and_second_order_gradients_in_float64(rng, cell):
    """compute_gradient against finite differences, through the Grad op (first order) and its
    gradient, the composite (second order)."""
    from conftest import assert_gradients_to_second_order

    args = op_args(case_inputs(rng, cell, False, True, "masks", batch=2, steps=3), [3, 2],
                   "float64", cell)
    dy = tf.constant(rng.uniform(-1, 1, (2, 3, H)))

    def loss(x, h, gamma_x):
        out = op("LayerNormRNN")(**dict(args, input=x, input_h=h, gamma_x=gamma_x))
        return tf.reduce_sum(out[0] * dy) + tf.reduce_sum(out[1] ** 2)

    assert_gradients_to_second_order(loss, [args["input"], args["input_h"], args["gamma_x"]])


@pytest.mark.parametrize("cell", ["gru", "simple_rnn"])
def test_a_training_false_forward_is_differentiable(rng, cell):
    """is_training=False keeps no reserve space; its gradient recomputes the training forward:
    the same gradients."""
    args = op_args(case_inputs(rng, cell), LENGTHS, "float64", cell)
    theta = _differentiable(args)
    grads = []
    for training in (True, False):
        with tf.GradientTape() as tape:
            tape.watch(theta)
            out = op("LayerNormRNN")(**args, is_training=training)
            value = tf.reduce_sum(out[0] ** 2) + tf.reduce_sum(out[1])
        grads.append(tape.gradient(value, theta))
        assert training or out[2].shape == (0,)
    for a, b in zip(*grads):
        if a is not None:
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("cell", ["gru", "simple_rnn"])
def test_float32_is_at_least_as_accurate_as_tensorflows(cell):
    """Against float64, the fused float32 forward and gradients err no more (RMS) than the same
    function computed by TensorFlow's float32 ops. Three steps of 3 x 512 rows: a norm's gain can
    exceed 1 (it rescales h·R to unit variance), so over long sequences a few rows amplify
    whatever rounding they got, and which computation that favours is luck; over a few steps
    the arithmetic itself is compared."""
    from tf_lstm_ops._gradients.layer_norm_rnn import forward

    errors, units, rows, steps = {}, 16, 512, 3
    for seed in range(3):
        local = np.random.default_rng(seed)
        inputs = case_inputs(local, cell, False, False, None, batch=rows, steps=steps,
                             units=units)
        cot = [local.uniform(-1, 1, (rows, steps, units)), local.uniform(-1, 1, (rows, units))]
        results = {}
        for name, fn, dtype in (("exact", forward, "float64"),
                                ("ours", op("LayerNormRNN"), "float32"),
                                ("tf", forward, "float32")):
            args = op_args(inputs, [steps] * rows, dtype, cell)
            theta = _differentiable(args)
            with tf.GradientTape() as tape:
                tape.watch(theta)
                outs = fn(**args)[:2]
                value = _loss(outs, cot)
            grads = tape.gradient(value, theta)
            results[name] = [np.asarray(v, np.float64)
                             for v in list(outs) + [g for g in grads if g is not None]]
        for name in ("ours", "tf"):
            rms = [np.sqrt(np.mean((a - b) ** 2)) if a.size else 0.0
                   for a, b in zip(results[name], results["exact"])]
            errors.setdefault(name, []).append(rms)
    ours, theirs = np.array(errors["ours"]), np.array(errors["tf"])
    assert np.all(ours.mean(0) <= theirs.mean(0) * 1.1), (ours.mean(0), theirs.mean(0))


def _bad_cases():
    G = 3 * H
    return [  # (id, cell, overrides, names)
        ("input-rank", "gru", dict(input=np.ones((B, T))), ["input"]),
        ("h-rank", "gru", dict(input_h=np.ones((1, B, H))), ["input_h"]),
        ("h-batch", "simple_rnn", dict(input_h=np.ones((B + 1, H))), ["input_h"]),
        ("kernel-rows", "gru", dict(kernel=np.ones((I + 1, G))), ["kernel"]),
        ("kernel-cols", "simple_rnn", dict(kernel=np.ones((I, G))), ["kernel"]),
        ("recurrent-shape", "gru", dict(recurrent_kernel=np.ones((G, H))), ["recurrent_kernel"]),
        ("gru-bias-rank", "gru", dict(bias=np.ones((G,))), ["bias"]),
        ("gru-bias-rows", "gru", dict(bias=np.ones((1, G))), ["bias"]),
        ("simple-bias-rank", "simple_rnn", dict(bias=np.ones((2, H))), ["bias"]),
        ("gamma_x", "gru", dict(gamma_x=np.ones((H,))), ["gamma_x"]),
        ("gamma_h", "gru", dict(gamma_h=np.ones((G + 1,))), ["gamma_h"]),
        ("gamma_h-rank", "gru", dict(gamma_h=np.ones(())), ["gamma_h"]),
        ("simple-gamma_h", "simple_rnn", dict(gamma_h=np.ones((H,))), ["gamma_h"]),
        ("simple-gamma_x", "simple_rnn", dict(gamma_x=np.ones((H + 1,))), ["gamma_x"]),
        ("lengths-shape", "gru", dict(sequence_lengths=np.full((B + 1,), T, np.int32)),
         ["sequence_lengths"]),
        ("lengths-value", "gru", dict(sequence_lengths=np.array([T, T + 1, 0, 1], np.int32)),
         ["sequence_lengths"]),
        ("negative-length", "simple_rnn",
         dict(sequence_lengths=np.array([T, -1, 0, 1], np.int32)), ["sequence_lengths"]),
        ("mask-shape", "gru", dict(recurrent_mask=np.ones((B, H + 1))), ["recurrent_mask"]),
        ("mask-rank", "simple_rnn", dict(recurrent_mask=np.ones((4, B, H))), ["recurrent_mask"]),
        ("zoneout-shape", "gru", dict(zoneout_weights=np.ones((T, B, H))), ["zoneout_weights"]),
        ("zoneout-rank", "simple_rnn", dict(zoneout_weights=np.ones((B, H))),
         ["zoneout_weights"]),
        ("epsilon-zero", "gru", dict(epsilon=0.0), ["epsilon"]),
        ("epsilon-nan", "simple_rnn", dict(epsilon=float("nan")), ["epsilon"]),
        ("activation", "gru", dict(activation="swish"), ["activation"]),
        ("recurrent-activation", "gru", dict(recurrent_activation="softmax"),
         ["recurrent_activation"]),
        ("simple-recurrent-activation", "simple_rnn", dict(recurrent_activation="tanh"),
         ["recurrent_activation"]),
    ]


BAD = _bad_cases()
_ATTRS = ("epsilon", "activation", "recurrent_activation")


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_inputs_are_invalid_arguments_naming_them(rng, case, mode):
    from test_cudnn_validation import expect_invalid

    _, cell, overrides, names = case
    kwargs = op_args(case_inputs(rng, cell), LENGTHS, "float32", cell)
    for k, v in overrides.items():
        kwargs[k] = v if k in _ATTRS else tf.constant(
            v, tf.int32 if k == "sequence_lengths" else tf.float32)
    expect_invalid(op("LayerNormRNN"), kwargs, mode, names)


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("cell", ["gru", "simple_rnn"])
def test_the_grad_op_rejects_bad_cotangents_and_lengths_naming_them(rng, cell, mode):
    """Wrong rank, wrong size, an empty dimension and an out-of-range length, eagerly and in a
    tf.function of unknown shapes: InvalidArgumentError naming the argument."""
    from test_cudnn_validation import expect_invalid

    args = op_args(case_inputs(rng, cell), LENGTHS, "float32", cell)
    out = op("LayerNormRNN")(**args)
    cot = dict(output_backprop=tf.ones_like(out[0]), output_h_backprop=tf.ones_like(out[1]),
               reserve_space=out[2])
    for override, name in [
        (dict(output_backprop=tf.ones([B, T, H, 1])), "output_backprop"),
        (dict(output_backprop=tf.ones([B, T, H + 1])), "output_backprop"),
        (dict(output_h_backprop=tf.ones([0, H])), "output_h_backprop"),
        (dict(output_h_backprop=tf.ones([B])), "output_h_backprop"),
        (dict(sequence_lengths=tf.constant([T + 1] * B, tf.int32)), "sequence_lengths"),
    ]:
        expect_invalid(op("LayerNormRNNGrad"), dict(args, **dict(cot, **override)), mode,
                       [name])


@pytest.mark.parametrize("cell", ["gru", "simple_rnn"])
def test_the_grad_op_checks_its_cotangents_and_reserve_space(rng, cell):
    args = op_args(case_inputs(rng, cell), LENGTHS, "float32", cell)
    out = op("LayerNormRNN")(**args)
    cot = dict(output_backprop=tf.ones_like(out[0]), output_h_backprop=tf.ones_like(out[1]),
               reserve_space=out[2])
    grad = op("LayerNormRNNGrad")
    grad(**args, **cot)  # (valid)
    bad = [
        (dict(cot, output_backprop=tf.ones([B, T + 1, H])), "output_backprop"),
        (dict(cot, output_h_backprop=tf.ones([B, H + 1])), "output_h_backprop"),
        (dict(cot, reserve_space=out[2][:-1]), "reserve_space"),
        (dict(cot, reserve_space=tf.zeros_like(out[2])), "reserve_space"),
    ]
    for kwargs, name in bad:
        with pytest.raises(tf.errors.InvalidArgumentError, match=name):
            grad(**args, **kwargs)
    # another configuration's reserve space (another activation) is rejected
    other = op("LayerNormRNN")(**dict(args, activation="relu"))
    with pytest.raises(tf.errors.InvalidArgumentError, match="reserve_space"):
        grad(**args, **dict(cot, reserve_space=other[2]))


@pytest.mark.parametrize("cell", ["gru", "simple_rnn"])
@pytest.mark.parametrize("sizes", [(0, 2, 3, 4), (3, 0, 3, 4), (3, 2, 0, 4), (3, 2, 3, 0)],
                         ids=["T0", "B0", "I0", "H0"])
def test_empty_dimensions(sizes, cell):
    steps, batch, inputs_, units = sizes
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (batch, steps, inputs_))
    h0 = rng.uniform(-1, 1, (batch, units))
    w = LR.random_weights(rng, cell, inputs_, units)
    kwargs = {k: tf.constant(v, tf.float64) for k, v in dict(input=x, input_h=h0, **w).items()}
    empty = tf.zeros([0], tf.float64)
    kwargs.setdefault("gamma_h", empty)
    kwargs.update(sequence_lengths=tf.fill([batch], steps), recurrent_mask=empty,
                  zoneout_weights=empty, cell=cell)
    theta = _differentiable(kwargs)
    with tf.GradientTape() as tape:
        tape.watch(theta)
        out = op("LayerNormRNN")(**kwargs)
        value = tf.reduce_sum(out[0]) + tf.reduce_sum(out[1] * 2)
    grads = tape.gradient(value, theta, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    want = LR.forward(cell, x, h0, w, [steps] * batch)
    for k, name in enumerate(("output", "output_h")):
        np.testing.assert_allclose(out[k], want[name], atol=1e-12)
    if steps == 0 or units == 0:  # the state passes through, the weights get nothing
        np.testing.assert_array_equal(grads[1], np.full((batch, units), 2.0))
        np.testing.assert_array_equal(grads[2], np.zeros_like(w["kernel"]))
