"""Zoneout on the fused kernel (docs/cudnn_rnn.md §4.9, docs/keras_layers.md §7):
CudnnRNNV3Keras's zoneout weights against the float64 reference written from the semantics
(tools/references/cudnn_rnn.py), exact structure checks (weights of one and zero), first and
second derivatives against finite differences, every bad weight tensor an InvalidArgumentError
naming it; then the zoneout arguments of the Keras 3 and tf_keras layers against the same
formulas built from TensorFlow ops in a keras.layers.RNN cell (the construction of Tacotron 2's
and the zoneout authors' cells), their masks, configs and refusals."""

import numpy as np
import pytest
import tensorflow as tf

from conftest import assert_gradients_to_second_order, keras_backprop, keras_op_args
from tools.references import cudnn_rnn as R

T, I, H = 5, 3, 4


def op(name):
    from tf_lstm_ops._loader import library

    return library.op(name)


def draw_weights(rng, cfg, B, which, per_element, time_major, steps=T):
    """(zoneout_h, zoneout_c) weights for "h", "c" or "both": keep-new 0/1 masks per element (in
    the input's layout), or one scalar each; None where not zoned."""
    shape = (steps, B, cfg.H) if time_major else (B, steps, cfg.H)

    def draw(rate):
        if not per_element:
            return np.float64(1.0 - rate)
        return (rng.uniform(size=shape) >= rate).astype(np.float64)
    return (draw(0.3) if which in ("h", "both") else None,
            draw(0.4) if which in ("c", "both") else None)


def forward_and_backprop(args, cot, cfg, dtype):
    out = op("CudnnRNNV3Keras")(**args, is_training=True)
    return out, keras_backprop(args, out, cot, dtype)


CASES = [(R.Cfg("lstm", 1, H, I), which) for which in ("h", "c", "both")]
CASES += [(R.Cfg(mode, 1, H, I), "h") for mode in ("gru", "rnn_tanh", "rnn_relu")]
CASES += [
    (R.Cfg("gru", 1, H, I, reset_after=False), "h"),
    (R.Cfg("lstm", 1, H, I, activation="relu", recurrent_activation="hard_sigmoid"), "both"),
    (R.Cfg("rnn_tanh", 1, H, I, activation="silu"), "h"),
]


def case_id(case):
    cfg, which = case
    return "-".join([cfg.rnn_mode, which] + ([cfg.activation] if cfg.activation else [])
                    + ([] if cfg.reset_after else ["reset_before"]))


@pytest.mark.parametrize("dtype", ["float64", "float32", "half"])
@pytest.mark.parametrize("batch", [3, 6], ids=["B3", "B6"])
@pytest.mark.parametrize("time_major", [True, False], ids=["tm", "bm"])
@pytest.mark.parametrize("per_element", [True, False], ids=["masks", "scalar"])
@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_zoned_forward_and_backprop_equal_the_reference(rng, case, per_element, time_major,
                                                         batch, dtype):
    cfg, which = case
    inputs = R.random_inputs(rng, cfg, T, batch, time_major, scale=1.2)
    lengths = np.array([T, 2, 0, T, 4, 1][:batch])
    zoneout = draw_weights(rng, cfg, batch, which, per_element, time_major)
    # with recurrent dropout too, on half the cases
    masks = (None, (rng.uniform(size=(cfg.G, batch, H)) >= 0.3) / 0.7 if batch == 6 else None)
    cot = R.random_cotangents(rng, cfg, T, batch, time_major)
    if dtype == "half":  # the reference of the rounded inputs and weights
        inputs = R.rounded(inputs, dtype)
        zoneout = tuple(None if w is None else R.round_to(w, dtype) for w in zoneout)
        masks = tuple(None if m is None else R.round_to(m, dtype) for m in masks)
    kw = dict(input_masks=masks[0], recurrent_masks=masks[1], zoneout_h=zoneout[0],
              zoneout_c=zoneout[1])
    want = R.forward(cfg, inputs["input"], inputs["input_h"], inputs["input_c"],
                     inputs["params"], lengths, time_major, **kw)
    want_grads = R.backward(cfg, inputs["input"], inputs["input_h"], inputs["input_c"],
                            inputs["params"], cot["dy"], cot["dh"], cot["dc"], lengths,
                            time_major, **kw)
    args = keras_op_args(cfg, inputs, lengths, time_major, dtype, *masks, *zoneout)
    out, grads = forward_and_backprop(args, cot, cfg, dtype)
    tol = R.TOL[dtype] * (4 if dtype == "half" else 1)
    for name in ("output", "output_h", "output_c"):
        R.assert_close(getattr(out, name).numpy().astype(np.float64), want[name], tol, name)
    for name in ("input_backprop", "input_h_backprop", "input_c_backprop", "params_backprop"):
        R.assert_close(getattr(grads, name).numpy().astype(np.float64), want_grads[name],
                       tol * 4, name)
    # inference (no reserve space) zones the same way
    infer = op("CudnnRNNV3Keras")(**args, is_training=False)
    R.assert_close(infer.output.numpy().astype(np.float64), want["output"], tol, "inference")


