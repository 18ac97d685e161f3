"""tf_lstm_ops.tf_keras: the drop-in LSTM / GRU / SimpleRNN for tf_keras (Keras 2) against
tf_keras' own layers (outputs, states and gradients with the same weights; masks, go_backwards,
the configurations that run tf_keras' own call), and, with TF_USE_LEGACY_KERAS=1 in a fresh
interpreter, Sequential and functional tf.keras models that train every weight like tf_keras'
and round-trip through .h5 and SavedModel."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

tf_keras = pytest.importorskip("tf_keras", reason="./configure.sh installs the pinned tf_keras")
import tf_lstm_ops.tf_keras as tlk2  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
B, T, I, H = 3, 5, 4, 3
KINDS = {"lstm": ("LSTM", {}), "gru": ("GRU", {}), "rnn_tanh": ("SimpleRNN", {}),
         "rnn_relu": ("SimpleRNN", dict(activation="relu"))}


def masks():
    right = np.arange(T)[None, :] < np.array([5, 2, 0])[:, None]
    hole = right.copy()
    hole[0, 2] = False
    holes = np.array([[1, 0, 1, 0, 1], [0, 1, 1, 0, 0], [0, 0, 0, 0, 1]], bool)
    return {"none": None, "right_padded": right, "pre_padded": right[:, ::-1].copy(),
            "hole": hole, "holes": holes, "none_valid": np.zeros((B, T), bool)}


def pair(rng, kind, **kw):
    name, extra = KINDS[kind]
    ours = getattr(tlk2, name)(H, **extra, **kw)
    theirs = getattr(tf_keras.layers, name)(H, **extra, **kw)
    for layer in (ours, theirs):
        layer.build((None, T, I))
    theirs.set_weights([rng.uniform(-0.8, 0.8, w.shape).astype(np.float32)
                        for w in ours.get_weights()])
    ours.set_weights(theirs.get_weights())
    return ours, theirs


def outputs_and_grads(layer, x, mask, cot):
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        outs = layer(x, mask=None if mask is None else tf.constant(mask))
        outs = outs if isinstance(outs, list) else [outs]
        loss = sum(tf.reduce_sum(o * c) for o, c in zip(outs, cot))
    grads = tape.gradient(loss, [x] + layer.trainable_weights)
    return [np.asarray(o) for o in outs], [np.asarray(g) for g in grads]


@pytest.mark.parametrize("mask", list(masks()))
@pytest.mark.parametrize("go_backwards", [False, True])
@pytest.mark.parametrize("kind", list(KINDS))
def test_equal_to_tf_keras(rng, caplog, kind, go_backwards, mask):
    """Every mask pattern runs the fused op (no fallback warning) with tf_keras' results."""
    ours, theirs = pair(rng, kind, return_sequences=True, return_state=True,
                        go_backwards=go_backwards)
    x = rng.uniform(-1, 1, (B, T, I)).astype(np.float32)
    n_states = 2 if kind == "lstm" else 1
    cot = [rng.uniform(-1, 1, (B, T, H)).astype(np.float32)] + [
        rng.uniform(-1, 1, (B, H)).astype(np.float32) for _ in range(n_states)]
    with caplog.at_level("INFO", logger="tf_lstm_ops"):
        got = outputs_and_grads(ours, x, masks()[mask], cot)
    assert "tf_lstm_ops" not in caplog.text
    want = outputs_and_grads(theirs, x, masks()[mask], cot)
    for a, b in zip(got[0] + got[1], want[0] + want[1]):
        np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("mask", ["none", "pre_padded", "holes"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_time_major_and_use_bias_false_run_the_kernel(rng, caplog, kind, mask):
    """time_major=True (inputs, mask and outputs time-major) and use_bias=False (tf_keras' own
    per-step loop then) on the fused op: tf_keras' outputs, states and gradients, no fallback."""
    for kwargs in (dict(time_major=True), dict(use_bias=False),
                   dict(use_bias=False, time_major=True, go_backwards=True)):
        ours, theirs = pair(rng, kind, return_sequences=True, return_state=True, **kwargs)
        x = rng.uniform(-1, 1, (B, T, I)).astype(np.float32)
        step_mask = masks()[mask]
        n_states = 2 if kind == "lstm" else 1
        cot = [rng.uniform(-1, 1, (B, T, H)).astype(np.float32)] + [
            rng.uniform(-1, 1, (B, H)).astype(np.float32) for _ in range(n_states)]
        if kwargs.get("time_major"):
            x, cot[0] = x.transpose(1, 0, 2).copy(), cot[0].transpose(1, 0, 2).copy()
            step_mask = None if step_mask is None else step_mask.T.copy()
        with caplog.at_level("INFO", logger="tf_lstm_ops"):
            got = outputs_and_grads(ours, x, step_mask, cot)
        assert "tf_lstm_ops" not in caplog.text, kwargs
        want = outputs_and_grads(theirs, x, step_mask, cot)
        for a, b in zip(got[0] + got[1], want[0] + want[1]):
            np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-5, err_msg=str(kwargs))


FUSED = ["tanh", "sigmoid", "relu", "hard_sigmoid", "linear", "elu", "softsign", "swish", "gelu",
         tf.nn.silu]


@pytest.mark.parametrize("activation", FUSED, ids=lambda a: getattr(a, "__name__", a))
@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_tanh"])
def test_fused_activations_equal_tf_keras(rng, caplog, kind, activation):
    """Each fused activation (tf_keras' own: its hard_sigmoid is 0.2x + 0.5) as `activation` and
    as `recurrent_activation`, with a mask and go_backwards, in float64: the kernel runs (no
    fallback) with tf_keras' outputs, states and gradients."""
    variants = [dict(activation=activation)]
    if kind != "rnn_tanh":
        variants.append(dict(recurrent_activation=activation))
    for args in variants:
        ours, theirs = pair(rng, kind, return_sequences=True, return_state=True,
                            go_backwards=True, dtype="float64", **args)
        x = rng.uniform(-1.5, 1.5, (B, T, I))
        n_states = 2 if kind == "lstm" else 1
        cot = [rng.uniform(-1, 1, (B, T, H))] + [rng.uniform(-1, 1, (B, H))
                                                 for _ in range(n_states)]
        with caplog.at_level("INFO", logger="tf_lstm_ops"):
            got = outputs_and_grads(ours, x, masks()["holes"], cot)
        assert "tf_lstm_ops" not in caplog.text, args
        want = outputs_and_grads(theirs, x, masks()["holes"], cot)
        tol = 1e-6 if getattr(activation, "__name__", activation) == "gelu" else 1e-9  # TF's erfc
        for a, b in zip(got[0] + got[1], want[0] + want[1]):
            np.testing.assert_allclose(a, b, atol=tol, rtol=tol, err_msg=str(args))


@pytest.mark.parametrize("use_bias, activation", [(True, "tanh"), (False, "tanh"),
                                                  (True, "relu")])
@pytest.mark.parametrize("kind", list(KINDS))
def test_input_dropout_is_the_mask_tf_keras_applies(rng, kind, use_bias, activation):
    """Injected masks (tf_keras' get_dropout_mask_for_cell patched on both layers): with bias,
    LSTM and GRU run tf_keras' cuDNN-compatible path, whose mask covers every step ([B, T, I]);
    without (and SimpleRNN) its per-step loop, one [B, I] mask for every step. Ours applies the
    same mask: equal outputs and gradients while training. Activations other than tanh/sigmoid
    also make tf_keras loop."""
    extra = {} if kind == "rnn_relu" else dict(activation=activation)  # rnn_relu: relu already
    ours, theirs = pair(rng, kind, return_sequences=True, dropout=0.5, use_bias=use_bias, **extra)
    x = rng.uniform(-1, 1, (B, T, I)).astype(np.float32)
    drawn = {}

    def fixed(shape):
        key = tuple(shape)
        if key not in drawn:
            drawn[key] = (rng.uniform(size=key) < 0.5).astype(np.float32) * 2.0
        return tf.constant(drawn[key])

    def patched(self, inputs, training, count=1):
        masks_ = [fixed(inputs.shape) * (k + 1) for k in range(count)]
        return masks_ if count > 1 else masks_[0]

    cot = [rng.uniform(-1, 1, (B, T, H)).astype(np.float32)]
    with pytest.MonkeyPatch.context() as patch:
        mixin = type(theirs.cell).__mro__
        owner = next(c for c in mixin if "get_dropout_mask_for_cell" in vars(c))
        patch.setattr(owner, "get_dropout_mask_for_cell", patched)
        got = outputs_and_grads_training(ours, x, cot)
        want = outputs_and_grads_training(theirs, x, cot)
    assert drawn, "no mask was drawn"
    for a, b in zip(got[0] + got[1], want[0] + want[1]):
        np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-5)


