"""What the Keras 3 (``tf_lstm_ops.keras``) and Keras 2 (``tf_lstm_ops.tf_keras``) LayerNorm LSTM
layers and cells share, with no Keras import: the presets' ε, the fused op's call on a cell's
weights, and haste's weight conversion (docs/layer_norm_lstm.md, docs/keras_layers.md §8)."""

import numpy as np
import tensorflow as tf

from tf_lstm_ops._fused_rnn import is_inference
from tf_lstm_ops._loader import library

# ε of each preset where the layer is not given one: TF Addons' 1e-3, haste's and the paper
# authors' 1e-5.
DEFAULT_EPSILON = {"addons": 1e-3, "paper": 1e-5}


def norm_options(norm, norm_epsilon):
    """The preset and ε of a LayerNorm LSTM (None: the preset's), checked."""
    if norm not in DEFAULT_EPSILON:
        raise ValueError("norm must be 'addons' (TF Addons' LayerNormLSTMCell: the normalised "
                         "cell state carried) or 'paper' (Ba et al., haste: the raw cell state "
                         "carried), got %r" % (norm,))
    epsilon = DEFAULT_EPSILON[norm] if norm_epsilon is None else norm_epsilon
    if not isinstance(epsilon, (int, float)) or not 0 < epsilon < float("inf"):
        raise ValueError("norm_epsilon must be a positive number, got %r" % (norm_epsilon,))
    return norm, float(epsilon)


class LayerNormCell:
    """What both Keras versions' LayerNormLSTMCell (an LSTMCell subclass) share: the norms'
    arguments (TF Addons' names), the three LayerNormalization sublayers in Addons' order and
    names, their config. `_keras`: the cell's Keras module (keras or tf_keras)."""

    _keras = None

    def _init_norms(self, norm, norm_epsilon, norm_center, norm_gamma_initializer,
                    norm_beta_initializer, norm_gamma_regularizer, norm_beta_regularizer, given):
        keras = self._keras
        self.norm, self.norm_epsilon = norm_options(norm, norm_epsilon)
        self.norm_center = bool(norm_center)
        self.norm_gamma_initializer = keras.initializers.get(norm_gamma_initializer)
        self.norm_beta_initializer = keras.initializers.get(norm_beta_initializer)
        self.norm_gamma_regularizer = keras.regularizers.get(norm_gamma_regularizer)
        self.norm_beta_regularizer = keras.regularizers.get(norm_beta_regularizer)
        for arg, fn in (("activation", keras.activations.tanh),
                        ("recurrent_activation", keras.activations.sigmoid)):
            if getattr(self, arg) is not fn:  # (the fused cell computes these only)
                raise ValueError("%s: %s must be %r, the fused LayerNorm LSTM's, got %r" % (
                    type(self).__name__, arg, fn.__name__, given.get(arg)))

        def norm_layer(name, center):
            return keras.layers.LayerNormalization(
                epsilon=self.norm_epsilon, center=center,
                gamma_initializer=self.norm_gamma_initializer,
                beta_initializer=self.norm_beta_initializer,
                gamma_regularizer=self.norm_gamma_regularizer,
                beta_regularizer=self.norm_beta_regularizer, dtype=self.dtype_policy, name=name)

        self.kernel_norm = norm_layer("kernel_norm", self.norm_center)
        self.recurrent_norm = norm_layer("recurrent_norm", self.norm_center)
        self.state_norm = norm_layer("state_norm", True)

    # Per Keras version: a weight read in a dtype, a step's input as a tensor, a call's
    # `training` as zoneout reads it, the cell's uniform draws.
    def _read_weight(self, variable, dtype):
        raise NotImplementedError

    def _step_input(self, inputs):
        raise NotImplementedError

    def _zoneout_training(self, training):
        raise NotImplementedError

    def _uniform(self, shape):
        raise NotImplementedError

    def zoneout_weights(self, x, training):
        """The op's zoneout weights for x [B, T, I] (ZoneoutLayer._zoneout_weights)."""
        return self._zoneout_weights(x, self._zoneout_training(training), self._uniform)

    def run(self, x, h0, c0, seq_lengths, recurrent_mask, zoneout, training):
        """The fused op over x [B, T, I] from (h0, c0): (outputs, [h, c])."""
        return run_cell_op(self, self._read_weight, x, h0, c0, seq_lengths, recurrent_mask,
                           zoneout, training)

    def call(self, inputs, states, training=None):
        h0, c0 = states
        x = self._step_input(inputs)
        input_mask, recurrent_mask = self.dropout_masks(x, h0, training)
        if input_mask is not None:
            x = x * input_mask
        x = tf.expand_dims(x, 1)  # a sequence of one step
        _, (h, c) = self.run(x, h0, c0, tf.ones([tf.shape(x)[0]], tf.int32), recurrent_mask,
                             self.zoneout_weights(x, training), training)
        return h, [h, c]

    def get_config(self):
        return {**super().get_config(), **self._norm_config(), **self._zoneout_config()}

    def _norm_config(self):
        keras = self._keras
        return {
            "norm": self.norm,
            "norm_epsilon": self.norm_epsilon,
            "norm_center": self.norm_center,
            "norm_gamma_initializer": keras.initializers.serialize(self.norm_gamma_initializer),
            "norm_beta_initializer": keras.initializers.serialize(self.norm_beta_initializer),
            "norm_gamma_regularizer": keras.regularizers.serialize(self.norm_gamma_regularizer),
            "norm_beta_regularizer": keras.regularizers.serialize(self.norm_beta_regularizer),
        }