@pytest.mark.parametrize("mode", R.MODES)
def test_weights_of_one_are_no_zoneout_and_of_zero_hold_the_state(rng, mode):
    """w·new + (1 - w)·previous is exact at w = 1 (the new state, bit for bit) and w = 0 (the
    previous one): the unzoned op's results, and then h0 (c0) at every step."""
    cfg = R.Cfg(mode, 1, H, I)
    inputs = R.random_inputs(rng, cfg, T, 6)
    both = (1, 1) if cfg.is_lstm else (1, None)
    plain = op("CudnnRNNV3Keras")(**keras_op_args(cfg, inputs, [T] * 6, True, "float32"))
    for per_element in (True, False):
        ones = [None if w is None else np.ones((T, 6, H)) if per_element else np.float64(1)
                for w in both]
        zoned = op("CudnnRNNV3Keras")(**keras_op_args(cfg, inputs, [T] * 6, True, "float32",
                                                      None, None, *ones))
        for name in ("output", "output_h", "output_c"):
            np.testing.assert_array_equal(getattr(zoned, name), getattr(plain, name))
    zeros = [None if w is None else np.float64(0) for w in both]
    held = op("CudnnRNNV3Keras")(**keras_op_args(cfg, inputs, [T] * 6, True, "float32", None,
                                                 None, *zeros))
    h0 = tf.constant(inputs["input_h"], tf.float32)
    np.testing.assert_array_equal(held.output, tf.broadcast_to(h0, held.output.shape))
    np.testing.assert_array_equal(held.output_h, h0)
    if cfg.is_lstm:
        np.testing.assert_array_equal(held.output_c, tf.constant(inputs["input_c"], tf.float32))


def test_zoning_c_leaves_the_new_h_from_the_unzoned_c(rng):
    """One step from h0 = c0 = 0 with c fully zoned (w_c = 0): c stays 0, while h is
    o·tanh(c~) of the new, unzoned c~ (zoneout keeps c's previous value, not h's input)."""
    cfg = R.Cfg("lstm", 1, H, I)
    inputs = R.random_inputs(rng, cfg, 1, 3)
    inputs["input_h"] = np.zeros_like(inputs["input_h"])
    inputs["input_c"] = np.zeros_like(inputs["input_c"])
    zoned = op("CudnnRNNV3Keras")(**keras_op_args(cfg, inputs, [1] * 3, True, "float64", None,
                                                  None, None, np.float64(0)))
    plain = op("CudnnRNNV3Keras")(**keras_op_args(cfg, inputs, [1] * 3, True, "float64"))
    np.testing.assert_array_equal(zoned.output_c, np.zeros((1, 3, H)))
    np.testing.assert_array_equal(zoned.output, plain.output)
    assert np.abs(plain.output_c.numpy()).min() > 0


@pytest.mark.parametrize("cfg", [R.Cfg("lstm", 1, 3, 2), R.Cfg("gru", 1, 3, 2, activation="silu"),
                                 R.Cfg("gru", 1, 3, 2, reset_after=False),
                                 R.Cfg("rnn_tanh", 1, 3, 2)],
                         ids=["lstm", "gru", "gru-reset-before", "rnn_tanh"])
