"""A GRU resetting before its recurrent product (Keras' GRU(reset_after=False); docs/cudnn_rnn.md
§4.8) on the fused kernel: CudnnRNNV3Keras with reset_after=false against the float64 reference
written from the semantics (tools/references/cudnn_rnn.py), with sequence lengths, both layouts,
several layers and directions, Keras' activations and recurrent dropout masks; first and second
derivatives against finite differences; bad attributes; and Keras 3's and tf_keras' GRU layers
with reset_after=False on the kernel, equal to their own."""

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


def op_args(cfg, inputs, lengths, masks, time_major, dtype):
    return keras_op_args(cfg, inputs, lengths, time_major, dtype, *masks)


CASES = [  # (cfg, masks: "none", "recurrent" or "both")
    (R.Cfg("gru", 1, H, I, reset_after=False), "none"),
    (R.Cfg("gru", 1, H, I, reset_after=False), "recurrent"),
    (R.Cfg("gru", 1, H, I, reset_after=False), "both"),
    (R.Cfg("gru", 1, H, I, activation="relu", recurrent_activation="hard_sigmoid",
           reset_after=False), "both"),
    (R.Cfg("gru", 2, H, I, "bidirectional", reset_after=False), "none"),
    (R.Cfg("gru", 2, H, I, "bidirectional", activation="elu", reset_after=False), "none"),
]


@pytest.mark.parametrize("dtype", ["float64", "float32", "half"])
@pytest.mark.parametrize("batch", [3, 6], ids=["B3", "B6"])  # B > 3: R packed per gate
@pytest.mark.parametrize("time_major", [True, False], ids=["tm", "bm"])
@pytest.mark.parametrize("case", CASES, ids=["L%d-%s-%s-%s" % (c.L, c.direction[:3],
                                                                c.activation or "tanh", w)
                                             for c, w in CASES])
def test_forward_and_backprop_equal_the_reference(rng, case, time_major, batch, dtype):
    cfg, which = case
    inputs = R.random_inputs(rng, cfg, T, batch, time_major, scale=1.2)
    lengths = np.array([T, 2, 0, T, 4, 1][:batch])
    masks = (
        (rng.uniform(size=(3, batch, I)) >= 0.4) / 0.6 if which == "both" else None,
        (rng.uniform(size=(3, batch, H)) >= 0.4) / 0.6 if which != "none" else None)
    cot = R.random_cotangents(rng, cfg, T, batch, time_major)
    if dtype == "half":  # the reference of the rounded inputs and masks
        inputs = R.rounded(inputs, dtype)
        masks = tuple(R.round_to(m, dtype) for m in masks)
    want = R.forward(cfg, inputs["input"], inputs["input_h"], None, inputs["params"], lengths,
                     time_major, input_masks=masks[0], recurrent_masks=masks[1])
    want_grads = R.backward(cfg, inputs["input"], inputs["input_h"], None, inputs["params"],
                            cot["dy"], cot["dh"], None, lengths, time_major,
                            input_masks=masks[0], recurrent_masks=masks[1])
    args = op_args(cfg, inputs, lengths, masks, time_major, dtype)
    out = op("CudnnRNNV3Keras")(**args)
    grads = keras_backprop(args, out, cot, dtype)
    tol = R.TOL[dtype] * (4 if dtype == "half" else 1)
    for name in ("output", "output_h"):
        R.assert_close(getattr(out, name).numpy().astype(np.float64), want[name], tol, name)
    for name in ("input_backprop", "input_h_backprop", "params_backprop"):
        R.assert_close(getattr(grads, name).numpy().astype(np.float64), want_grads[name],
                       tol * 4, name)
    infer = op("CudnnRNNV3Keras")(**args, is_training=False)  # saves nothing: same outputs
    R.assert_close(infer.output.numpy().astype(np.float64), want["output"], tol, "inference")


def test_resetting_before_is_another_function(rng):
    """The same weights give other results than cuDNN's GRU (the test above could otherwise pass
    on a kernel that ignores the attribute), and a Backprop told the other reset rejects the
    forward's reserve space."""
    cfg = R.Cfg("gru", 1, H, I, reset_after=False)
    inputs = R.random_inputs(rng, cfg, T, 3, scale=1.2)
    before = op_args(cfg, inputs, [T] * 3, (None, None), True, "float64")
    after = dict(before, reset_after=True)
    out_before, out_after = (op("CudnnRNNV3Keras")(**a) for a in (before, after))
    assert np.max(np.abs(out_before.output.numpy() - out_after.output.numpy())) > 1e-3
    with pytest.raises(tf.errors.InvalidArgumentError, match="reserve_space"):
        op("CudnnRNNBackpropV3Keras")(
            **after, output=out_before.output, output_h=out_before.output_h,
            output_c=out_before.output_c, output_backprop=tf.ones_like(out_before.output),
            output_h_backprop=tf.ones_like(out_before.output_h),
            output_c_backprop=tf.constant(0.0, tf.float64), reserve_space=out_before.reserve_space,
            host_reserved=out_before.host_reserved)


@pytest.mark.parametrize("rnn_mode", ["lstm", "rnn_tanh", "rnn_relu"])
def test_reset_after_false_is_for_gru_only(rnn_mode):
    with pytest.raises(tf.errors.InvalidArgumentError, match="reset_after"):
        op("CudnnRNNV3Keras")(
            input=tf.zeros([2, 1, 3]), input_h=tf.zeros([1, 1, 4]), input_c=tf.zeros([1, 1, 4]),
            params=tf.zeros([200]), sequence_lengths=tf.constant([2]), input_masks=tf.zeros([0]),
            recurrent_masks=tf.zeros([0]), zoneout_h_weights=tf.zeros([0]),
            zoneout_c_weights=tf.zeros([0]), rnn_mode=rnn_mode, reset_after=False)