class LayerNormLayer:
    """What both Keras versions' LayerNormLSTM layers (RNN subclasses) share: a config that is
    the RNN's with the cell's arguments inlined, as Keras' LSTM's."""

    def get_config(self):
        cell_config = self.cell.get_config()
        for key in ("name", "trainable", "dtype", "implementation"):
            cell_config.pop(key, None)
        base_config = super().get_config()
        del base_config["cell"]
        return {**base_config, **cell_config}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def run_cell_op(cell, read, x, h0, c0, seq_lengths, recurrent_mask, zoneout, training):
    """The fused op on a LayerNorm LSTM cell's weights (read(variable, dtype) reads one; the
    norms are the cell's kernel_norm, recurrent_norm and state_norm sublayers) over x [B, T, I]
    from (h0, c0): (outputs [B, T, H], [h, c]). A missing bias or β is zeros."""
    dtype = x.dtype
    gates, none = 4 * cell.units, tf.zeros([0], dtype)

    def weight(variable, size=None):
        return tf.zeros([size], dtype) if variable is None else read(variable, dtype)

    norms = (cell.kernel_norm, cell.recurrent_norm, cell.state_norm)
    (gamma_x, beta_x), (gamma_h, beta_h), (gamma_c, beta_c) = (
        (weight(n.gamma), weight(n.beta, width)) for n, width in zip(norms, (gates, gates,
                                                                            cell.units)))
    out = library.op("LayerNormLSTM")(
        input=x, input_h=tf.cast(h0, dtype), input_c=tf.cast(c0, dtype),
        kernel=weight(cell.kernel), recurrent_kernel=weight(cell.recurrent_kernel),
        bias=weight(cell.bias, gates), gamma_x=gamma_x, beta_x=beta_x, gamma_h=gamma_h,
        beta_h=beta_h, gamma_c=gamma_c, beta_c=beta_c, sequence_lengths=seq_lengths,
        recurrent_mask=none if recurrent_mask is None else tf.cast(recurrent_mask, dtype),
        zoneout_h_weights=none if zoneout[0] is None else tf.cast(zoneout[0], dtype),
        zoneout_c_weights=none if zoneout[1] is None else tf.cast(zoneout[1], dtype),
        norm=cell.norm, epsilon=cell.norm_epsilon, time_major=False,
        is_training=not is_inference(training))
    return out.output, [out.output_h, out.output_c]


def haste_weights(kernel, recurrent_kernel, bias, gamma, gamma_h, beta_h):
    """haste's LayerNormLSTM variables (kernel [I, 4H], recurrent_kernel [H, 4H], bias [4H],
    gamma [2, 4H], gamma_h [H], beta_h [H]; gates i, g, f, o) as the get_weights() list of a
    LayerNormLSTM(norm="paper", norm_center=False) (gates i, f, c, o; norm_epsilon 1e-5,
    haste's), with NumPy arrays."""
    def reorder(a):  # gate blocks i, g, f, o -> i, f, g(c), o along the last axis
        i, g, f, o = np.split(np.asarray(a), 4, axis=-1)
        return np.concatenate([i, f, g, o], axis=-1)

    gamma = np.asarray(gamma)
    return [reorder(kernel), reorder(recurrent_kernel), reorder(bias), reorder(gamma[0]),
            reorder(gamma[1]), np.asarray(gamma_h), np.asarray(beta_h)]