@pytest.mark.parametrize("per_element", [True, False], ids=["masks", "scalar"])
def test_first_and_second_order_gradients_in_float64(rng, cfg, per_element):
    """compute_gradient through the fused Backprop (first order) and through its gradient, the
    composite of TensorFlow ops (second order), against finite differences."""
    inputs = R.random_inputs(rng, cfg, 3, 2, scale=1.2)
    x0, h0, p0 = (tf.constant(inputs[k]) for k in ("input", "input_h", "params"))
    c0 = tf.constant(inputs["input_c"] if cfg.is_lstm else np.zeros(()))
    zh, zc = draw_weights(rng, cfg, 2, "both" if cfg.is_lstm else "h", per_element, True, 3)
    zh, zc = (tf.constant(np.zeros([0]) if w is None else w) for w in (zh, zc))
    dy = tf.constant(rng.uniform(-1, 1, (3, 2, 3)))

    def loss(x, h, p):
        out = op("CudnnRNNV3Keras")(
            input=x, input_h=h, input_c=c0, params=p, sequence_lengths=tf.constant([3, 2]),
            input_masks=tf.zeros([0], tf.float64), recurrent_masks=tf.zeros([0], tf.float64),
            zoneout_h_weights=zh, zoneout_c_weights=zc, rnn_mode=cfg.rnn_mode,
            activation=cfg.activation, recurrent_activation=cfg.recurrent_activation,
            reset_after=cfg.reset_after)
        return (tf.reduce_sum(out.output * dy) + tf.reduce_sum(out.output_h ** 2)
                + tf.reduce_sum(out.output_c ** 2))

    assert_gradients_to_second_order(loss, [x0, h0, p0])


def _bad_weight_cases():
    lstm, gru = R.Cfg("lstm", 1, H, I), R.Cfg("gru", 1, H, I)
    return [
        # (id, cfg, overrides, names): each one bad weight tensor, or a model zoneout does not fit
        ("h-rank2", lstm, dict(zoneout_h_weights=np.ones((T, 3))), ["zoneout_h_weights"]),
        ("h-rank4", lstm, dict(zoneout_h_weights=np.ones((T, 3, H, 1))), ["zoneout_h_weights"]),
        ("h-vector", lstm, dict(zoneout_h_weights=np.ones((1,))), ["zoneout_h_weights"]),
        ("h-time", lstm, dict(zoneout_h_weights=np.ones((T + 1, 3, H))), ["zoneout_h_weights"]),
        ("h-batch", lstm, dict(zoneout_h_weights=np.ones((T, 2, H))), ["zoneout_h_weights"]),
        ("h-units", lstm, dict(zoneout_h_weights=np.ones((T, 3, I))), ["zoneout_h_weights"]),
        ("h-batch-major", lstm, dict(zoneout_h_weights=np.ones((3, T, H))),
         ["zoneout_h_weights"]),
        ("c-units", lstm, dict(zoneout_c_weights=np.ones((T, 3, H + 1))), ["zoneout_c_weights"]),
        ("c-on-gru", gru, dict(zoneout_c_weights=np.ones(())), ["zoneout_c_weights"]),
        ("two-layers", R.Cfg("lstm", 2, H, I), dict(zoneout_h_weights=np.ones(())),
         ["zoneout_h_weights"]),
        ("bidirectional", R.Cfg("gru", 1, H, I, "bidirectional"),
         dict(zoneout_h_weights=np.ones((T, 3, H))), ["zoneout_h_weights"]),
        ("skip-input", R.Cfg("rnn_tanh", 1, H, H, input_mode="skip_input"),
         dict(zoneout_h_weights=np.ones(())), ["zoneout_h_weights"]),
        ("projection", R.Cfg("lstm", 1, H, I, num_proj=2), dict(zoneout_c_weights=np.ones(())),
         ["zoneout_c_weights"]),
    ]


BAD = _bad_weight_cases()


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_zoneout_weights_are_invalid_arguments_naming_them(rng, case, mode):
    from test_cudnn_validation import expect_invalid

    _, cfg, overrides, names = case
    inputs = R.random_inputs(rng, cfg, T, 3)
    kwargs = keras_op_args(cfg, inputs, [T] * 3, True, "float32")
    kwargs.update(input_mode=cfg.input_mode, direction=cfg.direction, num_proj=cfg.num_proj)
    kwargs.update({k: tf.constant(v, tf.float32) for k, v in overrides.items()})
    expect_invalid(op("CudnnRNNV3Keras"), kwargs, mode, names)


