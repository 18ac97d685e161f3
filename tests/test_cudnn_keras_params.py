"""KerasToCudnnParams and CudnnParamsToKeras, the conversions tf_lstm_ops.keras runs on every call:
Keras' weights against the reference layout (docs/cudnn_rnn.md §6.5), each op the other's
gradient (to every order), and bad input."""

import numpy as np
import pytest
import tensorflow as tf

from tf_lstm_ops._loader import library
from tools.references import cudnn_rnn as R

GATES = R.GATES
DTYPES = ("float64", "float32", "half", "bfloat16")
# (input_size, num_units): tiny, empty, odd (partial tiles), and H = 256, where an LSTM's Keras
# row is 4 KiB (the stride that made a naive transposing copy collide in the cache).
SIZES = [(3, 2), (0, 4), (5, 0), (37, 33), (64, 256)]


def keras_weights(rng, mode, I, H, bias_rows):
    G = GATES[mode]
    return (rng.standard_normal((I, G * H)), rng.standard_normal((H, G * H)),
            rng.standard_normal((G * H,) if bias_rows == 1 else (2, G * H)))


def reference_params(mode, kernel, recurrent_kernel, bias):
    cfg = R.Cfg(mode, 1, recurrent_kernel.shape[0], kernel.shape[0])
    return R.canonical_to_params(cfg, *R.keras_canonical(mode, kernel, recurrent_kernel, bias))


def to_params(kernel, recurrent_kernel, bias, mode):
    return library.op("KerasToCudnnParams")(kernel=kernel, recurrent_kernel=recurrent_kernel,
                                           bias=bias, rnn_mode=mode)


def to_keras(params, mode, I, H, bias_rows):
    return library.op("CudnnParamsToKeras")(params=params, rnn_mode=mode, input_size=I,
                                           num_units=H, bias_rows=bias_rows)


@pytest.mark.parametrize("I,H", SIZES)
@pytest.mark.parametrize("bias_rows", [1, 2])
@pytest.mark.parametrize("mode", list(GATES))
def test_keras_weights_land_where_the_layout_says_and_come_back(rng, eager_or_function, mode,
                                                               bias_rows, I, H):
    kernel, recurrent_kernel, bias = keras_weights(rng, mode, I, H, bias_rows)
    expected = reference_params(mode, kernel, recurrent_kernel, bias)
    params = eager_or_function(to_params, kernel=tf.constant(kernel),
                               recurrent_kernel=tf.constant(recurrent_kernel),
                               bias=tf.constant(bias), mode=mode)
    np.testing.assert_array_equal(params, expected)  # a copy: exact
    back = eager_or_function(to_keras, params=tf.constant(expected), mode=mode, I=I, H=H,
                             bias_rows=bias_rows)
    for name, want in zip(("kernel", "recurrent_kernel", "bias"), (kernel, recurrent_kernel, bias)):
        np.testing.assert_array_equal(back[name], want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_converts_exactly(rng, dtype):
    kernel, recurrent_kernel, bias = (R.round_to(w, dtype)
                                      for w in keras_weights(rng, "gru", 7, 5, 2))
    params = to_params(*(R.to_tf(w, dtype) for w in (kernel, recurrent_kernel, bias)), "gru")
    assert params.dtype == R.tf_dtype(dtype)
    np.testing.assert_array_equal(R.to_np(params),
                                  reference_params("gru", kernel, recurrent_kernel, bias))
    for got, want in zip(to_keras(params, "gru", 7, 5, 2), (kernel, recurrent_kernel, bias)):
        assert got.dtype == R.tf_dtype(dtype)
        np.testing.assert_array_equal(R.to_np(got), want)


def test_a_one_row_bias_is_b_r_with_b_w_zero(rng):
    # Keras' LSTM and SimpleRNN have one bias; cuDNN adds b_W + b_R, so b_W is written as zero
    # and the way back leaves whatever params holds there out.
    kernel, recurrent_kernel, bias = keras_weights(rng, "lstm", 3, 2, 1)
    params = to_params(kernel, recurrent_kernel, bias, "lstm").numpy()
    bias_w = slice(params.size - 16, params.size - 8)
    np.testing.assert_array_equal(params[bias_w], 0)
    params[bias_w] = rng.standard_normal(8)
    np.testing.assert_array_equal(to_keras(params, "lstm", 3, 2, 1)[2], bias)


@pytest.mark.parametrize("mode,bias_rows", [("lstm", 1), ("gru", 2), ("rnn_relu", 1)])
def test_each_conversion_is_the_others_gradient(rng, mode, bias_rows):
    I, H = 3, 2
    weights = [tf.constant(w) for w in keras_weights(rng, mode, I, H, bias_rows)]
    size = R.params_size(mode, 1, H, I)
    # Both are linear: their Jacobians, by finite differences and by the registered gradients,
    # are each other's transposes.
    theoretical, numerical = tf.test.compute_gradient(
        lambda k, r, b: to_params(k, r, b, mode), weights)
    for t, n in zip(theoretical, numerical):
        np.testing.assert_allclose(t, n, atol=1e-9)
    forward = np.concatenate(theoretical, axis=1)  # [size, all Keras elements]
    theoretical, numerical = tf.test.compute_gradient(
        lambda p: tf.concat([tf.reshape(w, [-1]) for w in to_keras(p, mode, I, H, bias_rows)],
                            0), [tf.constant(rng.standard_normal(size))])
    np.testing.assert_allclose(theoretical[0], numerical[0], atol=1e-9)
    back = theoretical[0]  # [all Keras elements, size]
    np.testing.assert_array_equal(back, forward.T)


def test_second_order_gradients_through_the_conversion(rng):
    # The gradient of the gradient, what a Hessian-vector product through the Keras layers asks
    # of the conversion: loss = sum(p * p * w) over params p, so the first gradient w.r.t. each
    # Keras element is 2 p w at its params position and `total`'s gradient is 2 w there.
    kernel, recurrent_kernel, bias = (tf.Variable(w) for w in keras_weights(rng, "gru", 3, 2, 2))
    weights = tf.constant(rng.standard_normal(R.params_size("gru", 1, 2, 3)))
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            params = to_params(kernel, recurrent_kernel, bias, "gru")
            loss = tf.reduce_sum(params * params * weights)
        grads = inner.gradient(loss, [kernel, recurrent_kernel, bias])
        total = sum(tf.reduce_sum(g) for g in grads)
    second = outer.gradient(total, [kernel, recurrent_kernel, bias])
    back = to_keras(2 * weights, "gru", 3, 2, 2)
    for got, want in zip(second, back):
        np.testing.assert_allclose(got, want, rtol=1e-12)
