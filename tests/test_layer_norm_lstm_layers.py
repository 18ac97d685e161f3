"""The LayerNorm LSTM's Keras 3 layer and cell (tf_lstm_ops.keras.LayerNormLSTM,
LayerNormLSTMCell; docs/layer_norm_lstm.md, docs/keras_layers.md §8): against the anchors' own
construction (TF Addons' cell written with Keras ops: an LSTMCell and three LayerNormalization
layers, in keras.layers.RNN), with masks, go_backwards and TF Addons' dropout; zoneout against the
float64 reference; TF Addons' weight order and haste's weights; configs, saving, fit; second
derivatives where Keras' own LayerNormalization gets them wrong."""

import numpy as np
import pytest
import tensorflow as tf

from conftest import layer_call_and_gradients as _run
from tools.references import layer_norm_lstm as LN

keras = pytest.importorskip("keras")
import tf_lstm_ops.keras as tlk  # noqa: E402

B, T, I, H = 6, 5, 3, 4
EPS = 2.0 ** -10  # exact in float32: the op's float attribute and Keras' LayerNormalization agree


def addons_rnn(norm, **kwargs):
    """TF Addons' LayerNormLSTMCell (norm="addons"; "paper": the raw c carried) written with Keras
    ops in keras.layers.RNN: one input and one recurrent dropout mask for all gates (the first
    of those Keras' cell draws)."""

    class Cell(keras.layers.LSTMCell):
        def __init__(self, units, **kw):
            super().__init__(units, **kw)
            self.kernel_norm, self.recurrent_norm, self.state_norm = (
                keras.layers.LayerNormalization(epsilon=EPS, dtype="float64", name=name)
                for name in ("kernel_norm", "recurrent_norm", "state_norm"))

        def build(self, input_shape):
            super().build(input_shape)
            self.kernel_norm.build((None, 4 * self.units))
            self.recurrent_norm.build((None, 4 * self.units))
            self.state_norm.build((None, self.units))

        def call(self, inputs, states, training=False):
            h, c = states
            x_mask, h_mask = self.get_dropout_mask(inputs), self.get_recurrent_dropout_mask(h)
            if training and 0 < self.dropout < 1:
                inputs = inputs * (x_mask[0] if isinstance(x_mask, list) else x_mask)
            if training and 0 < self.recurrent_dropout < 1:
                h = h * (h_mask[0] if isinstance(h_mask, list) else h_mask)
            z = (self.kernel_norm(keras.ops.matmul(inputs, self.kernel))
                 + self.recurrent_norm(keras.ops.matmul(h, self.recurrent_kernel)) + self.bias)
            i, f, g, o = keras.ops.split(z, 4, axis=-1)
            c_cell = keras.ops.sigmoid(f) * c + keras.ops.sigmoid(i) * keras.ops.tanh(g)
            q = self.state_norm(c_cell)
            h_new = keras.ops.sigmoid(o) * keras.ops.tanh(q)
            return h_new, [h_new, q if norm == "addons" else c_cell]

    cell_args = {k: kwargs.pop(k) for k in ("dropout", "recurrent_dropout") if k in kwargs}
    return keras.layers.RNN(Cell(H, dtype="float64", **cell_args), dtype="float64", **kwargs)


def _pre_padded_mask():
    lengths = np.array([5, 3, 0, 1, 4, 5])
    return np.arange(T)[None, ::-1] < lengths[:, None]


CASES = [("addons", {}), ("paper", {}), ("addons", dict(go_backwards=True)),
         ("paper", dict(dropout=0.3, recurrent_dropout=0.4)),
         ("addons", dict(recurrent_dropout=0.4, go_backwards=True))]


@pytest.mark.parametrize("norm, extra", CASES,
                         ids=["%s-%s" % (n, "-".join(sorted(e))) for n, e in CASES])
