"""Keras' recurrent dropout on the fused kernel (docs/keras_layers.md §5): CudnnRNNV3Keras's
per-gate operand masks against the float64 reference written from the semantics
(tools/references/cudnn_rnn.py), first and second derivatives against finite differences, every
bad mask an InvalidArgumentError naming it; then Keras 3's and tf_keras' layers with
recurrent_dropout (and implementation=1 dropout) on the kernel, equal to Keras' own cell loop with
the same masks, injected or drawn from the same seed."""

import numpy as np
import pytest
import tensorflow as tf

from conftest import (assert_gradients_to_second_order, keras_backprop, keras_op_args,
                      tf_keras_dropout_masks)
from tools.references import cudnn_rnn as R

T, I, H = 5, 3, 4


def op(name):
    from tf_lstm_ops._loader import library

    return library.op(name)


def draw_masks(rng, cfg, B, which, rate=0.4):
    """{0, 1/(1-rate)} masks [G, B, width] for "input", "recurrent" or "both" (None where not)."""
    def draw(width):
        return (rng.uniform(size=(cfg.G, B, width)) >= rate) / (1.0 - rate)
    return (draw(cfg.I) if which in ("input", "both") else None,
            draw(cfg.Hr) if which in ("recurrent", "both") else None)


def op_args(cfg, inputs, lengths, masks, time_major, dtype):
    return keras_op_args(cfg, inputs, lengths, time_major, dtype, *masks)


def forward_and_backprop(args, cot, cfg, dtype):
    out = op("CudnnRNNV3Keras")(**args, is_training=True)
    return out, keras_backprop(args, out, cot, dtype)


CASES = [(R.Cfg(mode, 1, H, I), which) for mode in R.MODES
         for which in ("input", "recurrent", "both")]
CASES.append((R.Cfg("lstm", 1, H, I, activation="relu", recurrent_activation="hard_sigmoid"),
              "both"))
CASES.append((R.Cfg("gru", 1, H, I, activation="elu"), "recurrent"))


@pytest.mark.parametrize("dtype", ["float64", "float32", "half"])
@pytest.mark.parametrize("batch", [3, 6], ids=["B3", "B6"])  # B > 3: R packed per gate
@pytest.mark.parametrize("time_major", [True, False], ids=["tm", "bm"])
@pytest.mark.parametrize("case", CASES,
                         ids=["%s-%s%s" % (c.rnn_mode, w, "-" + c.activation if c.activation
                                            else "") for c, w in CASES])
def test_masked_forward_and_backprop_equal_the_reference(rng, case, time_major, batch, dtype):
    cfg, which = case
    inputs = R.random_inputs(rng, cfg, T, batch, time_major, scale=1.2)
    lengths = np.array([T, 2, 0, T, 4, 1][:batch])
    masks = draw_masks(rng, cfg, batch, which)
    cot = R.random_cotangents(rng, cfg, T, batch, time_major)
    if dtype == "half":  # the reference of the rounded inputs and masks
        inputs = R.rounded(inputs, dtype)
        masks = tuple(R.round_to(m, dtype) for m in masks)
    want = R.forward(cfg, inputs["input"], inputs["input_h"], inputs["input_c"], inputs["params"],
                     lengths, time_major, input_masks=masks[0], recurrent_masks=masks[1])
    want_grads = R.backward(cfg, inputs["input"], inputs["input_h"], inputs["input_c"],
                            inputs["params"], cot["dy"], cot["dh"], cot["dc"], lengths,
                            time_major, input_masks=masks[0], recurrent_masks=masks[1])
    args = op_args(cfg, inputs, lengths, masks, time_major, dtype)
    out, grads = forward_and_backprop(args, cot, cfg, dtype)
    tol = R.TOL[dtype] * (4 if dtype == "half" else 1)
    for name in ("output", "output_h", "output_c"):
        R.assert_close(getattr(out, name).numpy().astype(np.float64), want[name], tol, name)
    for name in ("input_backprop", "input_h_backprop", "input_c_backprop", "params_backprop"):
        R.assert_close(getattr(grads, name).numpy().astype(np.float64), want_grads[name],
                       tol * 4, name)
    # inference (no reserve space) applies the same masks
    infer = op("CudnnRNNV3Keras")(**args, is_training=False)
    R.assert_close(infer.output.numpy().astype(np.float64), want["output"], tol, "inference")