def outputs_and_grads_training(layer, x, cot):
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        outs = layer(x, training=True)
        loss = tf.reduce_sum(outs * cot[0])
    grads = tape.gradient(loss, [x] + layer.trainable_weights)
    return [np.asarray(outs)], [np.asarray(g) for g in grads]


@pytest.mark.parametrize("kind, kwargs, reason", [
    ("lstm", dict(activation="selu"), "activation='selu'"),
    ("lstm", dict(recurrent_activation="exponential"), "recurrent_activation='exponential'"),
    ("lstm", dict(unroll=True), "unroll"),
    ("rnn_tanh", dict(activation="mish"), "activation='mish'"),
])
def test_what_the_kernel_cannot_serve_runs_tf_keras(rng, caplog, kind, kwargs, reason):
    ours, theirs = pair(rng, kind, return_sequences=True, **kwargs)
    x = rng.uniform(-1, 1, (T, B, I) if kwargs.get("time_major") else (B, T, I))
    x = x.astype(np.float32)
    with caplog.at_level("WARNING", logger="tf_lstm_ops"):
        got = ours(x)
    np.testing.assert_allclose(got, theirs(x), atol=1e-6)
    assert reason in caplog.text


def run_legacy_keras(script):
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_legacy_keras_models_train_and_round_trip(tmp_path):
    result = run_legacy_keras("""
        import json
        import numpy as np
        import tensorflow as tf
        import tf_lstm_ops.tf_keras as tlk2
        assert tf.keras.__name__.startswith("tf_keras"), tf.keras.__name__
        T, I = 6, 3

        def sequential(layers):
            return tf.keras.Sequential([
                tf.keras.Input((T, I)), tf.keras.layers.Masking(),
                layers.LSTM(5, return_sequences=True),
                tf.keras.layers.Bidirectional(layers.GRU(4, return_sequences=True)),
                layers.SimpleRNN(3), tf.keras.layers.Dense(1)])

        def functional(layers):
            inputs = tf.keras.Input((T, I))
            h = layers.LSTM(4, return_sequences=True)(inputs)
            h = layers.GRU(3)(h)
            return tf.keras.Model(inputs, tf.keras.layers.Dense(1)(h))

        rng = np.random.default_rng(0)
        x = rng.uniform(-1, 1, (16, T, I)).astype(np.float32) + 2.0
        x[np.arange(T)[None, :] >= rng.integers(1, T + 1, 16)[:, None]] = 0.0
        y = rng.uniform(-1, 1, (16, 1)).astype(np.float32)
        report = {}
        for name, build in (("sequential", sequential), ("functional", functional)):
            ours, theirs = build(tlk2), build(tf.keras.layers)
            theirs.set_weights([rng.uniform(-0.5, 0.5, w.shape).astype(np.float32)
                                for w in theirs.get_weights()])
            ours.set_weights(theirs.get_weights())
            initial = ours.get_weights()
            for model in (ours, theirs):
                model.compile(optimizer=tf.keras.optimizers.SGD(0.3), loss="mse")
                model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
            trained = ours.get_weights()
            entry = dict(
                max_diff=max(float(np.max(np.abs(a - b)))
                             for a, b in zip(trained, theirs.get_weights())),
                unchanged=sum(bool(np.array_equal(a, b)) for a, b in zip(initial, trained)),
                trainable=len(ours.trainable_weights), weights=len(trained))
            predicted = ours.predict(x, verbose=0)
            for fmt, path in (("h5", "%s/%s.h5"), ("savedmodel", "%s/%s_saved")):
                target = path % (r"TMP", name)
                ours.save(target)
                loaded = tf.keras.models.load_model(target)
                entry[fmt] = float(np.max(np.abs(loaded.predict(x, verbose=0) - predicted)))
                entry[fmt + "_classes"] = sorted({type(l).__module__ for l in loaded.layers
                                                  if "lstm_ops" in type(l).__module__})
            report[name] = entry
        print(json.dumps(report))
    """.replace("TMP", str(tmp_path)))
    for name, entry in result.items():
        assert entry["trainable"] == entry["weights"], entry
        assert entry["unchanged"] == 0, (name, entry)  # fit trained every weight
        assert entry["max_diff"] <= 2e-5, (name, entry)  # like tf_keras' own layers
        assert entry["h5"] <= 1e-6 and entry["savedmodel"] <= 1e-6, (name, entry)
        assert entry["h5_classes"] == ["tf_lstm_ops.tf_keras"], (name, entry)


