"""The LayerNorm GRU's and SimpleRNN's layers and cells, Keras 3 (tf_lstm_ops.keras) and tf_keras
(tf_lstm_ops.tf_keras): against the same math written with TensorFlow ops in a keras.layers.RNN
cell (haste's LayerNormGRU, TF Addons' LayerNormSimpleRNNCell), with masks, go_backwards, TF
Addons' dropout and activations; zoneout against the float64 reference; stateful, mixed
precision, configs and saving (.keras, .h5, SavedModel); TF Addons' cell's variables and
haste's weights; the arguments refused (docs/keras_layers.md §9)."""

import numpy as np
import pytest
import tensorflow as tf

from conftest import layer_call_and_gradients as call_and_grads
from tools.references import layer_norm_rnn as REF

keras = pytest.importorskip("keras")
import tf_lstm_ops.keras as tlk  # noqa: E402

B, T, I, H = 5, 6, 3, 4
EPS = 2.0 ** -10  # exact in float32: the op's float attribute and the float64 reference agree
KINDS = ("gru", "simple_rnn")
LAYERS = {"gru": "LayerNormGRU", "simple_rnn": "LayerNormSimpleRNN"}


def _first(mask):
    return mask[0] if isinstance(mask, (list, tuple)) else mask


def _applies(rate, gru):
    return 0 < rate < 1 if gru else rate > 0


def tf_ops_rnn(kind, dtype="float64", epsilon=EPS, **kwargs):
    """The LayerNorm GRU (haste's on Keras' reset_after weights) or SimpleRNN (TF Addons') with
    TensorFlow ops, in keras.layers.RNN: its variables in our order (kernel, recurrent_kernel,
    bias, γ of x·W (SimpleRNN: of x·W + h·R), γ of h·R); TF Addons' dropout (one input mask
    and one recurrent mask on h_{t-1}, the first Keras' cell draws)."""
    gru = kind == "gru"
    base = keras.layers.GRUCell if gru else keras.layers.SimpleRNNCell

    def ln(v, gamma):
        mean = tf.reduce_mean(v, -1, keepdims=True)
        var = tf.reduce_mean(tf.square(v - mean), -1, keepdims=True)
        return (v - mean) * tf.math.rsqrt(var + epsilon) * gamma

    class Cell(base):
        def build(self, input_shape):
            super().build(input_shape)
            width = (3 if gru else 1) * self.units
            self.gammas = [self.add_weight(shape=(width,), initializer="ones", name=n)
                           for n in (("gamma_x", "gamma_h") if gru else ("gamma",))]

        def call(self, x, states, training=False):
            h = states[0]
            x_mask, h_mask = self.get_dropout_mask(x), self.get_recurrent_dropout_mask(h)
            if training and _applies(self.dropout, gru):
                x = x * _first(x_mask)
            hm = h * _first(h_mask) if training and _applies(self.recurrent_dropout, gru) else h
            w, r = tf.convert_to_tensor(self.kernel), tf.convert_to_tensor(self.recurrent_kernel)
            b = tf.convert_to_tensor(self.bias)
            if not gru:
                h_new = self.activation(ln(x @ w + hm @ r, self.gammas[0]) + b)
                return h_new, [h_new]
            xx = ln(x @ w, self.gammas[0]) + b[0]
            uu = ln(hm @ r, self.gammas[1]) + b[1]
            (xz, xr, xh), (uz, ur, uh) = tf.split(xx, 3, -1), tf.split(uu, 3, -1)
            z, rr = self.recurrent_activation(xz + uz), self.recurrent_activation(xr + ur)
            h_new = z * h + (1 - z) * self.activation(xh + rr * uh)
            return h_new, [h_new]

    cell_args = {k: kwargs.pop(k) for k in ("dropout", "recurrent_dropout", "activation",
                                            "recurrent_activation") if k in kwargs}
    return keras.layers.RNN(Cell(H, dtype=dtype, **cell_args), dtype=dtype, **kwargs)


