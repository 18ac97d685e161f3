"""tf_lstm_ops.keras: configs and serialization, Keras-saved weights loading into our layers,
.keras and SavedModel round trips served in a fresh process (and the error naming the plugin
without `import tf_lstm_ops`), MirroredStrategy training equal to single-device training, and
the error under a non-TensorFlow Keras backend. The fresh-process checks run in subprocesses."""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

keras = pytest.importorskip("keras")
if keras.backend.backend() != "tensorflow":  # pragma: no cover
    pytest.skip("Keras backend is not TensorFlow", allow_module_level=True)

import tf_lstm_ops.keras as tlk  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
B, T, I, H = 3, 5, 4, 3


def run_python(script, env_extra=None, timeout=120):
    """Runs `script` in a fresh interpreter (repository on the path); returns the JSON object
    printed on its last stdout line."""
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, "subprocess failed:\n%s\n%s" % (proc.stdout, proc.stderr[-4000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def masked_batch(rng, batch=B, lens=(5, 2, 4)):
    x = rng.uniform(-1, 1, (batch, T, I)).astype(np.float32) + 2.0  # never all-zero rows
    x[np.arange(T)[None, :] >= np.asarray(lens)[:, None]] = 0.0  # Masking(0.0) pads
    return x


# ------------------------------------------------------------------------------------------------
# configs
# ------------------------------------------------------------------------------------------------

FACTORIES = {
    "LSTM": lambda: tlk.LSTM(H, return_sequences=True, go_backwards=True, dropout=0.25, seed=4,
                             unit_forget_bias=False, kernel_regularizer="l2"),
    "GRU": lambda: tlk.GRU(H, return_state=True, use_bias=False, stateful=False),
    "SimpleRNN": lambda: tlk.SimpleRNN(H, activation="relu", zero_output_for_mask=True),
    "CudnnLSTM": lambda: tlk.CudnnLSTM(4, num_layers=2, bidirectional=True, num_proj=2,
                                       dropout=0.1, seed=5, return_sequences=True),
    "CudnnGRU": lambda: tlk.CudnnGRU(H, num_layers=2, return_state=True),
    "CudnnRNN": lambda: tlk.CudnnRNN(H, rnn_mode="rnn_tanh", time_major=True),
    "LSTMBlockCell": lambda: tlk.LSTMBlockCell(H, forget_bias=0.3, cell_clip=1.5,
                                               use_peephole=True),
}


@pytest.mark.parametrize("name", list(FACTORIES))
def test_config_and_serialization_round_trip(name):
    layer = FACTORIES[name]()
    assert type(layer).__name__ == name
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    serialized = keras.saving.serialize_keras_object(layer)
    assert serialized["registered_name"] == "tf_lstm_ops>" + name
    restored = keras.saving.deserialize_keras_object(serialized)
    assert type(restored) is type(layer) and restored.get_config() == config


def test_config_is_keras_config():
    """Our LSTM / GRU / SimpleRNN configs are Keras' configs: a Keras layer can be rebuilt as
    ours from its config and vice versa."""
    for ours, theirs in [(tlk.LSTM, keras.layers.LSTM), (tlk.GRU, keras.layers.GRU),
                         (tlk.SimpleRNN, keras.layers.SimpleRNN)]:
        config = theirs(H, return_sequences=True, dropout=0.1).get_config()
        assert ours.from_config(config).get_config() == config
        assert theirs.from_config(ours(H).get_config()).units == H


def test_weights_saved_from_keras_load_into_ours(tmp_path, rng):
    """A model of Keras' layers saved as .weights.h5 and as .keras loads its weights into the
    same model built from our layers; the predictions are equal (masked)."""
    def build(module, extra):
        inputs = keras.Input((T, I))
        h = keras.layers.Masking()(inputs)
        h = module.LSTM(H, return_sequences=True, **extra)(h)
        h = keras.layers.Bidirectional(module.GRU(H, return_sequences=True, **extra))(h)
        h = module.SimpleRNN(H)(h)
        return keras.Model(inputs, keras.layers.Dense(2)(h))

    theirs = build(keras.layers, dict(use_cudnn=False))
    theirs.set_weights([rng.uniform(-0.7, 0.7, np.shape(w)).astype(np.float32)
                        for w in theirs.get_weights()])
    theirs.save_weights(str(tmp_path / "keras.weights.h5"))
    theirs.save(str(tmp_path / "keras.keras"))
    x = masked_batch(rng)
    expected = theirs.predict(x, verbose=0)
    for path in ("keras.weights.h5", "keras.keras"):
        ours = build(tlk, {})
        ours.load_weights(str(tmp_path / path))
        np.testing.assert_allclose(ours.predict(x, verbose=0), expected, atol=2e-5,
                                   err_msg=path)


# ------------------------------------------------------------------------------------------------
# .keras and SavedModel in a fresh process
# ------------------------------------------------------------------------------------------------

def all_layers_model():
    keras.utils.set_random_seed(1)
    inputs = keras.Input((T, I))
    h = keras.layers.Masking()(inputs)
    h = tlk.LSTM(H, return_sequences=True)(h)
    h = keras.layers.Bidirectional(tlk.GRU(H, return_sequences=True))(h)
    h = tlk.SimpleRNN(H, return_sequences=True, go_backwards=True)(h)
    h = tlk.CudnnLSTM(4, num_layers=2, bidirectional=True, num_proj=2, return_sequences=True)(h)
    h = keras.layers.RNN(tlk.LSTMBlockCell(H, use_peephole=True, cell_clip=2.0),
                         return_sequences=True)(h)
    h = tlk.CudnnGRU(H)(h)
    return keras.Model(inputs, keras.layers.Dense(2)(h))


def test_keras_file_and_saved_model_round_trip_in_a_fresh_process(tmp_path, rng):
    model = all_layers_model()
    x = masked_batch(rng)
    expected = model.predict(x, verbose=0)
    model.save(str(tmp_path / "model.keras"))
    tf.saved_model.save(model, str(tmp_path / "saved_model"))
    np.savez(tmp_path / "io.npz", x=x, expected=expected)
    result = run_python("""
        import json, sys
        import numpy as np
        import tensorflow as tf
        path = %r
        io = np.load(path + "/io.npz")
        out = {}
        try:  # without the plugin: TF does not know our op type
            tf.saved_model.load(path + "/saved_model")
            out["without_import"] = "loaded"
        except Exception as e:
            out["without_import"] = "%%s: %%s" %% (type(e).__name__, e)
        import tf_lstm_ops
        served = tf.saved_model.load(path + "/saved_model").signatures["serving_default"]
        y = list(served(tf.constant(io["x"])).values())[0].numpy()
        out["saved_model_err"] = float(np.max(np.abs(y - io["expected"])))
        import keras
        import tf_lstm_ops.keras
        model = keras.saving.load_model(path + "/model.keras")
        out["layers"] = sorted({type(l).__module__ + "." + type(l).__name__
                                for l in model._flatten_layers()})
        y = model.predict(io["x"], verbose=0)
        out["keras_err"] = float(np.max(np.abs(y - io["expected"])))
        print(json.dumps(out))
    """ % str(tmp_path))
    # TF names the unknown op type: the plugin's namespace 'TfLstm>'
    assert "Op type not registered 'TfLstm>" in result["without_import"], result["without_import"]
    assert result["saved_model_err"] <= 1e-6
    assert result["keras_err"] <= 1e-6
    for name in ("LSTM", "GRU", "SimpleRNN", "CudnnLSTM", "CudnnGRU", "LSTMBlockCell"):
        assert "tf_lstm_ops.keras." + name in result["layers"]


# ------------------------------------------------------------------------------------------------
# MirroredStrategy
# ------------------------------------------------------------------------------------------------

def test_mirrored_strategy_training_equals_single_device():
    """Two logical CPU devices: MirroredStrategy training (per-replica half batches, gradients
    all-reduced) ends with the same weights as single-device training on the same global
    batches."""
    result = run_python("""
        import json
        import tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        import numpy as np
        import keras
        import tf_lstm_ops.keras as tlk

        T, I = 6, 3
        def build():
            inputs = keras.Input((T, I))
            h = keras.layers.Masking()(inputs)
            h = tlk.LSTM(6, return_sequences=True)(h)
            h = keras.layers.Bidirectional(tlk.GRU(4, return_sequences=True))(h)
            h = tlk.CudnnLSTM(4, num_layers=2, num_proj=3, return_sequences=True)(h)
            h = tlk.SimpleRNN(5)(h)
            model = keras.Model(inputs, keras.layers.Dense(1)(h))
            model.compile(optimizer=keras.optimizers.SGD(0.2), loss="mse")
            return model

        rng = np.random.default_rng(0)
        x = rng.uniform(-1, 1, (32, T, I)).astype(np.float32) + 2.0
        lens = rng.integers(1, T + 1, 32)
        x[np.arange(T)[None, :] >= lens[:, None]] = 0.0
        y = rng.uniform(-1, 1, (32, 1)).astype(np.float32)

        keras.utils.set_random_seed(0)
        single = build()
        initial = single.get_weights()
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with strategy.scope():
            mirrored = build()
        mirrored.set_weights(initial)
        h1 = single.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history
        h2 = mirrored.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history
        diffs = [float(np.max(np.abs(a - b)))
                 for a, b in zip(single.get_weights(), mirrored.get_weights())]
        moved = max(float(np.max(np.abs(a - b)))
                    for a, b in zip(initial, single.get_weights()))
        print(json.dumps(dict(replicas=strategy.num_replicas_in_sync, max_diff=max(diffs),
                              moved=moved, loss1=h1["loss"], loss2=h2["loss"])))
    """)
    assert result["replicas"] == 2
    assert result["moved"] > 1e-2  # training changed the weights
    assert result["max_diff"] <= 2e-5, result
    np.testing.assert_allclose(result["loss2"], result["loss1"], rtol=1e-4)


# ------------------------------------------------------------------------------------------------
# non-TensorFlow backend
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["jax", "torch", "numpy"])
def test_non_tensorflow_backend_is_a_clear_error(monkeypatch, backend):
    """Constructing any layer under another Keras backend is a RuntimeError naming the backend.
    (No other backend is importable in this venv: the backend Keras reports is patched.)"""
    monkeypatch.setattr(keras.backend, "backend", lambda: backend)
    for cls in (tlk.LSTM, tlk.GRU, tlk.SimpleRNN, tlk.CudnnLSTM, tlk.CudnnGRU, tlk.CudnnRNN,
                tlk.LSTMBlockCell):
        with pytest.raises(RuntimeError, match="needs Keras' TensorFlow backend, but Keras is "
                                               "using the '%s' backend" % backend):
            cls(3)
    monkeypatch.undo()
    assert tlk.LSTM(3).units == 3


# ------------------------------------------------------------------------------------------------
# tf_keras (Keras 2, TF_USE_LEGACY_KERAS=1)
# ------------------------------------------------------------------------------------------------

def test_tf_keras_models_refuse_our_keras3_layers_loudly():
    """Under TF_USE_LEGACY_KERAS=1 tf.keras is tf_keras: its Sequential rejects a Keras 3 layer
    itself, and its functional API would silently wrap our ops in TFOpLambda layers whose weights
    never train; our layers refuse tf_keras tensors with a TypeError instead."""
    if importlib.util.find_spec("tf_keras") is None:
        pytest.fail("tf_keras is not installed: ./configure.sh installs the pinned version")
    result = run_python("""
        import json
        import tensorflow as tf
        import tf_lstm_ops.keras as tlk
        assert tf.keras.__name__.startswith("tf_keras"), tf.keras.__name__
        errors = {}
        for name in ("LSTM", "GRU", "SimpleRNN", "CudnnLSTM"):
            try:
                getattr(tlk, name)(4)(tf.keras.Input((5, 3)))
                errors[name] = None
            except TypeError as e:
                errors[name] = str(e)
        try:
            tf.keras.Sequential([tf.keras.Input((5, 3)), tlk.LSTM(4)])
            sequential = None
        except TypeError as e:
            sequential = str(e)
        print(json.dumps(dict(errors=errors, sequential=sequential)))
    """, env_extra={"TF_USE_LEGACY_KERAS": "1"})
    for name, message in result["errors"].items():
        assert message and "is a Keras 3 layer and was called on a tf_keras" in message, name
    assert result["sequential"] and "must be an instance of class Layer" in result["sequential"]