def test_backprop_needs_the_forwards_zoneout(rng):
    """A Backprop given other zoneout weights' kind (none, scalar, per element) than the
    forward's rejects its reserve space: the saved states are those of another function."""
    cfg = R.Cfg("lstm", 1, H, I)
    inputs = R.random_inputs(rng, cfg, T, 3)
    cot = R.random_cotangents(rng, cfg, T, 3)
    kinds = [keras_op_args(cfg, inputs, [T] * 3, True, "float32", None, None, *w)
             for w in ((None, None), (np.float64(0.9), None), (np.ones((T, 3, H)), None),
                       (None, np.float64(0.9)))]
    for forward_args in kinds:
        out = op("CudnnRNNV3Keras")(**forward_args)
        for backward_args in kinds:
            if backward_args is forward_args:
                continue
            with pytest.raises(tf.errors.InvalidArgumentError, match="reserve_space"):
                keras_backprop(backward_args, out, cot, tf.float32)


@pytest.mark.parametrize("sizes", [(0, 2, 3, 4), (3, 0, 3, 4), (3, 2, 0, 4), (3, 2, 3, 0)],
                         ids=["T0", "B0", "I0", "H0"])
def test_empty_dimensions_with_zoneout(sizes):
    T_, B_, I_, H_ = sizes
    cfg = R.Cfg("lstm", 1, H_, I_)
    inputs = R.random_inputs(np.random.default_rng(0), cfg, T_, B_)
    weights = (np.ones((T_, B_, H_)), np.float64(0.5))
    out = op("CudnnRNNV3Keras")(**keras_op_args(cfg, inputs, [T_] * B_, True, "float32", None,
                                                None, *weights))
    want = R.forward(cfg, inputs["input"], inputs["input_h"], inputs["input_c"],
                     inputs["params"], [T_] * B_, zoneout_h=weights[0], zoneout_c=weights[1])
    for name in ("output", "output_h", "output_c"):
        np.testing.assert_allclose(getattr(out, name).numpy(), want[name], atol=1e-5)


# ---- the layers --------------------------------------------------------------------------------

LAYER_B, LAYER_T = 6, 5


def reference_rnn(layers, kind, zoned_c, **kwargs):
    """The anchors' construction in `layers` (keras.layers or tf_keras.layers): the Keras cell's
    step in a layers.RNN, then zoneout's blend of each new state with the previous one, the
    keep-new weights arriving with the step's inputs ([x_t, w^h_t(, w^c_t)]: fed in, where
    Tacotron 2's cell draws them)."""
    cell_class = getattr(layers, kind + "Cell")

    class ZoneoutCell(layers.Layer):
        def __init__(self, cell, **kw):
            super().__init__(**kw)
            self.cell = cell
            self.state_size = cell.state_size
            self.output_size = cell.units

        def build(self, input_shape):
            self.cell.build((input_shape[0], I))
            self.built = True

        def call(self, inputs, states, training=None):
            x, weights = inputs[:, :I], inputs[:, I:]
            states = list(states) if isinstance(states, (list, tuple)) else [states]
            _, new = self.cell(x, states, training=training)
            new = list(new) if isinstance(new, (list, tuple)) else [new]
            zoned = [new_k * weights[:, k * H:(k + 1) * H]
                     + prev_k * (1 - weights[:, k * H:(k + 1) * H])
                     for k, (new_k, prev_k) in enumerate(zip(new, states))]
            return zoned[0], zoned

    cell_kwargs = {k: kwargs.pop(k) for k in ("reset_after", "activation") if k in kwargs}
    return layers.RNN(ZoneoutCell(cell_class(H, dtype="float64", **cell_kwargs),
                                  dtype="float64"), dtype="float64", **kwargs), zoned_c


def _pre_padded_mask():
    lengths = np.array([5, 3, 0, 1, 4, 5])
    return np.arange(LAYER_T)[None, ::-1] < lengths[:, None]


def _run(layer, x, mask, cot, training):
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        outs = layer(x, mask=tf.constant(mask), training=training)
        outs = list(outs)
        loss = sum(tf.reduce_sum(o * c) for o, c in zip(outs, cot))
    grads = tape.gradient(loss, [x] + layer.trainable_weights)
    return outs + grads


