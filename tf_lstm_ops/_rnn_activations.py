"""Keras' element-wise activations that the CudnnRNN engines fuse (docs/cudnn_rnn.md §4.7), by the
name the ``*Keras`` ops take: the one list of them, and each as TensorFlow ops (Keras'
own definitions), for the composite that differentiates those ops to any order. No Keras import:
which Keras function is which name is each layer module's business."""

import tensorflow as tf


def _hard_sigmoid(x):  # Keras 3
    return tf.nn.relu6(x + tf.constant(3.0, x.dtype)) / tf.constant(6.0, x.dtype)


def _hard_sigmoid_keras2(x):  # tf_keras
    return tf.clip_by_value(x * tf.constant(0.2, x.dtype) + tf.constant(0.5, x.dtype), 0.0, 1.0)


def _gelu(x):  # the erf form, exactly: tf.nn.gelu's float64 values and gradients err by ~4e-9
    return 0.5 * x * (1 + tf.math.erf(x * tf.constant(0.7071067811865476, x.dtype)))


def _softsign(x):  # tf.nn.softsign's value; TF registers no gradient for its gradient op
    return x / (1 + tf.abs(x))


# name -> the function as TensorFlow ops, in the op attribute's order (cc/core/rnn_activation.h)
ACTIVATIONS = {
    "tanh": tf.tanh,
    "sigmoid": tf.sigmoid,
    "relu": tf.nn.relu,
    "hard_sigmoid": _hard_sigmoid,
    "hard_sigmoid_keras2": _hard_sigmoid_keras2,
    "linear": tf.identity,
    "elu": tf.nn.elu,
    "softsign": _softsign,
    "silu": tf.nn.silu,
    "gelu": _gelu,
}
