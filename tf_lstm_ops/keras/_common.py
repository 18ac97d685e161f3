"""What the Keras layer modules share: their registration for Keras serialisation, the backend
check, the refusal of Keras 2 (tf_keras) tensors, reading weights and inputs in the compute
dtype, the lengths of a mask that must be right-padded, and the TfLstm>CudnnRNNV3 op that the drop-in and CudnnRNN layers run."""

import keras
import tensorflow as tf

from tf_lstm_ops._fused_rnn import mask_lengths
from tf_lstm_ops._loader import library

_PACKAGE = "tf_lstm_ops"
_register = keras.saving.register_keras_serializable(package=_PACKAGE)


def _check_backend(layer_name):
    backend = keras.backend.backend()
    if backend != "tensorflow":
        raise RuntimeError(
            "tf_lstm_ops.keras.%s runs TensorFlow custom ops and needs Keras' TensorFlow backend, "
            "but Keras is using the %r backend. Set the environment variable "
            "KERAS_BACKEND=tensorflow before importing keras (or use keras.layers instead)."
            % (layer_name, backend)
        )


class _Keras3Only:
    """Refuses to be called on Keras 2 (tf_keras) symbolic tensors. Under TF_USE_LEGACY_KERAS=1,
    tf.keras is tf_keras, whose functional API would otherwise wrap every TF op of our call in a
    TFOpLambda layer: the model builds and fit runs, but our weights are captured, not trained.
    (tf_keras' Sequential already rejects a Keras 3 layer with a TypeError.)"""

    def __call__(self, *args, **kwargs):
        for value in keras.tree.flatten((args, kwargs)):
            if type(value).__module__.startswith("tf_keras."):
                raise TypeError(
                    "tf_lstm_ops.keras.%s is a Keras 3 layer and was called on a tf_keras (Keras "
                    "2) tensor, as happens with TF_USE_LEGACY_KERAS=1 and tf.keras.Input: tf_keras "
                    "would not train its weights. Build the model with Keras 3 (import keras; "
                    "keras.Input), or use tf_lstm_ops.tf_keras.%s, this layer for tf_keras."
                    % (type(self).__name__, type(self).__name__))
        return super().__call__(*args, **kwargs)


def _read(variable, dtype):
    """A Keras variable (or tensor) as a tensor of `dtype` (the gradient reaches the variable)."""
    if isinstance(variable, keras.Variable):
        variable = variable.value
    return tf.cast(variable, dtype)


def _as_input(inputs, layer):
    """The layer's input as a tensor; integer and boolean inputs in the layer's compute dtype, as
    Keras' own layers compute them (their matmuls promote them to the weights' float dtype)."""
    x = tf.convert_to_tensor(inputs)
    if not x.dtype.is_floating:
        x = tf.cast(x, layer.compute_dtype)
    return x


def _right_padded_lengths(mask, batch, steps, layer_name):
    """Per-example lengths of a [B, T] mask, asserting that it is right-padded (for layers with no
    Keras implementation to fall back to)."""
    lengths, right_padded = mask_lengths(mask, batch, steps)
    check = tf.debugging.Assert(
        right_padded,
        [
            "tf_lstm_ops.keras.%s: the mask is not right-padded. The fused kernel takes one "
            "length per example, so every row of the mask must be True for its first steps and "
            "False after them (sequences padded at the end). Left padding or masked steps in "
            "the middle of a sequence are not supported: pad at the end, or use the keras.layers "
            "layer for such masks." % layer_name
        ],
    )
    if check is not None:  # graph mode; eagerly Assert has already run
        with tf.control_dependencies([check]):
            lengths = tf.identity(lengths)
    return lengths


def _cudnn_rnn_v3(**kwargs):
    return library.op("CudnnRNNV3")(**kwargs)
