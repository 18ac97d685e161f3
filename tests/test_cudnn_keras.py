"""Keras 3 compatibility (docs/cudnn_rnn.md §6.5): Keras LSTM and GRU(reset_after=True) CPU layers,
with their weights converted to cuDNN params, give the same numbers as CudnnRNNV3 on CPU (our raw op
and tf.raw_ops.CudnnRNNV3), with and without masks. And Keras's own cuDNN code path (normally taken
only with a GPU) runs on CPU through the plugin and agrees with Keras's CPU path, forward and
backward."""

import os

import numpy as np
import pytest
import tensorflow as tf

from tools.references import cudnn_rnn as R

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
keras = pytest.importorskip("keras")
if keras.backend.backend() != "tensorflow":  # pragma: no cover
    pytest.skip("Keras backend is not TensorFlow", allow_module_level=True)

T_, B_, I_, H_ = 5, 3, 4, 3
LENS = np.array([5, 2, 4])
WHERE = ("plugin", "tf")


@pytest.fixture(scope="module", autouse=True)
def plugin():
    import tf_lstm_ops

    tf_lstm_ops.load_library()


def make_layer(mode, **kw):
    cls = keras.layers.LSTM if mode == "lstm" else keras.layers.GRU
    extra = {} if mode == "lstm" else dict(reset_after=True)
    return cls(H_, return_sequences=True, return_state=True, **extra, **kw)


def randomize(rng, layer, shape):
    layer.build(shape)
    ws = [rng.uniform(-0.8, 0.8, np.shape(w)).astype(np.float32) for w in layer.get_weights()]
    layer.set_weights(ws)
    return ws


def masked(a, mask):
    return np.asarray(a) * mask[..., None]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("mode", ["lstm", "gru"])
@pytest.mark.parametrize("use_mask", [False, True])
@pytest.mark.parametrize("time_major", [False, True])
def test_keras_cpu_layer_equals_cudnn_v3(rng, where, mode, use_mask, time_major):
    x = rng.uniform(-1, 1, (B_, T_, I_)).astype(np.float32)
    h0 = rng.uniform(-1, 1, (B_, H_)).astype(np.float32)
    c0 = rng.uniform(-1, 1, (B_, H_)).astype(np.float32)
    lens = LENS if use_mask else np.full(B_, T_)
    mask = np.arange(T_)[None, :] < lens[:, None]
    layer = make_layer(mode, use_cudnn=False)
    ws = randomize(rng, layer, (B_, T_, I_))
    init = [h0, c0] if mode == "lstm" else [h0]
    expected = [np.asarray(a) for a in layer(x, initial_state=init,
                                              mask=mask if use_mask else None)]
    cfg = R.Cfg(mode, 1, H_, I_)
    params = R.keras_to_params(cfg, [[w.astype(np.float64) for w in ws]])
    axis = 0 if time_major else 1  # Keras inserts the state axis at the sequence axis
    out = R.get_op(where, "CudnnRNNV3")(
        input=tf.constant(x.transpose(1, 0, 2) if time_major else x),
        input_h=tf.constant(np.expand_dims(h0, axis)),
        input_c=tf.constant(np.expand_dims(c0, axis)) if mode == "lstm" else tf.constant(0.0),
        params=tf.constant(params, tf.float32),
        sequence_lengths=tf.constant(lens, tf.int32),
        rnn_mode=mode, time_major=time_major, is_training=True)
    y = out.output.numpy()
    y = y.transpose(1, 0, 2) if time_major else y
    np.testing.assert_allclose(masked(y, mask), masked(expected[0], mask), atol=1e-5, rtol=0)
    assert np.all(y[~mask] == 0.0)  # cuDNN pads with zeros (Keras' CPU path carries h forward)
    np.testing.assert_allclose(np.squeeze(out.output_h.numpy(), axis), expected[1], atol=1e-5,
                               rtol=0)
    if mode == "lstm":
        np.testing.assert_allclose(np.squeeze(out.output_c.numpy(), axis), expected[2],
                                   atol=1e-5, rtol=0)


# ----------------------------------------------------------------------------------------------
# Keras's own cuDNN path, forced on CPU
# ----------------------------------------------------------------------------------------------