LAYER_CASES = [  # (kind, zoneout arguments, other arguments)
    ("LSTM", dict(zoneout_h=0.3), {}),
    ("LSTM", dict(zoneout_c=0.4), dict(go_backwards=True)),
    ("LSTM", dict(zoneout_h=0.1, zoneout_c=0.1), dict(activation="relu")),
    ("GRU", dict(zoneout=0.3), {}),
    ("GRU", dict(zoneout=0.3), dict(reset_after=False, go_backwards=True)),
    ("SimpleRNN", dict(zoneout=0.2), dict(activation="relu")),
]


def _layer_case_id(case):
    kind, rates, extra = case
    return "-".join([kind] + sorted(rates) + sorted(extra))


def _compare_with_reference(rng, monkeypatch, layers, ours_module, case, training):
    """Ours (fed the weights while training; its own expectation at inference) against
    reference_rnn in float64, with a pre-padded step mask: outputs, final states, gradients of
    the input and the weights."""
    from tf_lstm_ops._fused_rnn import ZoneoutLayer

    kind, rates, extra = case
    kw = dict(return_sequences=True, return_state=True, **extra)
    ours = getattr(ours_module, kind)(H, dtype="float64", **rates, **kw)
    lstm = kind == "LSTM"
    theirs, _ = reference_rnn(layers, kind, lstm, **kw)
    ours.build((None, LAYER_T, I))
    n_states = 2 if lstm else 1
    theirs.build((None, LAYER_T, I + n_states * H))
    ours.set_weights([rng.uniform(-0.7, 0.7, w.shape) for w in ours.get_weights()])
    theirs.set_weights(ours.get_weights())
    rate_h, rate_c = ours._zoneout_rates()
    shape = (LAYER_B, LAYER_T, H)
    if training:
        weights = [(rng.uniform(size=shape) >= rate).astype(np.float64) if rate else None
                   for rate in (rate_h, rate_c)]
        monkeypatch.setattr(ZoneoutLayer, "_zoneout_weights",
                            lambda self, x, training, uniform: [
                                None if w is None else tf.constant(w) for w in weights])
    else:
        weights = [np.float64(1 - rate) if rate else None for rate in (rate_h, rate_c)]
    fed = np.concatenate([np.broadcast_to(np.ones(()) if w is None else w, shape)
                          for w in weights[:n_states]], axis=2)
    x = rng.uniform(-1, 1, (LAYER_B, LAYER_T, I))
    cot = [rng.uniform(-1, 1, (LAYER_B, LAYER_T, H))] + [
        rng.uniform(-1, 1, (LAYER_B, H)) for _ in range(n_states)]
    got = _run(ours, x, _pre_padded_mask(), cot, training)
    want = _run(theirs, np.concatenate([x, fed], axis=2), _pre_padded_mask(), cot, training)
    want[len(cot)] = want[len(cot)][:, :, :I]  # (the input's gradient, not the weights')
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-10, rtol=1e-9)


@pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])
@pytest.mark.parametrize("case", LAYER_CASES, ids=[_layer_case_id(c) for c in LAYER_CASES])
def test_keras3_zoneout_equals_the_keras_cell_construction(rng, monkeypatch, case, training):
    keras = pytest.importorskip("keras")
    import tf_lstm_ops.keras as tlk

    _compare_with_reference(rng, monkeypatch, keras.layers, tlk, case, training)


@pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])
@pytest.mark.parametrize("case", LAYER_CASES[::2], ids=[_layer_case_id(c)
                                                         for c in LAYER_CASES[::2]])
def test_tf_keras_zoneout_equals_the_keras_cell_construction(rng, monkeypatch, case, training):
    tf_keras = pytest.importorskip("tf_keras")
    import tf_lstm_ops.tf_keras as tlk2

    _compare_with_reference(rng, monkeypatch, tf_keras.layers, tlk2, case, training)


@pytest.fixture(params=["keras", "tf_keras"])
def flavour(request):
    """(the layers module of ours, Keras' own layers module) for Keras 3 or tf_keras."""
    if request.param == "keras":
        keras = pytest.importorskip("keras")
        import tf_lstm_ops.keras as ours
        return ours, keras
    tf_keras = pytest.importorskip("tf_keras")
    import tf_lstm_ops.tf_keras as ours
    return ours, tf_keras