@pytest.mark.parametrize("use_mask", [False, True])
@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_tanh"])
def test_stateful_layers_carry_their_state_like_tf_keras(rng, caplog, kind, use_mask):
    """Also with a pre-padded mask, in a graph: one fused path, no fallback."""
    name, extra = KINDS[kind]
    ours = getattr(tlk2, name)(H, stateful=True, return_sequences=True, **extra)
    theirs = getattr(tf_keras.layers, name)(H, stateful=True, return_sequences=True, **extra)
    for layer in (ours, theirs):
        layer.build((B, T, I))  # stateful layers need the batch size
    theirs.set_weights([rng.uniform(-0.8, 0.8, w.shape).astype(np.float32)
                        for w in ours.get_weights()])
    ours.set_weights(theirs.get_weights())
    x = rng.uniform(-1, 1, (B, T, I)).astype(np.float32)
    mask = tf.constant(masks()["pre_padded"]) if use_mask else None
    call_ours = tf.function(lambda x: ours(x, mask=mask))
    call_theirs = tf.function(lambda x: theirs(x, mask=mask))
    with caplog.at_level("INFO", logger="tf_lstm_ops"):
        for step in range(3):  # the state of each call starts the next, eagerly and in a graph
            np.testing.assert_allclose(ours(x, mask=mask), theirs(x, mask=mask), atol=2e-5,
                                       err_msg="eager %d" % step)
            np.testing.assert_allclose(call_ours(x), call_theirs(x), atol=2e-5,
                                       err_msg="graph %d" % step)
    assert "tf_lstm_ops" not in caplog.text


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("mask", [np.ones((B, T + 1), bool), np.ones((B, 0), bool)],
                         ids=["more_steps", "no_steps"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_mask_that_does_not_fit_the_inputs_is_an_error(rng, kind, mask, graph):
    layer = getattr(tlk2, KINDS[kind][0])(H, **KINDS[kind][1])
    x = tf.constant(rng.uniform(-1, 1, (B, T, I)).astype(np.float32))
    call = tf.function(lambda x, m: layer(x, mask=m)) if graph else (
        lambda x, m: layer(x, mask=m))
    with pytest.raises(tf.errors.InvalidArgumentError, match="mask must have the shape"):
        call(x, tf.constant(mask))


def _values_tensor(t):
    return t.flat_values if isinstance(t, tf.RaggedTensor) else t


def _values(t):
    return _values_tensor(t).numpy()


@pytest.mark.parametrize("go_backwards", [False, True])
@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_tanh"])
def test_ragged_inputs_run_the_kernel(rng, caplog, kind, go_backwards):
    """A RaggedTensor input (tf_keras pads it and uses its row lengths): ours runs the kernel,
    eagerly and in a tf.function, and returns what tf_keras returns, a RaggedTensor of the
    sequence outputs (in processing order with go_backwards) and dense states, with equal
    gradients, in float64."""
    rows = [rng.uniform(-1, 1, (n, I)) for n in (T, 1, 3, 2)]
    x = tf.ragged.constant([r.tolist() for r in rows], ragged_rank=1, dtype=tf.float64)
    ours, theirs = pair(rng, kind, return_sequences=True, return_state=True,
                        go_backwards=go_backwards, dtype="float64")

    def run(layer):
        with tf.GradientTape() as tape:
            outs = layer(x)
            loss = sum(tf.reduce_sum(tf.sin(_values_tensor(o))) for o in outs)
        return outs, tape.gradient(loss, layer.trainable_weights)

    with caplog.at_level("INFO", logger="tf_lstm_ops"):
        got = run(ours)
        in_graph = tf.function(lambda v: ours(v))(x)
    assert "tf_lstm_ops" not in caplog.text
    want = run(theirs)
    assert isinstance(got[0][0], tf.RaggedTensor) and isinstance(in_graph[0], tf.RaggedTensor)
    np.testing.assert_array_equal(got[0][0].row_lengths(), want[0][0].row_lengths())
    for a, b in zip(list(got[0]) + got[1], list(want[0]) + want[1]):
        np.testing.assert_allclose(_values(a), _values(b), atol=1e-12)
    for a, b in zip(in_graph, want[0]):
        np.testing.assert_allclose(_values(a), _values(b), atol=1e-12)