def _pre_padded_mask():
    lengths = np.array([6, 3, 0, 1, 5])
    return np.arange(T)[None, ::-1] < lengths[:, None]


def _random_weights(rng, layer):
    """Random weights for a layer's (or cell's) variables: γ near 1."""
    return [rng.uniform(-0.7, 0.7, w.shape) + ("gamma" in getattr(w, "path", w.name))
            for w in layer.weights]


def _assert_all_close(got, want, **tol):
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b), **tol)


CASES = [("gru", {}), ("gru", dict(go_backwards=True, dropout=0.3, recurrent_dropout=0.4)),
         ("gru", dict(activation="relu", recurrent_activation="hard_sigmoid")),
         ("simple_rnn", {}),
         ("simple_rnn", dict(go_backwards=True, dropout=0.3, recurrent_dropout=0.4,
                             activation="softsign"))]


@pytest.mark.parametrize("kind, extra", CASES,
                         ids=["%s-%s" % (k, "-".join(sorted(e))) for k, e in CASES])
def test_layer_and_cell_equal_the_tf_ops_construction(rng, kind, extra):
    """Outputs, final state and every gradient in float64 (dropout masks injected into every
    cell) with a pre-padded step mask: the fused layer, Keras' loop of our cell and a float32
    layer (loosely) against the construction."""
    kw = dict(return_sequences=True, return_state=True, **extra)
    cell_kw = {k: v for k, v in extra.items() if k != "go_backwards"}
    rnn_kw = {k: v for k, v in kw.items() if k not in cell_kw}
    cell_class = getattr(tlk, LAYERS[kind] + "Cell")
    theirs = tf_ops_rnn(kind, **kw)
    ours = getattr(tlk, LAYERS[kind])(H, norm_epsilon=EPS, dtype="float64", **kw)
    stepped = keras.layers.RNN(cell_class(H, norm_epsilon=EPS, dtype="float64", **cell_kw),
                               dtype="float64", **rnn_kw)
    single = getattr(tlk, LAYERS[kind])(H, norm_epsilon=EPS, **kw)
    for layer in (ours, theirs, stepped, single):
        layer.build((None, T, I))
    theirs.set_weights(_random_weights(rng, theirs))
    for layer in (ours, stepped, single):
        layer.set_weights(theirs.get_weights())
    masks = [(rng.uniform(size=(B, n)) >= 0.35) / 0.65 for n in (I, H)]

    def inject(dtype):
        def before(layer):
            layer.cell._dropout_mask = tf.constant(masks[0], dtype)
            layer.cell._recurrent_dropout_mask = tf.constant(masks[1], dtype)
        return before

    x = rng.uniform(-1, 1, (B, T, I))
    cot = [rng.uniform(-1, 1, (B, T, H)), rng.uniform(-1, 1, (B, H))]
    want = call_and_grads(theirs, x, _pre_padded_mask(), cot, True, inject("float64"))
    for layer in (ours, stepped):
        got = call_and_grads(layer, x, _pre_padded_mask(), cot, True, inject("float64"))
        _assert_all_close(got, want, atol=1e-10, rtol=1e-9)
    got = call_and_grads(single, x.astype(np.float32), _pre_padded_mask(), cot, True,
                         inject("float32"))
    _assert_all_close(got, want, atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_zoneout_and_recurrent_dropout_equal_the_reference(rng, monkeypatch, kind):
    """Zoneout masks [B, T, H] of h (none of a c) fed to the layer while training, with a
    recurrent dropout mask: one [B, H] mask on h_{t-1} for every gate and step; at inference
    the expectation 1 - rate and no dropout; against the float64 reference."""
    from tf_lstm_ops._fused_rnn import ZoneoutLayer

    layer = getattr(tlk, LAYERS[kind])(H, zoneout=0.3, recurrent_dropout=0.4, norm_epsilon=EPS,
                                       return_sequences=True, return_state=True,
                                       dtype="float64")
    layer.build((None, T, I))
    layer.set_weights(_random_weights(rng, layer))
    w = dict(zip(REF.weight_names(kind), layer.get_weights()))
    x, h0 = rng.uniform(-1, 1, (B, T, I)), np.zeros((B, H))
    zoneout = (rng.uniform(size=(B, T, H)) >= 0.3).astype(np.float64)
    dropout = (rng.uniform(size=(B, H)) >= 0.4) / 0.6
    drawn = []
    draw = ZoneoutLayer._zoneout_weights

    def fed(self, x, training, uniform):
        drawn.append(draw(self, x, training, uniform))
        return [tf.constant(zoneout), None]

    monkeypatch.setattr(ZoneoutLayer, "_zoneout_weights", fed)
    layer.cell._recurrent_dropout_mask = tf.constant(dropout)
    got = layer(x, training=True)
    monkeypatch.undo()
    assert drawn[0][0].shape == (B, T, H) and drawn[0][1] is None
    want = REF.forward(kind, x, h0, w, None, EPS, False, dropout, zoneout)
    _assert_all_close(got, [want["output"], want["output_h"]], atol=1e-12)
    got = layer(x, training=False)
    want = REF.forward(kind, x, h0, w, None, EPS, False, None, np.float64(0.7))
    _assert_all_close(got, [want["output"], want["output_h"]], atol=1e-12)


def test_haste_gru_weights_compute_hastes_equations(rng):
    """haste's LayerNormGRU (gates z, r, h; γ of x·W and of h·R, bias and recurrent_bias after
    the norms, ε 1e-5) in NumPy against LayerNormGRU on haste_gru_weights' conversion."""
    haste = dict(kernel=rng.uniform(-0.6, 0.6, (I, 3 * H)),
                 recurrent_kernel=rng.uniform(-0.6, 0.6, (H, 3 * H)),
                 bias=rng.uniform(-0.5, 0.5, 3 * H), recurrent_bias=rng.uniform(-0.5, 0.5, 3 * H),
                 gamma=rng.uniform(0.5, 1.5, (2, 3 * H)))
    ours = tlk.LayerNormGRU(H, return_sequences=True, dtype="float64")
    ours.build((None, T, I))
    ours.set_weights(tlk.haste_gru_weights(**haste))
    eps = float(np.float32(1e-5))

    def ln(v, gamma):
        mean = v.mean(-1, keepdims=True)
        return (v - mean) / np.sqrt(((v - mean) ** 2).mean(-1, keepdims=True) + eps) * gamma

    x = rng.uniform(-1, 1, (B, T, I))
    h, want = np.zeros((B, H)), []
    for t in range(T):
        wx = ln(x[:, t] @ haste["kernel"], haste["gamma"][0]) + haste["bias"]
        rh = ln(h @ haste["recurrent_kernel"], haste["gamma"][1]) + haste["recurrent_bias"]
        (wz, wr, wg), (rz, rr, rg) = np.split(wx, 3, -1), np.split(rh, 3, -1)
        z, r = 1 / (1 + np.exp(-(wz + rz))), 1 / (1 + np.exp(-(wr + rr)))
        h = z * h + (1 - z) * np.tanh(wg + r * rg)
        want.append(h)
    np.testing.assert_allclose(ours(x), np.stack(want, 1), atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_cell_steps_a_hand_written_loop(rng, kind):
    """The cell called step by step (a state list or the bare state) gives the layer's outputs;
    its variables in order, with the norms' γ only."""
    layer = getattr(tlk, LAYERS[kind])(H, return_sequences=True, dtype="float64")
    cell = getattr(tlk, LAYERS[kind] + "Cell")(H, dtype="float64")
    layer.build((None, T, I))
    cell.build((None, I))
    layer.set_weights(_random_weights(rng, layer))
    cell.set_weights(layer.get_weights())
    assert [w.path.split("/", 1)[-1] for w in cell.weights] == (
        ["kernel", "recurrent_kernel", "bias"]
        + (["kernel_norm/gamma", "recurrent_norm/gamma"] if kind == "gru" else ["layernorm/gamma"]))
    x = rng.uniform(-1, 1, (B, T, I))
    h, bare, outs = [tf.zeros((B, H), tf.float64)], tf.zeros((B, H), tf.float64), []
    for t in range(T):
        y, h = cell(x[:, t], h)
        _, bare = cell(x[:, t], bare)
        outs.append(y)
    np.testing.assert_allclose(np.stack(outs, 1), layer(x), atol=1e-12)
    np.testing.assert_allclose(bare, outs[-1], atol=1e-12)


def test_config_saving_bidirectional_fit_stateful_mixed_precision(tmp_path, rng):
    layer = tlk.LayerNormGRU(3, zoneout=0.1, dropout=0.2, norm_epsilon=1e-4,
                             norm_gamma_regularizer="l2", activation="relu")
    config = layer.get_config()
    assert (config["zoneout"], config["norm_epsilon"], config["reset_after"]) == (0.1, 1e-4, True)
    again = tlk.LayerNormGRU.from_config(config)
    assert (again.cell.zoneout, again.cell.dropout, again.cell.norm_epsilon) == (0.1, 0.2, 1e-4)
    assert again.cell.kernel_norm.gamma_regularizer is not None
    inputs = keras.Input((T, I))
    h = keras.layers.Masking()(inputs)
    h = keras.layers.Bidirectional(tlk.LayerNormGRU(4, zoneout=0.1, return_sequences=True))(h)
    h = tlk.LayerNormSimpleRNN(4, recurrent_dropout=0.1, dropout=0.1)(h)
    model = keras.Model(inputs, h)
    model.compile("adam", "mse")
    x, y = rng.uniform(-1, 1, (16, T, I)).astype(np.float32), rng.uniform(-1, 1, (16, 4))
    x[:3, -2:] = 0.0  # masked steps
    before = [w.copy() for w in model.get_weights()]
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    assert all(not np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    expected = model.predict(x, verbose=0)
    model.save(str(tmp_path / "ln.keras"))
    loaded = keras.models.load_model(str(tmp_path / "ln.keras"))
    np.testing.assert_allclose(loaded.predict(x, verbose=0), expected, atol=1e-6)
    # (Keras 3's SavedModel export: tf.saved_model.save refuses models with dropout, Keras' own
    # GRU's too, whose cells' seed generators Keras leaves untracked)
    model.export(str(tmp_path / "saved_model"), verbose=False)
    served = tf.saved_model.load(str(tmp_path / "saved_model"))
    np.testing.assert_allclose(served.serve(tf.constant(x)), expected, atol=1e-6)

    stateful = tlk.LayerNormSimpleRNN(4, stateful=True, return_sequences=True)
    first, second = np.asarray(stateful(x[:2])), np.asarray(stateful(x[:2]))
    assert not np.allclose(first, second)  # the state carried over
    stateful.reset_states()
    np.testing.assert_array_equal(stateful(x[:2]), first)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        for name in LAYERS.values():
            half = getattr(tlk, name)(4, return_sequences=True)
            full = getattr(tlk, name)(4, return_sequences=True, dtype="float32")
            out = half(x)
            full(x)
            full.set_weights(half.get_weights())
            assert out.dtype == "float16" and half.weights[-1].dtype == "float32"
            np.testing.assert_allclose(out, full(x), atol=1e-2)
    finally:
        keras.mixed_precision.set_global_policy("float32")


BAD = [("gru", dict(reset_after=False), "reset_after"),
       ("gru", dict(activation="softmax"), "activation"),
       ("gru", dict(recurrent_activation="softmax"), "recurrent_activation"),
       ("simple_rnn", dict(activation="softmax"), "activation"),
       ("gru", dict(norm_epsilon=0.0), "norm_epsilon"),
       ("simple_rnn", dict(norm_epsilon=-1.0), "norm_epsilon"),
       ("simple_rnn", dict(norm_epsilon="1e-5"), "norm_epsilon"),
       ("gru", dict(zoneout=1.5), "zoneout"), ("simple_rnn", dict(zoneout=-0.1), "zoneout")]


@pytest.mark.parametrize("version", ["keras", "tf_keras"])
def test_bad_arguments_are_value_errors_naming_them(version):
    module = tlk
    if version == "tf_keras":
        pytest.importorskip("tf_keras")
        import tf_lstm_ops.tf_keras as module
    for kind, kwargs, match in BAD:
        for name in (LAYERS[kind], LAYERS[kind] + "Cell"):
            with pytest.raises(ValueError, match=match):
                getattr(module, name)(3, **kwargs)


# ---- tf_keras --------------------------------------------------------------------------------

@pytest.mark.parametrize("extra", [dict(go_backwards=True, dropout=0.3, recurrent_dropout=0.4),
                                   dict(time_major=True)],
                         ids=["go_backwards-dropout", "time_major"])
@pytest.mark.parametrize("kind", KINDS)
def test_tf_keras_twin_equals_the_keras3_layer(rng, kind, extra):
    """tf_lstm_ops.tf_keras's layer against the Keras 3 layer (itself equal to the TF-ops
    construction, above) in float64 with a pre-padded mask: outputs, state and gradients;
    dropout with the same masks (tf_keras' draws patched, Keras 3's injected)."""
    pytest.importorskip("tf_keras")
    import tf_lstm_ops.tf_keras as tlk2
    from conftest import tf_keras_dropout_masks

    time_major = extra.get("time_major", False)
    kw = dict(return_sequences=True, return_state=True, dtype="float64",
              **{k: v for k, v in extra.items() if k != "time_major"})
    ours2 = getattr(tlk2, LAYERS[kind])(H, time_major=time_major, **kw)
    ours3 = getattr(tlk, LAYERS[kind])(H, **kw)
    ours2.build((T, None, I) if time_major else (None, T, I))
    ours3.build((None, T, I))
    ours3.set_weights(_random_weights(rng, ours3))
    ours2.set_weights(ours3.get_weights())
    masks = [tf.constant((rng.uniform(size=(B, n)) >= 0.35) / 0.65) for n in (I, H)]
    x = rng.uniform(-1, 1, (B, T, I))
    cot = [rng.uniform(-1, 1, (B, T, H)), rng.uniform(-1, 1, (B, H))]

    def inject(layer):
        layer.cell._dropout_mask, layer.cell._recurrent_dropout_mask = masks

    want = call_and_grads(ours3, x, _pre_padded_mask(), cot, True, inject)
    swap = (lambda a: np.swapaxes(a, 0, 1)) if time_major else (lambda a: a)

    def draws(mask):
        return lambda self, inputs, training, count=1: [mask] * count if count > 1 else mask

    with tf_keras_dropout_masks(ours2.cell, draws(masks[0]), draws(masks[1])):
        got = call_and_grads(ours2, swap(x), swap(_pre_padded_mask()), [swap(cot[0]), cot[1]],
                             True)
    got[0], got[2] = swap(np.asarray(got[0])), swap(np.asarray(got[2]))
    _assert_all_close(got, want, atol=1e-10, rtol=1e-9)


def test_tf_keras_simple_rnn_cell_is_a_drop_in_for_tf_addons(tmp_path, rng):
    """TF Addons' LayerNormSimpleRNNCell, written from its source: its constructor's argument
    names, its variables (names, order, checkpoint keys), its results on its weights; a model
    of both layers that trains and round-trips through .h5 with zoneout; Bidirectional."""
    tf_keras = pytest.importorskip("tf_keras")
    import tf_lstm_ops.tf_keras as tlk2

    class AddonsCell(tf_keras.layers.SimpleRNNCell):  # tfa.rnn.LayerNormSimpleRNNCell
        def __init__(self, units, layernorm_epsilon=1e-05, gamma_initializer="ones", **kwargs):
            super().__init__(units, **kwargs)
            self.layernorm = tf_keras.layers.LayerNormalization(
                axis=-1, epsilon=layernorm_epsilon, center=False, scale=True,
                beta_initializer=None, gamma_initializer=gamma_initializer,
                dtype=kwargs.get("dtype"), trainable=kwargs.get("trainable", True))

        def build(self, input_shape):
            super().build(input_shape)
            self.layernorm.build((None, self.units))

        def call(self, inputs, states, training=None):
            prev = states[0]
            dp_mask = self.get_dropout_mask_for_cell(inputs, training)
            rec_dp_mask = self.get_recurrent_dropout_mask_for_cell(prev, training)
            h = tf_keras.backend.dot(inputs * dp_mask if dp_mask is not None else inputs,
                                     self.kernel)
            if rec_dp_mask is not None:
                prev = prev * rec_dp_mask
            output = self.layernorm(h + tf_keras.backend.dot(prev, self.recurrent_kernel))
            output = self.activation(tf_keras.backend.bias_add(output, self.bias))
            return output, [output]

    args = dict(activation="tanh", use_bias=True, layernorm_epsilon=1e-5,
                kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal",
                bias_initializer="zeros", gamma_initializer="ones", kernel_regularizer=None,
                recurrent_regularizer=None, bias_regularizer=None, kernel_constraint=None,
                recurrent_constraint=None, bias_constraint=None, dropout=0.0,
                recurrent_dropout=0.0)
    ours = tlk2.LayerNormSimpleRNNCell(H, gamma_regularizer=None, gamma_constraint=None, **args)
    theirs = AddonsCell(H, **args)
    x = rng.uniform(-1, 1, (B, T, I)).astype(np.float32)
    layers = [tf_keras.layers.RNN(c, return_sequences=True) for c in (ours, theirs)]
    for layer in layers:
        layer(x)
    names = [[w.name.split(c.name + "/", 1)[1] for w in c.weights] for c in (ours, theirs)]
    assert names[0] == names[1] == ["kernel:0", "recurrent_kernel:0", "bias:0", "gamma:0"], names
    theirs.set_weights(_random_weights(rng, ours))
    ours.set_weights(theirs.get_weights())
    np.testing.assert_allclose(layers[0](x), layers[1](x), atol=1e-5)
    path = tf.train.Checkpoint(cell=theirs).save(str(tmp_path / "addons"))
    fresh = tlk2.LayerNormSimpleRNNCell(H)
    tf_keras.layers.RNN(fresh)(x)
    tf.train.Checkpoint(cell=fresh).restore(path).assert_existing_objects_matched()
    _assert_all_close(fresh.get_weights(), theirs.get_weights(), atol=0)
    with pytest.raises(ValueError, match="norm_epsilon or layernorm_epsilon"):
        tlk2.LayerNormSimpleRNNCell(H, norm_epsilon=1e-3, layernorm_epsilon=1e-3)

    model = tf_keras.Sequential([
        tf_keras.Input((T, I)), tf_keras.layers.Masking(),
        tlk2.LayerNormGRU(4, zoneout=0.1, return_sequences=True),
        tlk2.LayerNormSimpleRNN(4, recurrent_dropout=0.2, layernorm_epsilon=1e-4)])
    model.compile("adam", "mse")
    model.fit(x, rng.uniform(size=(B, 4)), verbose=0)
    model.save(str(tmp_path / "ln.h5"))
    loaded = tf_keras.models.load_model(str(tmp_path / "ln.h5"))
    assert loaded.layers[2].cell.norm_epsilon == 1e-4 and loaded.layers[1].cell.zoneout == 0.1
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0),
                               atol=1e-6)
    both = tf_keras.layers.Bidirectional(tlk2.LayerNormGRU(4, zoneout=0.1))
    assert both(x).shape == (B, 8) and both.backward_layer.go_backwards
    assert type(both.backward_layer) is tlk2.LayerNormGRU and both.backward_layer.cell.zoneout
    assert tlk2.haste_gru_weights is tlk.haste_gru_weights