def test_masks_of_ones_are_no_masks(rng):
    """Multiplying by one is exact: masks of ones give V3's results bit for bit."""
    cfg = R.Cfg("lstm", 1, H, I)
    inputs = R.random_inputs(rng, cfg, T, 6)
    ones = (np.ones((4, 6, I)), np.ones((4, 6, H)))
    args = op_args(cfg, inputs, [T] * 6, ones, True, "float32")
    masked = op("CudnnRNNV3Keras")(**args)
    plain = op("CudnnRNNV3")(**{k: v for k, v in args.items()
                                if k not in ("input_masks", "recurrent_masks", "activation",
                                             "recurrent_activation", "zoneout_h_weights",
                                             "zoneout_c_weights", "reset_after")})
    np.testing.assert_array_equal(masked.output.numpy(), plain.output.numpy())


@pytest.mark.parametrize("cfg", [R.Cfg("lstm", 1, 3, 2), R.Cfg("gru", 1, 3, 2, activation="silu"),
                                 R.Cfg("rnn_tanh", 1, 3, 2)], ids=lambda c: c.rnn_mode)
def test_first_and_second_order_gradients_in_float64(rng, cfg):
    """compute_gradient through the fused Backprop (first order) and through its gradient, the
    composite of TensorFlow ops (second order), against finite differences."""
    inputs = R.random_inputs(rng, cfg, 3, 2, scale=1.2)
    x0, h0, p0 = (tf.constant(inputs[k]) for k in ("input", "input_h", "params"))
    c0 = tf.constant(inputs["input_c"] if cfg.is_lstm else np.zeros(()))
    masks = [tf.constant(m) for m in draw_masks(rng, cfg, 2, "both")]
    dy = tf.constant(rng.uniform(-1, 1, (3, 2, 3)))

    def loss(x, h, p):
        out = op("CudnnRNNV3Keras")(
            input=x, input_h=h, input_c=c0, params=p, sequence_lengths=tf.constant([3, 2]),
            input_masks=masks[0], recurrent_masks=masks[1], zoneout_h_weights=tf.zeros([0], x.dtype),
            zoneout_c_weights=tf.zeros([0], x.dtype), rnn_mode=cfg.rnn_mode,
            activation=cfg.activation, recurrent_activation=cfg.recurrent_activation)
        return tf.reduce_sum(out.output * dy) + tf.reduce_sum(out.output_h ** 2)

    assert_gradients_to_second_order(loss, [x0, h0, p0])


def _bad_mask_cases():
    lstm = R.Cfg("lstm", 1, H, I)
    return [
        # (id, cfg, overrides, names): each one bad mask or a model masks do not fit
        ("input-rank2", lstm, dict(input_masks=np.ones((4, 3))), ["input_masks"]),
        ("input-rank4", lstm, dict(input_masks=np.ones((4, 3, I, 1))), ["input_masks"]),
        ("input-vector", lstm, dict(input_masks=np.ones((3,))), ["input_masks"]),
        ("input-gates", lstm, dict(input_masks=np.ones((3, 3, I))), ["input_masks"]),
        ("input-batch", lstm, dict(input_masks=np.ones((4, 2, I))), ["input_masks"]),
        ("input-width", lstm, dict(input_masks=np.ones((4, 3, H))), ["input_masks"]),
        ("recurrent-width", lstm, dict(recurrent_masks=np.ones((4, 3, I))), ["recurrent_masks"]),
        ("recurrent-gates", R.Cfg("gru", 1, H, I), dict(recurrent_masks=np.ones((4, 3, H))),
         ["recurrent_masks"]),
        ("recurrent-scalar", lstm, dict(recurrent_masks=np.ones(())), ["recurrent_masks"]),
        ("two-layers", R.Cfg("lstm", 2, H, I), dict(recurrent_masks=np.ones((4, 3, H))),
         ["recurrent_masks"]),
        ("bidirectional", R.Cfg("gru", 1, H, I, "bidirectional"),
         dict(input_masks=np.ones((3, 3, I))), ["input_masks"]),
        ("skip-input", R.Cfg("rnn_tanh", 1, H, H, input_mode="skip_input"),
         dict(input_masks=np.ones((1, 3, H))), ["input_masks"]),
        ("projection", R.Cfg("lstm", 1, H, I, num_proj=2), dict(recurrent_masks=np.ones((4, 3, 2))),
         ["recurrent_masks"]),
    ]