@pytest.fixture
def keras_cudnn_path(monkeypatch):
    """Makes Keras believe a GPU is present on a CUDA build (so LSTM/GRU take their cuDNN branch,
    which calls tf.raw_ops.CudnnRNNV3) and counts the CudnnRNNV3 calls."""
    import importlib

    keras_tf_rnn = importlib.import_module("keras.src.backend.tensorflow.rnn")

    if not hasattr(keras_tf_rnn, "_is_gpu_available"):
        pytest.skip("this Keras version has no _is_gpu_available switch")
    monkeypatch.setattr(keras_tf_rnn, "_is_gpu_available", lambda: True)
    # Keras swaps the GRU gates z, r -> r, z only "if is_cuda_build" (a CPU TF build would pack
    # them for ROCm); emulate the CUDA build that this path is written for.
    real_info = tf.sysconfig.get_build_info
    monkeypatch.setattr(tf.sysconfig, "get_build_info",
                        lambda: dict(real_info(), is_cuda_build=True, is_rocm_build=False))
    calls = []
    real = tf.raw_ops.CudnnRNNV3

    def counting(**kw):
        calls.append(kw.get("rnn_mode"))
        return real(**kw)

    monkeypatch.setattr(tf.raw_ops, "CudnnRNNV3", counting)
    return calls


@pytest.mark.parametrize("mode", ["lstm", "gru"])
@pytest.mark.parametrize("use_mask", [False, True])
@pytest.mark.parametrize("go_backwards", [False, True])
def test_keras_cudnn_path_on_cpu_matches_keras_cpu_path(rng, keras_cudnn_path, mode, use_mask,
                                                       go_backwards):
    x = tf.constant(rng.uniform(-1, 1, (B_, T_, I_)).astype(np.float32))
    init = [tf.constant(rng.uniform(-1, 1, (B_, H_)).astype(np.float32))
            for _ in range(2 if mode == "lstm" else 1)]
    lens = LENS if use_mask else np.full(B_, T_)
    mask = np.arange(T_)[None, :] < lens[:, None]
    cpu = make_layer(mode, use_cudnn=False, go_backwards=go_backwards)
    ws = randomize(rng, cpu, (B_, T_, I_))
    gpu = make_layer(mode, use_cudnn=True, go_backwards=go_backwards)
    gpu.build((B_, T_, I_))
    gpu.set_weights(ws)

    def run(layer):
        with tf.GradientTape() as tape:
            tape.watch(x)
            outs = layer(x, initial_state=init, mask=tf.constant(mask) if use_mask else None)
            # a loss over valid outputs and the final states
            loss = tf.reduce_sum(outs[0] * tf.cast(mask[..., None], tf.float32) * 0.7)
            for s in outs[1:]:
                loss += tf.reduce_sum(s * s)
        grads = tape.gradient(loss, [x] + layer.trainable_weights)
        return [np.asarray(o) for o in outs], [np.asarray(g) for g in grads]

    n_before = len(keras_cudnn_path)
    outs_gpu, grads_gpu = run(gpu)
    assert len(keras_cudnn_path) > n_before, "Keras did not take its cuDNN path"
    outs_cpu, grads_cpu = run(cpu)
    np.testing.assert_allclose(masked(outs_gpu[0], mask), masked(outs_cpu[0], mask), atol=1e-5,
                               rtol=0)
    for a, b in zip(outs_gpu[1:], outs_cpu[1:]):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    for k, (a, b) in enumerate(zip(grads_gpu, grads_cpu)):
        np.testing.assert_allclose(a, b, atol=5e-5, rtol=1e-5, err_msg="gradient %d" % k)


def test_keras_cudnn_path_bidirectional_model_fit(rng, keras_cudnn_path):
    """A small Bidirectional(LSTM) + GRU model trains through CudnnRNNV3 / BackpropV3 on CPU and
    its loss matches the same model on Keras's CPU path after identical training steps."""
    x = rng.uniform(-1, 1, (8, T_, I_)).astype(np.float32)
    y = rng.uniform(-1, 1, (8, 1)).astype(np.float32)

    def build(use_cudnn):
        keras.utils.set_random_seed(1)
        inputs = keras.Input((T_, I_))
        h = keras.layers.Bidirectional(keras.layers.LSTM(H_, return_sequences=True,
                                                         use_cudnn=use_cudnn))(inputs)
        h = keras.layers.GRU(H_, reset_after=True, use_cudnn=use_cudnn)(h)
        model = keras.Model(inputs, keras.layers.Dense(1)(h))
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        return model

    cpu, gpu = build(False), build(True)
    gpu.set_weights(cpu.get_weights())
    hist_gpu = gpu.fit(x, y, epochs=3, batch_size=8, verbose=0, shuffle=False).history["loss"]
    assert keras_cudnn_path.count("lstm") >= 2 and keras_cudnn_path.count("gru") >= 1
    hist_cpu = cpu.fit(x, y, epochs=3, batch_size=8, verbose=0, shuffle=False).history["loss"]
    np.testing.assert_allclose(hist_gpu, hist_cpu, rtol=1e-4)
    assert hist_gpu[-1] < hist_gpu[0]