def test_training_draws_keep_new_masks_at_the_rate(flavour, monkeypatch):
    """While training each step and element keeps its new value with probability 1 - rate (0/1
    masks [B, T, H], fresh per call); rate 1 keeps the initial state everywhere."""
    from tf_lstm_ops._fused_rnn import ZoneoutLayer

    ours, _ = flavour
    drawn = []
    original = ZoneoutLayer._zoneout_weights

    def spy(self, x, training, uniform):
        weights = original(self, x, training, uniform)
        drawn.append(weights)
        return weights

    monkeypatch.setattr(ZoneoutLayer, "_zoneout_weights", spy)
    layer = ours.LSTM(16, zoneout_h=0.3, zoneout_c=0.1, return_sequences=True)
    x = tf.random.uniform([64, 50, 3])
    layer(x, training=True)
    layer(x, training=True)
    (h1, c1), (h2, _) = drawn
    assert h1.shape == (64, 50, 16) and c1.shape == (64, 50, 16)
    for w, rate in ((h1, 0.3), (c1, 0.1)):
        w = w.numpy()
        assert set(np.unique(w)) <= {0.0, 1.0}
        assert abs(w.mean() - (1 - rate)) < 0.01  # (51200 draws: std 0.002)
    assert not np.array_equal(h1, h2)
    held = ours.GRU(4, zoneout=1.0, return_sequences=True)(x, training=True)
    np.testing.assert_array_equal(held, np.zeros((64, 50, 4)))


def test_inference_applies_the_expectation(flavour):
    """training=False (and a plain call, whose default that is) blends with 1 - rate: the
    output equals the op's with the scalar weight, and differs from the unzoned layer's."""
    ours, _ = flavour
    x = tf.random.uniform([3, 6, 2], dtype=tf.float64)
    zoned = ours.SimpleRNN(4, zoneout=0.25, dtype="float64", return_sequences=True)
    plain = ours.SimpleRNN(4, dtype="float64", return_sequences=True)
    zoned.build(x.shape)
    plain.build(x.shape)
    plain.set_weights(zoned.get_weights())
    kernel, recurrent, bias = (w.astype(np.float64) for w in zoned.get_weights())
    h, want = np.zeros((3, 4)), []
    for t in range(6):
        h = 0.75 * np.tanh(x[:, t].numpy() @ kernel + h @ recurrent + bias) + 0.25 * h
        want.append(h)
    for got in (zoned(x, training=False), zoned(x)):
        np.testing.assert_allclose(got, np.stack(want, 1), atol=1e-12)
    assert not np.allclose(plain(x), zoned(x))


def test_config_is_kerass_unless_zoned_and_round_trips(flavour):
    ours, theirs = flavour
    assert ours.LSTM(3).get_config().keys() == theirs.layers.LSTM(3).get_config().keys()
    assert "zoneout" not in ours.GRU(3).get_config()
    layer = ours.LSTM(3, zoneout_h=0.1, zoneout_c=0.2)
    config = layer.get_config()
    assert (config["zoneout_h"], config["zoneout_c"]) == (0.1, 0.2)
    again = ours.LSTM.from_config(config)
    assert (again.zoneout_h, again.zoneout_c) == (0.1, 0.2)
    assert ours.SimpleRNN.from_config(ours.SimpleRNN(2, zoneout=0.5).get_config()).zoneout == 0.5


@pytest.mark.parametrize("arg, value", [("zoneout_h", 1.5), ("zoneout_c", -0.1),
                                        ("zoneout_h", "a"), ("zoneout_c", None)])
def test_a_rate_outside_zero_one_is_a_value_error_naming_it(flavour, arg, value):
    ours, _ = flavour
    with pytest.raises(ValueError, match=arg):
        ours.LSTM(3, **{arg: value})


@pytest.mark.parametrize("kind, args", [("LSTM", dict(unroll=True)),
                                        ("GRU", dict(activation="selu")),
                                        ("SimpleRNN", dict(unroll=True))])