BAD = _bad_mask_cases()


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_masks_are_invalid_arguments_naming_them(rng, case, mode):
    from test_cudnn_validation import expect_invalid

    _, cfg, overrides, names = case
    inputs = R.random_inputs(rng, cfg, T, 3)
    kwargs = op_args(cfg, inputs, [T] * 3, (None, None), True, "float32")
    kwargs.update(input_mode=cfg.input_mode, direction=cfg.direction, num_proj=cfg.num_proj)
    kwargs.update({k: tf.constant(v, tf.float32) for k, v in overrides.items()})
    expect_invalid(op("CudnnRNNV3Keras"), kwargs, mode, names)


def test_a_mask_of_another_dtype_is_rejected(rng):
    """TensorFlow's own type check, before the kernel: it names the input by position (#6 is
    recurrent_masks), as for every input of type T."""
    cfg = R.Cfg("lstm", 1, H, I)
    kwargs = op_args(cfg, R.random_inputs(rng, cfg, T, 3), [T] * 3, (None, None), True, "float32")
    kwargs["recurrent_masks"] = tf.ones([4, 3, H], tf.float64)
    with pytest.raises((TypeError, tf.errors.InvalidArgumentError),
                       match="recurrent_masks|input #6"):
        op("CudnnRNNV3Keras")(**kwargs)


def test_backprop_needs_the_forwards_masks(rng):
    """A reserve space from an unmasked forward is rejected by a masked Backprop, and the reverse
    (the saved activations are those of another function)."""
    cfg = R.Cfg("lstm", 1, H, I)
    inputs = R.random_inputs(rng, cfg, T, 3)
    cot = R.random_cotangents(rng, cfg, T, 3)
    masks = draw_masks(rng, cfg, 3, "recurrent")
    plain = op_args(cfg, inputs, [T] * 3, (None, None), True, "float32")
    masked = op_args(cfg, inputs, [T] * 3, masks, True, "float32")
    for forward_args, backward_args in ((plain, masked), (masked, plain)):
        out = op("CudnnRNNV3Keras")(**forward_args)
        with pytest.raises(tf.errors.InvalidArgumentError, match="reserve_space"):
            keras_backprop(backward_args, out, cot, tf.float32)


@pytest.mark.parametrize("sizes", [(0, 2, 3, 4), (3, 0, 3, 4), (3, 2, 0, 4), (3, 2, 3, 0)],
                         ids=["T0", "B0", "I0", "H0"])
def test_empty_dimensions_with_masks(sizes):
    T_, B_, I_, H_ = sizes
    cfg = R.Cfg("gru", 1, H_, I_)
    inputs = R.random_inputs(np.random.default_rng(0), cfg, T_, B_)
    masks = (np.ones((3, B_, I_)), np.ones((3, B_, H_)))
    out = op("CudnnRNNV3Keras")(**op_args(cfg, inputs, [T_] * B_, masks, True, "float32"))
    want = R.forward(cfg, inputs["input"], inputs["input_h"], inputs["input_c"],
                     inputs["params"], [T_] * B_)
    for name in ("output", "output_h"):
        np.testing.assert_allclose(getattr(out, name).numpy(), want[name], atol=1e-5)


# ---- the layers --------------------------------------------------------------------------------

LAYER_B, LAYER_T = 6, 5
DROPOUTS = [  # (dropout, recurrent_dropout, extra constructor args)
    (0.0, 0.3, {}), (0.4, 0.3, {}), (0.4, 0.0, dict(implementation=1))]


def _pre_padded_mask():
    lengths = np.array([5, 3, 0, 1, 4, 5])
    return np.arange(LAYER_T)[None, ::-1] < lengths[:, None]


def _per_gate(rng, count, shape, rate):
    def one():
        return tf.constant((rng.uniform(size=shape) >= rate) / (1.0 - rate))
    return [one() for _ in range(count)] if count else one()


def _outputs_and_grads(layer, x, mask, cot, before_call=None):
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        if before_call:
            before_call(layer)
        outs = layer(x, mask=None if mask is None else tf.constant(mask), training=True)
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        loss = sum(tf.reduce_sum(o * c) for o, c in zip(outs, cot))
    grads = tape.gradient(loss, [x] + layer.trainable_weights)
    return [np.asarray(v) for v in outs + grads]


KERAS3_CASES = [(kind, dropouts) for kind in ("LSTM", "GRU", "SimpleRNN") for dropouts in DROPOUTS
                if kind != "SimpleRNN" or not dropouts[2]]  # (SimpleRNN: one input mask)