def test_layer_equals_the_keras_construction(rng, norm, extra):
    """Outputs, final states and every gradient in float64 (masks injected into both cells),
    with a pre-padded step mask; the fused layer and Keras' loop of our cell alike."""
    kw = dict(return_sequences=True, return_state=True, **extra)
    ours = tlk.LayerNormLSTM(H, norm=norm, norm_epsilon=EPS, dtype="float64", **kw)
    theirs = addons_rnn(norm, **kw)
    stepped = keras.layers.RNN(tlk.LayerNormLSTMCell(H, norm=norm, norm_epsilon=EPS,
                                                     dtype="float64",
                                                     **{k: v for k, v in extra.items()
                                                        if "dropout" in k}),
                               dtype="float64", **{k: v for k, v in kw.items()
                                                   if "dropout" not in k})
    for layer in (ours, theirs, stepped):
        layer.build((None, T, I))
    theirs.set_weights([rng.uniform(-0.7, 0.7, w.shape) + ("gamma" in w.path)
                        for w in theirs.weights])
    ours.set_weights(theirs.get_weights())
    stepped.set_weights(theirs.get_weights())
    masks = [(rng.uniform(size=(B, n)) >= 0.35) / 0.65 for n in (I, H)]

    def inject(layer):
        layer.cell._dropout_mask = tf.constant(masks[0])
        layer.cell._recurrent_dropout_mask = tf.constant(masks[1])

    x = rng.uniform(-1, 1, (B, T, I))
    cot = [rng.uniform(-1, 1, (B, T, H))] + [rng.uniform(-1, 1, (B, H)) for _ in range(2)]
    want = _run(theirs, x, _pre_padded_mask(), cot, True, inject)
    for layer in (ours, stepped):
        got = _run(layer, x, _pre_padded_mask(), cot, True, inject)
        for a, b in zip(got, want):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-10, rtol=1e-9)


@pytest.mark.parametrize("norm", ["addons", "paper"])
def test_zoneout_equals_the_reference(rng, monkeypatch, norm):
    """Zoneout masks fed to the layer (training) and its expectation (inference) against the
    float64 reference."""
    from tf_lstm_ops._fused_rnn import ZoneoutLayer

    layer = tlk.LayerNormLSTM(H, norm=norm, zoneout_h=0.3, zoneout_c=0.2, return_sequences=True,
                              return_state=True, dtype="float64")
    layer.build((None, T, I))
    layer.set_weights([rng.uniform(-0.7, 0.7, w.shape) + ("gamma" in w.path)
                       for w in layer.weights])
    w = dict(zip(LN.WEIGHTS, layer.get_weights()))
    x = rng.uniform(-1, 1, (B, T, I))
    zeros = np.zeros((B, H))
    eps = float(np.float32(layer.cell.norm_epsilon))
    masks = [(rng.uniform(size=(B, T, H)) >= r).astype(np.float64) for r in (0.3, 0.2)]
    monkeypatch.setattr(ZoneoutLayer, "_zoneout_weights",
                        lambda self, x, training, uniform: [tf.constant(m) for m in masks])
    got = layer(x, training=True)
    want = LN.forward(x, zeros, zeros, w, None, norm, eps, False, None, *masks)
    monkeypatch.undo()
    for a, name in zip(got, ("output", "output_h", "output_c")):
        np.testing.assert_allclose(a, want[name], atol=1e-12)
    got = layer(x, training=False)
    want = LN.forward(x, zeros, zeros, w, None, norm, eps, False, None, np.float64(0.7),
                      np.float64(0.8))
    for a, name in zip(got, ("output", "output_h", "output_c")):
        np.testing.assert_allclose(a, want[name], atol=1e-12)


def test_weights_are_tf_addons_and_haste_converts(rng):
    """The cell's variables in TF Addons' order (an Addons LayerNormLSTMCell's get_weights()
    loads as is); haste_weights maps haste's LayerNormLSTM (gates i, g, f, o, γ only on the x
    and h norms) to norm="paper", norm_center=False, computing haste's equations."""
    layer = tlk.LayerNormLSTM(H, dtype="float64")
    layer.build((None, T, I))
    assert [w.path.split("/", 2)[-1] for w in layer.weights] == [
        "kernel", "recurrent_kernel", "bias", "kernel_norm/gamma", "kernel_norm/beta",
        "recurrent_norm/gamma", "recurrent_norm/beta", "state_norm/gamma", "state_norm/beta"]
    haste = dict(kernel=rng.uniform(-0.6, 0.6, (I, 4 * H)),
                 recurrent_kernel=rng.uniform(-0.6, 0.6, (H, 4 * H)),
                 bias=rng.uniform(-0.5, 0.5, 4 * H), gamma=rng.uniform(0.5, 1.5, (2, 4 * H)),
                 gamma_h=rng.uniform(0.5, 1.5, H), beta_h=rng.uniform(-0.5, 0.5, H))
    ours = tlk.LayerNormLSTM(H, norm="paper", norm_center=False, return_sequences=True,
                             dtype="float64")
    ours.build((None, T, I))
    ours.set_weights(tlk.haste_weights(**haste))
    x = rng.uniform(-1, 1, (B, T, I))
    eps = float(np.float32(1e-5))

    def ln(v, gamma, beta=0.0):  # haste's layer norm kernel
        mean = v.mean(-1, keepdims=True)
        return (v - mean) / np.sqrt(((v - mean) ** 2).mean(-1, keepdims=True) + eps) * gamma + beta

    h, c, want = np.zeros((B, H)), np.zeros((B, H)), []
    for t in range(T):
        v = (ln(x[:, t] @ haste["kernel"], haste["gamma"][0])
             + ln(h @ haste["recurrent_kernel"], haste["gamma"][1]) + haste["bias"])
        i, g, f, o = np.split(v, 4, axis=-1)  # haste's gate order
        sig = LN.sigmoid
        c = sig(f) * c + sig(i) * np.tanh(g)
        h = sig(o) * np.tanh(ln(c, haste["gamma_h"], haste["beta_h"]))
        want.append(h)
    np.testing.assert_allclose(ours(x), np.stack(want, 1), atol=1e-12)