def test_zoneout_where_the_kernel_cannot_run_is_an_error(flavour, kind, args):
    """Keras' own loop has no zoneout: never a silent fallback without it."""
    ours, _ = flavour
    rates = dict(zoneout_h=0.1) if kind == "LSTM" else dict(zoneout=0.1)
    with pytest.raises(ValueError, match="zoneout"):
        getattr(ours, kind)(3, **rates, **args)
    getattr(ours, kind)(3, **args)  # (unzoned: Keras' loop, as before)


def test_zoneout_under_xla_is_an_error(flavour):
    ours, _ = flavour
    layer = ours.LSTM(3, zoneout_c=0.1)
    with pytest.raises(ValueError, match="zoneout.*XLA"):
        tf.function(lambda v: layer(v), jit_compile=True)(tf.zeros([2, 4, 3]))


def test_keras3_model_with_zoneout_trains_and_reloads(tmp_path, rng):
    """A Tacotron-style encoder (Bidirectional zoned LSTM): fit trains every weight, and the
    .keras file reloads the zoneout rates (equal inference outputs)."""
    keras = pytest.importorskip("keras")
    import tf_lstm_ops.keras as tlk

    model = keras.Sequential([
        keras.Input((7, 5)),
        keras.layers.Bidirectional(tlk.LSTM(8, zoneout_h=0.1, zoneout_c=0.1,
                                            return_sequences=True)),
        tlk.GRU(4, zoneout=0.2)])
    model.compile("adam", "mse")
    x, y = rng.uniform(-1, 1, (16, 7, 5)), rng.uniform(-1, 1, (16, 4))
    before = [w.copy() for w in model.get_weights()]
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    assert all(not np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    path = str(tmp_path / "zoned.keras")
    model.save(path)
    again = keras.models.load_model(path)
    assert again.layers[0].forward_layer.zoneout_h == 0.1
    np.testing.assert_allclose(again.predict(x, verbose=0), model.predict(x, verbose=0),
                               atol=1e-6)


def test_tf_keras_model_with_zoneout_reloads_from_h5(tmp_path, rng):
    tf_keras = pytest.importorskip("tf_keras")
    import tf_lstm_ops.tf_keras as tlk2

    model = tf_keras.Sequential([tf_keras.Input((7, 5)),
                                 tlk2.LSTM(8, zoneout_h=0.1, zoneout_c=0.1, stateful=False)])
    model.compile("adam", "mse")
    x = rng.uniform(-1, 1, (4, 7, 5))
    model.fit(x, rng.uniform(-1, 1, (4, 8)), epochs=1, verbose=0)
    path = str(tmp_path / "zoned.h5")
    model.save(path)
    again = tf_keras.models.load_model(path)
    assert again.layers[0].zoneout_c == 0.1
    np.testing.assert_allclose(again.predict(x, verbose=0), model.predict(x, verbose=0),
                               atol=1e-6)


# ---- the cells ---------------------------------------------------------------------------------

def _built_cell_pair(rng, ours_class, theirs_class, **kwargs):
    ours, theirs = ours_class(H, dtype="float64", **kwargs), theirs_class(H, dtype="float64")
    for cell in (ours, theirs):
        cell.build((LAYER_B, I))
    theirs.set_weights([rng.uniform(-0.7, 0.7, w.shape) for w in theirs.get_weights()])
    ours.set_weights(theirs.get_weights())
    return ours, theirs


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "SimpleRNN"])
def test_cells_without_zoneout_step_as_kerass_cells(rng, kind):
    """A loop stepping our cell and Keras' (a decoder's loop): equal states and gradients."""
    keras = pytest.importorskip("keras")
    import tf_lstm_ops.keras as tlk

    ours, theirs = _built_cell_pair(rng, getattr(tlk, kind + "Cell"),
                                    getattr(keras.layers, kind + "Cell"))
    xs = tf.constant(rng.uniform(-1, 1, (LAYER_T, LAYER_B, I)))
    n_states = 2 if kind == "LSTM" else 1
    s0 = [tf.constant(rng.uniform(-1, 1, (LAYER_B, H))) for _ in range(n_states)]

    def run(cell):
        with tf.GradientTape() as tape:
            tape.watch(xs)
            states, loss = list(s0), 0.0
            for t in range(LAYER_T):
                out, states = cell(xs[t], states, training=True)
                loss += tf.reduce_sum(out * tf.cast(t + 1, tf.float64))
        return [out] + list(states) + tape.gradient(loss, [xs] + cell.trainable_weights)

    for a, b in zip(run(ours), run(theirs)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-12)