@pytest.mark.parametrize("go_backwards", [False, True])
@pytest.mark.parametrize("kind, dropouts", KERAS3_CASES,
                         ids=["%s-%s-%s" % (k, d[0], d[1]) for k, d in KERAS3_CASES])
def test_keras3_layers_apply_keras_masks_on_the_kernel(rng, caplog, kind, dropouts, go_backwards):
    """The masks injected into Keras 3's cell (cell._dropout_mask / _recurrent_dropout_mask): ours
    runs the kernel (no fallback) and equals Keras' own cell loop (use_cudnn=False) in float64,
    with a pre-padded step mask: outputs, final states, gradients of the input and weights.
    Keras' LSTM/GRU with implementation=1 and input dropout alone crash in training (its cuDNN
    path broadcasts a list of masks): that case compares with its cell loop only."""
    keras = pytest.importorskip("keras")
    import tf_lstm_ops.keras as tlk

    dropout, recurrent, extra = dropouts
    gated = kind != "SimpleRNN"
    kw = dict(return_sequences=True, return_state=True, go_backwards=go_backwards,
              dropout=dropout, recurrent_dropout=recurrent, dtype="float64", **extra)
    ours = getattr(tlk, kind)(H, **kw)
    theirs = getattr(keras.layers, kind)(H, **kw, **(dict(use_cudnn=False) if gated else {}))
    for layer in (ours, theirs):
        layer.build((None, LAYER_T, I))
    theirs.set_weights([rng.uniform(-0.7, 0.7, w.shape) for w in ours.get_weights()])
    ours.set_weights(theirs.get_weights())
    count = {"LSTM": 4, "GRU": 3}.get(kind)
    input_mask = _per_gate(rng, count, (LAYER_B, I), dropout) if dropout else None
    recurrent_mask = _per_gate(rng, count, (LAYER_B, H), recurrent) if recurrent else None

    def inject(layer):
        layer.cell._dropout_mask = input_mask
        layer.cell._recurrent_dropout_mask = recurrent_mask

    x = rng.uniform(-1, 1, (LAYER_B, LAYER_T, I))
    cot = [rng.uniform(-1, 1, (LAYER_B, LAYER_T, H))] + [
        rng.uniform(-1, 1, (LAYER_B, H)) for _ in range(2 if kind == "LSTM" else 1)]
    with caplog.at_level("INFO", logger="tf_lstm_ops"):
        got = _outputs_and_grads(ours, x, _pre_padded_mask(), cot, inject)
    assert "tf_lstm_ops" not in caplog.text
    want = _outputs_and_grads(theirs, x, _pre_padded_mask(), cot, inject)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, atol=1e-10, rtol=1e-9)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "SimpleRNN"])
def test_keras3_same_seed_same_masks(rng, kind):
    """After keras.utils.set_random_seed, ours and Keras' draw the same masks in the same order
    (no injection): equal results, in a tf.function and inside Bidirectional, over two calls
    (fresh masks each)."""
    keras = pytest.importorskip("keras")
    import tf_lstm_ops.keras as tlk

    kw = dict(return_sequences=True, dropout=0.3, recurrent_dropout=0.4, dtype="float64")
    gated = kind != "SimpleRNN"
    keras.utils.set_random_seed(7)
    ours = keras.layers.Bidirectional(getattr(tlk, kind)(H, **kw))
    keras.utils.set_random_seed(7)
    theirs = keras.layers.Bidirectional(
        getattr(keras.layers, kind)(H, **kw, **(dict(use_cudnn=False) if gated else {})))
    x = tf.constant(rng.uniform(-1, 1, (LAYER_B, LAYER_T, I)))
    for layer in (ours, theirs):
        layer.build(x.shape)
    ours.set_weights(theirs.get_weights())
    calls = [tf.function(lambda v, layer=layer: layer(v, training=True))
             for layer in (ours, theirs)]
    first = [np.asarray(call(x)) for call in calls]
    second = [np.asarray(call(x)) for call in calls]
    np.testing.assert_allclose(first[0], first[1], atol=1e-10)
    np.testing.assert_allclose(second[0], second[1], atol=1e-10)
    assert not np.allclose(first[0], second[0])  # a new set of masks per call