def test_config_saving_bidirectional_and_fit(tmp_path, rng):
    layer = tlk.LayerNormLSTM(3, norm="paper", norm_center=False, zoneout_h=0.1, dropout=0.2)
    config = layer.get_config()
    assert (config["norm"], config["norm_center"], config["zoneout_h"]) == ("paper", False, 0.1)
    assert config["norm_epsilon"] == 1e-5 and "zoneout_c" not in config
    again = tlk.LayerNormLSTM.from_config(config)
    assert (again.cell.norm, again.cell.zoneout_h, again.cell.dropout) == ("paper", 0.1, 0.2)
    model = keras.Sequential([
        keras.Input((T, I)), keras.layers.Masking(),
        keras.layers.Bidirectional(tlk.LayerNormLSTM(8, zoneout_c=0.1, return_sequences=True)),
        tlk.LayerNormLSTM(4, norm="paper", recurrent_dropout=0.1)])
    model.compile("adam", "mse")
    x, y = rng.uniform(-1, 1, (16, T, I)), rng.uniform(-1, 1, (16, 4))
    before = [w.copy() for w in model.get_weights()]
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    assert all(not np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    path = str(tmp_path / "ln.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0),
                               atol=1e-6)


def test_stateful_and_mixed_precision(rng):
    layer = tlk.LayerNormLSTM(4, stateful=True, return_sequences=True)
    x = rng.uniform(-1, 1, (2, T, I)).astype(np.float32)
    first, second = np.asarray(layer(x)), np.asarray(layer(x))
    assert not np.allclose(first, second)  # the state carried over
    layer.reset_states()
    np.testing.assert_array_equal(layer(x), first)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        half = tlk.LayerNormLSTM(4, return_sequences=True)
        out = half(x)
        assert out.dtype == "float16" and half.weights[0].dtype == "float32"
    finally:
        keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("kwargs, match", [
    (dict(activation="relu"), "activation"), (dict(recurrent_activation="hard_sigmoid"),
                                              "recurrent_activation"),
    (dict(norm="contrib"), "norm"), (dict(norm_epsilon=0.0), "norm_epsilon"),
    (dict(norm_epsilon=-1.0), "norm_epsilon"), (dict(zoneout_h=1.5), "zoneout_h")])
def test_bad_arguments_are_value_errors_naming_them(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tlk.LayerNormLSTM(3, **kwargs)


def test_second_derivatives_where_kerass_layer_normalization_errs(rng):
    """A Hessian-vector product of ours matches finite differences of its gradient; the Keras
    construction's does not (Keras' LayerNormalization on TensorFlow computes the variance with
    tf.nn.moments, which stops the gradient through the mean: docs/layer_norm_lstm.md §4)."""
    ours = tlk.LayerNormLSTM(H, norm_epsilon=EPS, dtype="float64")
    theirs = addons_rnn("addons")
    for layer in (ours, theirs):
        layer.build((None, T, I))
    theirs.set_weights([rng.uniform(-0.7, 0.7, w.shape) + ("gamma" in w.path)
                        for w in theirs.weights])
    ours.set_weights(theirs.get_weights())
    x0 = tf.constant(rng.uniform(-1, 1, (2, T, I)))
    v = tf.constant(rng.uniform(-1, 1, (2, T, I)))

    def gradient(layer, x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(layer(x) ** 3)
        return tape.gradient(loss, x)

    def hvp(layer):
        with tf.GradientTape() as tape:
            tape.watch(x0)
            inner = tf.reduce_sum(gradient(layer, x0) * v)
        return tape.gradient(inner, x0)

    delta = 1e-5
    numeric = (gradient(ours, x0 + delta * v) - gradient(ours, x0 - delta * v)) / (2 * delta)
    np.testing.assert_allclose(hvp(ours), numeric, atol=1e-6)
    assert np.max(np.abs(hvp(theirs) - numeric)) > 1e-3


# ---- tf_keras --------------------------------------------------------------------------------

@pytest.mark.parametrize("extra", [dict(go_backwards=True), dict(time_major=True),
                                   dict(dropout=0.3, recurrent_dropout=0.4)],
                         ids=["go_backwards", "time_major", "dropout"])
@pytest.mark.parametrize("norm", ["addons", "paper"])
def test_tf_keras_twin_equals_the_keras3_layer(rng, norm, extra):
    """tf_lstm_ops.tf_keras.LayerNormLSTM (and its cell in tf_keras' RNN) against the Keras 3
    layer (itself equal to the Keras construction, above) in float64: outputs, states and
    gradients, with a pre-padded mask; dropout with the same masks (tf_keras' draws patched,
    Keras 3's injected): TF Addons' first mask of each kind."""
    tf_keras = pytest.importorskip("tf_keras")
    import tf_lstm_ops.tf_keras as tlk2
    from conftest import tf_keras_dropout_masks

    time_major = extra.get("time_major", False)
    kw = dict(return_sequences=True, return_state=True, norm=norm, dtype="float64",
              **{k: v for k, v in extra.items() if k != "time_major"})
    ours2 = tlk2.LayerNormLSTM(H, time_major=time_major, **kw)
    ours3 = tlk.LayerNormLSTM(H, **kw)
    ours2.build((T, None, I) if time_major else (None, T, I))
    ours3.build((None, T, I))
    ours3.set_weights([rng.uniform(-0.7, 0.7, w.shape) + ("gamma" in w.path)
                       for w in ours3.weights])
    ours2.set_weights(ours3.get_weights())
    masks = [tf.constant((rng.uniform(size=(B, n)) >= 0.35) / 0.65) for n in (I, H)]
    x = rng.uniform(-1, 1, (B, T, I))
    cot = [rng.uniform(-1, 1, (B, T, H))] + [rng.uniform(-1, 1, (B, H)) for _ in range(2)]

    def inject(layer):
        layer.cell._dropout_mask, layer.cell._recurrent_dropout_mask = masks

    want = _run(ours3, x, _pre_padded_mask(), cot, True, inject)
    swap = (lambda a: np.swapaxes(a, 0, 1)) if time_major else (lambda a: a)
    with tf_keras_dropout_masks(ours2.cell, lambda self, inputs, training, count=1: [masks[0]] * 4,
                                lambda self, inputs, training, count=1: [masks[1]] * 4):
        got = _run(ours2, swap(x), swap(_pre_padded_mask()), [swap(cot[0])] + cot[1:], True)
    got[0], got[3] = swap(np.asarray(got[0])), swap(np.asarray(got[3]))
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-10, rtol=1e-9)


def test_tf_keras_cell_is_a_drop_in_for_tf_addons(tmp_path, rng):
    """TF Addons' constructor arguments and variable names (kernel_norm/gamma, ...), a model that
    trains and round-trips through .h5 with zoneout, the cell stepping in tf_keras' RNN."""
    tf_keras = pytest.importorskip("tf_keras")
    import tf_lstm_ops.tf_keras as tlk2

    cell = tlk2.LayerNormLSTMCell(4, norm_gamma_initializer="ones", norm_beta_initializer="zeros",
                                  norm_epsilon=1e-3, unit_forget_bias=True, dropout=0.1)
    layer = tf_keras.layers.RNN(cell, return_sequences=True)
    x = rng.uniform(-1, 1, (3, T, I)).astype(np.float32)
    layer(x)
    assert [w.name.split(cell.name + "/", 1)[1] for w in cell.weights] == [
        "kernel:0", "recurrent_kernel:0", "bias:0", "kernel_norm/gamma:0", "kernel_norm/beta:0",
        "recurrent_norm/gamma:0", "recurrent_norm/beta:0", "state_norm/gamma:0",
        "state_norm/beta:0"]
    model = tf_keras.Sequential([tf_keras.Input((T, I)),
                                 tlk2.LayerNormLSTM(4, zoneout_h=0.1, recurrent_dropout=0.2)])
    model.compile("adam", "mse")
    model.fit(x, rng.uniform(size=(3, 4)), verbose=0)
    path = str(tmp_path / "ln.h5")
    model.save(path)
    loaded = tf_keras.models.load_model(path)
    assert loaded.layers[0].cell.zoneout_h == 0.1
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0),
                               atol=1e-6)
    with pytest.raises(ValueError, match="activation"):
        tlk2.LayerNormLSTMCell(4, activation="relu")