def test_zoned_cell_in_a_decoder_loop_equals_the_zoned_layer(rng, monkeypatch):
    """Stepping our zoned LSTMCell in a tf.function loop with step t's masks gives our zoned LSTM
    layer's sequence with those masks (the layer equals the Keras construction, above)."""
    keras = pytest.importorskip("keras")
    import tf_lstm_ops.keras as tlk
    from tf_lstm_ops._fused_rnn import ZoneoutLayer

    cell = tlk.LSTMCell(H, zoneout_h=0.3, zoneout_c=0.2, dtype="float64")
    layer = tlk.LSTM(H, zoneout_h=0.3, zoneout_c=0.2, return_sequences=True, dtype="float64")
    cell.build((LAYER_B, I))
    layer.build((LAYER_B, LAYER_T, I))
    cell.set_weights([rng.uniform(-0.7, 0.7, w.shape) for w in cell.get_weights()])
    layer.set_weights(cell.get_weights())
    masks = [tf.constant((rng.uniform(size=(LAYER_B, LAYER_T, H)) >= rate).astype(np.float64))
             for rate in (0.3, 0.2)]
    step = tf.Variable(0)

    def weights(self, x, training, uniform):  # the layer's whole sequence, or the cell's step
        if x.shape[1] == LAYER_T:
            return masks
        return [m[:, step.value():step.value() + 1] for m in masks]

    monkeypatch.setattr(ZoneoutLayer, "_zoneout_weights", weights)
    x = tf.constant(rng.uniform(-1, 1, (LAYER_B, LAYER_T, I)))

    @tf.function
    def decode(x):
        states, outputs = [tf.zeros([LAYER_B, H], tf.float64)] * 2, []
        for t in range(LAYER_T):
            step.assign(t)
            out, states = cell(x[:, t], states, training=True)
            outputs.append(out)
        return tf.stack(outputs, 1)

    np.testing.assert_allclose(decode(x), layer(x, training=True), atol=1e-12)


def test_zoned_cell_at_inference_is_the_expectation(rng):
    keras = pytest.importorskip("keras")
    import tf_lstm_ops.keras as tlk

    zoned, plain = _built_cell_pair(rng, tlk.GRUCell, tlk.GRUCell, zoneout=0.4)
    x, h = (tf.constant(rng.uniform(-1, 1, shape)) for shape in ((LAYER_B, I), (LAYER_B, H)))
    new, _ = plain(x, [h])
    got, states = zoned(x, [h], training=False)
    np.testing.assert_allclose(got, 0.6 * new + 0.4 * h, atol=1e-12)
    np.testing.assert_allclose(states[0], got)


def test_cells_config_errors_and_export(rng):
    keras = pytest.importorskip("keras")
    import tf_lstm_ops.keras as tlk

    config = tlk.LSTMCell(3, zoneout_c=0.1).get_config()
    assert config["zoneout_c"] == 0.1 and "zoneout_h" not in config
    assert tlk.LSTMCell.from_config(config).zoneout_c == 0.1
    assert tlk.SimpleRNNCell(3).get_config().keys() == keras.layers.SimpleRNNCell(3).get_config(
    ).keys()
    with pytest.raises(ValueError, match="zoneout"):
        tlk.GRUCell(3, zoneout=2.0)
    with pytest.raises(ValueError, match="zoneout"):
        tlk.SimpleRNNCell(3, zoneout=0.1, activation="selu")
    inp = keras.Input((LAYER_T, I))
    plain = keras.Model(inp, keras.layers.RNN(tlk.GRUCell(H))(inp))
    stock = tlk.to_stock_keras(plain)
    assert type(stock.layers[-1].cell) is keras.layers.GRUCell
    x = rng.uniform(-1, 1, (2, LAYER_T, I)).astype(np.float32)
    np.testing.assert_allclose(stock(x), plain(x), atol=1e-5)
    zoned = keras.Model(inp, keras.layers.RNN(tlk.LSTMCell(H, zoneout_h=0.1))(inp))
    with pytest.raises(ValueError, match="no stock Keras twin: zoneout_h=0.1"):
        tlk.to_stock_keras(zoned)