@pytest.mark.parametrize("masked", [False, True], ids=["plain", "masked"])
def test_first_and_second_order_gradients_in_float64(rng, masked):
    """compute_gradient through the fused Backprop and through its gradient (the composite)."""
    cfg = R.Cfg("gru", 1, 3, 2, activation="silu", reset_after=False)
    inputs = R.random_inputs(rng, cfg, 3, 2, scale=1.2)
    x0, h0, p0 = (tf.constant(inputs[k]) for k in ("input", "input_h", "params"))
    masks = [tf.zeros([0], tf.float64), tf.zeros([0], tf.float64)]
    if masked:
        masks = [tf.constant((rng.uniform(size=(3, 2, n)) >= 0.4) / 0.6) for n in (2, 3)]
    dy = tf.constant(rng.uniform(-1, 1, (3, 2, 3)))

    def loss(x, h, p):
        out = op("CudnnRNNV3Keras")(
            input=x, input_h=h, input_c=tf.constant(0.0, tf.float64), params=p,
            sequence_lengths=tf.constant([3, 2]), input_masks=masks[0],
            recurrent_masks=masks[1], zoneout_h_weights=tf.zeros([0], tf.float64),
            zoneout_c_weights=tf.zeros([0], tf.float64), rnn_mode="gru", activation="silu",
            reset_after=False)
        return tf.reduce_sum(out.output * dy) + tf.reduce_sum(out.output_h ** 2)

    assert_gradients_to_second_order(loss, [x0, h0, p0])


# ---- the layers --------------------------------------------------------------------------------

B, STEPS = 6, 5


def _mask():
    lengths = np.array([5, 3, 0, 1, 4, 5])
    return np.arange(STEPS)[None, ::-1] < lengths[:, None]  # pre-padded


def _outputs_and_grads(layer, x, cot, training=False):
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        outs = layer(x, mask=tf.constant(_mask()), training=training)
        loss = sum(tf.reduce_sum(o * c) for o, c in zip(outs, cot))
    grads = tape.gradient(loss, [x] + layer.trainable_weights)
    return [np.asarray(v) for v in list(outs) + grads]


def _setup(rng, ours_cls, theirs_cls, kw):
    """Ours and theirs as GRU(reset_after=False, **kw) with the same random weights, an input
    and the cotangents of (sequence, state)."""
    args = dict(reset_after=False, return_sequences=True, return_state=True, dtype="float64",
                **kw)
    ours, theirs = ours_cls(H, **args), theirs_cls(H, **args)
    for layer in (ours, theirs):
        layer.build((None, STEPS, I))
    theirs.set_weights([rng.uniform(-0.8, 0.8, w.shape) for w in ours.get_weights()])
    ours.set_weights(theirs.get_weights())
    if kw.get("use_bias", True):
        assert ours.get_weights()[-1].shape == (3 * H,)  # one bias row, as Keras'
    x = rng.uniform(-1, 1, (B, STEPS, I))
    cot = [rng.uniform(-1, 1, (B, STEPS, H)), rng.uniform(-1, 1, (B, H))]
    return ours, theirs, x, cot


@pytest.mark.parametrize("kw", [dict(), dict(go_backwards=True, activation="relu"),
                                dict(use_bias=False)], ids=["default", "backwards-relu", "nobias"])
def test_keras3_gru_reset_after_false_runs_the_kernel(rng, caplog, kw):
    keras = pytest.importorskip("keras")
    import tf_lstm_ops.keras as tlk

    ours, theirs, x, cot = _setup(rng, tlk.GRU, keras.layers.GRU, kw)
    with caplog.at_level("INFO", logger="tf_lstm_ops"):
        got = _outputs_and_grads(ours, x, cot)
    assert "tf_lstm_ops" not in caplog.text
    for a, b in zip(got, _outputs_and_grads(theirs, x, cot)):
        np.testing.assert_allclose(a, b, atol=1e-10, rtol=1e-9)


@pytest.mark.parametrize("kw", [dict(),
                                dict(go_backwards=True, dropout=0.3, recurrent_dropout=0.3)],
                         ids=["default", "backwards-dropout"])
def test_tf_keras_gru_reset_after_false_runs_the_kernel(rng, caplog, kw):
    tf_keras = pytest.importorskip("tf_keras")
    import tf_lstm_ops.tf_keras as tlk2

    ours, theirs, x, cot = _setup(rng, tlk2.GRU, tf_keras.layers.GRU, kw)
    drawn = {}

    def fixed(self, inputs, training, count=1):  # the same masks for both layers
        key = tuple(inputs.shape)
        if key not in drawn:
            drawn[key] = [tf.constant((rng.uniform(size=key) >= 0.3) / 0.7) for _ in range(count)]
        return drawn[key]

    with tf_keras_dropout_masks(theirs.cell, fixed, fixed):
        with caplog.at_level("INFO", logger="tf_lstm_ops"):
            got = _outputs_and_grads(ours, x, cot, training=True)
        want = _outputs_and_grads(theirs, x, cot, training=True)
    assert "tf_lstm_ops" not in caplog.text
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, atol=1e-10, rtol=1e-9)