TF_KERAS_CASES = [  # (kind, constructor args): each on tf_keras' per-step loop
    ("LSTM", dict(recurrent_dropout=0.3)),
    ("LSTM", dict(dropout=0.4, recurrent_dropout=0.3, go_backwards=True)),
    ("LSTM", dict(dropout=0.4, implementation=1, use_bias=False)),
    ("GRU", dict(dropout=0.4, recurrent_dropout=0.3, activation="relu")),
    ("GRU", dict(dropout=0.4, implementation=1, activation="elu")),
    ("SimpleRNN", dict(dropout=0.4, recurrent_dropout=0.3)),
]


@pytest.mark.parametrize("case", TF_KERAS_CASES,
                         ids=["%s-%s" % (k, "-".join(sorted(a))) for k, a in TF_KERAS_CASES])
def test_tf_keras_layers_apply_its_masks_on_the_kernel(rng, caplog, case):
    """tf_keras' cell masks (get_dropout_mask_for_cell / get_recurrent_dropout_mask_for_cell
    patched to fixed per-gate masks): ours runs the kernel and equals tf_keras' layer in float64,
    with a pre-padded step mask: outputs, final states and gradients."""
    tf_keras = pytest.importorskip("tf_keras")
    import tf_lstm_ops.tf_keras as tlk2

    kind, args = case
    kw = dict(return_sequences=True, return_state=True, dtype="float64", **args)
    ours, theirs = getattr(tlk2, kind)(H, **kw), getattr(tf_keras.layers, kind)(H, **kw)
    for layer in (ours, theirs):
        layer.build((None, LAYER_T, I))
    theirs.set_weights([rng.uniform(-0.7, 0.7, w.shape) for w in ours.get_weights()])
    ours.set_weights(theirs.get_weights())
    drawn = {}

    def fixed(key, shape, count):
        if key not in drawn:
            drawn[key] = _per_gate(rng, count if count > 1 else None, tuple(shape), 0.4)
        return drawn[key]

    def input_masks(self, inputs, training, count=1):
        return fixed("input", inputs.shape, count) if self.dropout else None

    def recurrent_masks(self, inputs, training, count=1):
        return fixed("recurrent", inputs.shape, count) if self.recurrent_dropout else None

    x = rng.uniform(-1, 1, (LAYER_B, LAYER_T, I))
    cot = [rng.uniform(-1, 1, (LAYER_B, LAYER_T, H))] + [
        rng.uniform(-1, 1, (LAYER_B, H)) for _ in range(2 if kind == "LSTM" else 1)]
    with tf_keras_dropout_masks(theirs.cell, input_masks, recurrent_masks):
        with caplog.at_level("INFO", logger="tf_lstm_ops"):
            got = _outputs_and_grads(ours, x, _pre_padded_mask(), cot)
        want = _outputs_and_grads(theirs, x, _pre_padded_mask(), cot)
    assert "tf_lstm_ops" not in caplog.text
    assert drawn, "no mask was drawn"
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, atol=1e-10, rtol=1e-9)


@pytest.mark.parametrize("kind, args", [
    ("LSTM", dict(dropout=0.3, recurrent_dropout=0.4)),
    ("GRU", dict(dropout=0.3, recurrent_dropout=0.4, reset_after=False)),
    ("SimpleRNN", dict(dropout=0.3, recurrent_dropout=0.4)),
], ids=["LSTM", "GRU-reset-before", "SimpleRNN"])
def test_tf_keras_same_seed_same_masks(rng, kind, args):
    """After tf_keras.utils.set_random_seed, ours and tf_keras' draw the same masks (no
    injection): equal outputs while training."""
    tf_keras = pytest.importorskip("tf_keras")
    import tf_lstm_ops.tf_keras as tlk2

    kw = dict(return_sequences=True, dtype="float64", **args)
    ours, theirs = getattr(tlk2, kind)(H, **kw), getattr(tf_keras.layers, kind)(H, **kw)
    x = tf.constant(rng.uniform(-1, 1, (LAYER_B, LAYER_T, I)))
    for layer in (ours, theirs):
        layer.build(x.shape)
    ours.set_weights(theirs.get_weights())
    outs = []
    for layer in (ours, theirs):
        tf_keras.utils.set_random_seed(3)
        outs.append(layer(x, training=True).numpy())
    np.testing.assert_allclose(outs[0], outs[1], atol=1e-12)
    tf_keras.utils.set_random_seed(4)
    assert not np.allclose(ours(x, training=True).numpy(), outs[0])  # the masks do act
