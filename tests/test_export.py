"""tf_lstm_ops.keras.to_stock_keras: a model of our layers as stock Keras layers with identical
weights (equal outputs), which TFLiteConverter turns into builtin TFLite ops only, run by
tf.lite.Interpreter to the same outputs; what has no stock twin is a clear error."""

import os
import warnings

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

import tf_lstm_ops.keras as tlk  # noqa: E402

B, T, I = 3, 6, 4


def inputs(rng):
    x = rng.uniform(-1, 1, (B, T, I)).astype(np.float32) + 2.0
    x[1, 4:] = 0.0  # right-padded examples, masked by Masking
    x[2, 2:] = 0.0
    return x


def randomise(rng, model):
    model.set_weights([rng.uniform(-0.5, 0.5, w.shape).astype(np.float32)
                       for w in model.get_weights()])


def functional_model():
    inp = keras.Input((T, I), batch_size=B)
    h = keras.layers.Masking()(inp)
    h = tlk.LSTM(5, return_sequences=True)(h)
    h = keras.layers.Bidirectional(tlk.GRU(4, return_sequences=True))(h)
    h = tlk.CudnnLSTM(4, num_layers=2, bidirectional=True, return_sequences=True, dropout=0.1)(h)
    h = tlk.CudnnRNN(3, rnn_mode="rnn_tanh", num_layers=2, return_sequences=True)(h)
    h = tlk.SimpleRNN(3, activation="relu", return_sequences=True)(h)
    h = tlk.CudnnGRU(3, num_layers=2)(h)
    return keras.Model(inp, keras.layers.Dense(2)(h))


def sequential_model():
    return keras.Sequential([
        keras.Input((T, I), batch_size=B),
        keras.layers.Masking(),
        tlk.CudnnGRU(4, num_layers=2, bidirectional=True, return_sequences=True),
        tlk.LSTM(3),
        keras.layers.Dense(1),
    ])


def tflite_run(model, x):
    converted = tf.lite.TFLiteConverter.from_keras_model(model).convert()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tf.lite.Interpreter's deprecation notice
        interpreter = tf.lite.Interpreter(model_content=converted)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    ops = {op["op_name"] for op in interpreter._get_ops_details()}
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"]), ops


@pytest.mark.parametrize("build", [functional_model, sequential_model])
def test_stock_model_equals_ours_and_runs_in_tflite_without_custom_ops(rng, build):
    ours = build()
    randomise(rng, ours)
    x = inputs(rng)
    stock = tlk.to_stock_keras(ours)
    assert all(type(layer).__module__.startswith("keras.") for layer in stock.layers), [
        type(layer) for layer in stock.layers]
    expected = np.asarray(ours(x))
    np.testing.assert_allclose(stock(x), expected, atol=2e-5)
    got, ops = tflite_run(stock, x)
    assert not [op for op in ops if op.startswith("Flex") or op == "CUSTOM"], ops
    np.testing.assert_allclose(got, expected, atol=2e-5)


@pytest.mark.parametrize("layer, match", [
    (lambda: tlk.CudnnLSTM(4, num_proj=2), "num_proj=2: Keras has no projection LSTM"),
    (lambda: tlk.CudnnLSTM(4, time_major=True), "time_major"),
    (lambda: keras.layers.RNN(tlk.LSTMBlockCell(4, use_peephole=True)), "LSTMBlockCell"),
    (lambda: tlk.LSTM(4, zoneout_c=0.1), "zoneout_c=0.1: Keras' layers have no zoneout"),
    (lambda: keras.layers.Bidirectional(tlk.GRU(4, zoneout=0.2)), "zoneout=0.2"),
])
def test_layers_without_a_stock_twin_are_named(layer, match):
    inp = keras.Input((T, I), batch_size=B)
    model = keras.Model(inp, layer()(inp))
    with pytest.raises(ValueError, match="has no stock Keras twin: .*" + match):
        tlk.to_stock_keras(model)


def test_return_state_has_no_twin():
    inp = keras.Input((T, I), batch_size=B)
    out, h, c = tlk.CudnnLSTM(4, return_state=True)(inp)
    with pytest.raises(ValueError, match="return_state=True"):
        tlk.to_stock_keras(keras.Model(inp, out))
