"""``LayerNormLSTM`` and ``LayerNormLSTMCell``: the LayerNorm LSTM (docs/layer_norm_lstm.md) on the
fused ``TfLstm>LayerNormLSTM`` op, as a layer (one op for the whole sequence) and as a cell (one
op per step, for ``keras.layers.RNN`` and decoder loops), with zoneout.

    tlk.LayerNormLSTM(256, return_sequences=True)                 # TF Addons' cell, fused
    tlk.LayerNormLSTM(256, norm="paper", zoneout_h=0.1)           # Ba et al. / haste

The cell subclasses ``keras.layers.LSTMCell``: the same arguments and weights (``kernel``,
``recurrent_kernel``, ``bias``, gates i, f, c, o, ``unit_forget_bias``), plus three
``LayerNormalization`` sublayers created in TF Addons' order (``kernel_norm``, ``recurrent_norm``,
``state_norm``), so an Addons ``LayerNormLSTMCell``'s ``get_weights()`` loads with
``set_weights``; ``haste_weights`` converts haste's. Dropout is TF Addons': one input mask and one
recurrent mask for every gate (docs/keras_layers.md §8).
"""

import keras
import tensorflow as tf

from tf_lstm_ops._fused_rnn import (
    ZoneoutLayer,
    dropout_applies,
    masked_rnn_loop,
    step_mask,
    warn_fallback,
)
from tf_lstm_ops._layer_norm import LayerNormCell, LayerNormLayer, haste_weights
from tf_lstm_ops.keras._common import _Keras3Only, _as_input, _check_backend, _read, _register
from tf_lstm_ops.keras.drop_in import keras_uniform

@_register
class LayerNormLSTMCell(LayerNormCell, ZoneoutLayer, _Keras3Only, keras.layers.LSTMCell):
    """A LayerNorm LSTM step (docs/layer_norm_lstm.md §1) as one fused op.

    Args (beyond ``keras.layers.LSTMCell``'s; activation and recurrent_activation must be tanh
    and sigmoid, the fused cell's; the norm_* names are TF Addons'):
      norm: "addons" (the normalised cell state carried; default) or "paper" (the raw one).
      norm_epsilon: of the three norms; None: 1e-3 for "addons", 1e-5 for "paper".
      norm_center: β on the x·W and h·R norms (haste's layers have none: False); the cell
        state's norm always has β.
      norm_gamma_initializer, norm_beta_initializer, norm_gamma_regularizer,
      norm_beta_regularizer: of the norms' γ and β.
      zoneout_h, zoneout_c: zoneout rates (docs/keras_layers.md §7).
    """

    _keras = keras
    _zoneout_args = ("zoneout_h", "zoneout_c")

    def __init__(self, units, norm="addons", norm_epsilon=None, norm_center=True,
                 norm_gamma_initializer="ones", norm_beta_initializer="zeros",
                 norm_gamma_regularizer=None, norm_beta_regularizer=None, zoneout_h=0.0,
                 zoneout_c=0.0, **kwargs):
        _check_backend(type(self).__name__)
        super().__init__(units, **kwargs)
        self._init_norms(norm, norm_epsilon, norm_center, norm_gamma_initializer,
                         norm_beta_initializer, norm_gamma_regularizer, norm_beta_regularizer,
                         kwargs)
        self.supports_jit = False  # the custom op has no XLA kernel
        self._init_zoneout(zoneout_h=zoneout_h, zoneout_c=zoneout_c)

    def _static_fallback_reason(self):
        return None  # (every step runs the fused op)

    def build(self, input_shape):
        super().build(input_shape)
        gates = 4 * self.units
        self.kernel_norm.build((None, gates))
        self.recurrent_norm.build((None, gates))
        self.state_norm.build((None, self.units))

    def dropout_masks(self, x_step, h0, training):
        """TF Addons' dropout: one input mask and one recurrent mask for every gate (the first
        of the masks Keras' cell draws), applied while training a rate in (0, 1); None where
        none."""
        def first(mask):
            return mask[0] if isinstance(mask, (list, tuple)) else mask

        masks = [None, None]
        if bool(training) and dropout_applies(self.dropout, True):
            masks[0] = tf.cast(first(self.get_dropout_mask(x_step)), x_step.dtype)
        if bool(training) and dropout_applies(self.recurrent_dropout, True):
            masks[1] = tf.cast(first(self.get_recurrent_dropout_mask(h0)), x_step.dtype)
        return masks

    def _read_weight(self, variable, dtype):
        return _read(variable, dtype)

    def _step_input(self, inputs):
        return _as_input(inputs, self)

    def _zoneout_training(self, training):
        return bool(training)

    def _uniform(self, shape):
        return keras_uniform(self)(shape)


@_register
class LayerNormLSTM(LayerNormLayer, _Keras3Only, keras.layers.RNN):
    """The LayerNorm LSTM as a layer: one fused op for the whole sequence (forward and backward).

    Takes ``keras.layers.LSTM``'s arguments (activations fixed to tanh and sigmoid;
    ``use_cudnn`` and ``implementation`` do not apply) and ``LayerNormLSTMCell``'s (``norm``,
    ``norm_epsilon``, ``norm_center``, the norms' initializers and regularizers, ``zoneout_h``,
    ``zoneout_c``). Masks of any pattern, ``go_backwards``, ``stateful``, ``return_state``,
    ``Bidirectional`` and mixed precision run the fused op; ``unroll=True`` runs Keras' loop of
    the fused cell (one op per step), with a warning.
    """

    def __init__(self, units, norm="addons", norm_epsilon=None, norm_center=True,
                 activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal",
                 bias_initializer="zeros", unit_forget_bias=True, norm_gamma_initializer="ones",
                 norm_beta_initializer="zeros", kernel_regularizer=None,
                 recurrent_regularizer=None, bias_regularizer=None, norm_gamma_regularizer=None,
                 norm_beta_regularizer=None, activity_regularizer=None, kernel_constraint=None,
                 recurrent_constraint=None, bias_constraint=None, dropout=0.0,
                 recurrent_dropout=0.0, zoneout_h=0.0, zoneout_c=0.0, seed=None,
                 return_sequences=False, return_state=False, go_backwards=False, stateful=False,
                 unroll=False, **kwargs):
        cell = LayerNormLSTMCell(
            units, norm=norm, norm_epsilon=norm_epsilon, norm_center=norm_center,
            activation=activation, recurrent_activation=recurrent_activation, use_bias=use_bias,
            kernel_initializer=kernel_initializer, recurrent_initializer=recurrent_initializer,
            bias_initializer=bias_initializer, unit_forget_bias=unit_forget_bias,
            norm_gamma_initializer=norm_gamma_initializer,
            norm_beta_initializer=norm_beta_initializer, kernel_regularizer=kernel_regularizer,
            recurrent_regularizer=recurrent_regularizer, bias_regularizer=bias_regularizer,
            norm_gamma_regularizer=norm_gamma_regularizer,
            norm_beta_regularizer=norm_beta_regularizer, kernel_constraint=kernel_constraint,
            recurrent_constraint=recurrent_constraint, bias_constraint=bias_constraint,
            dropout=dropout, recurrent_dropout=recurrent_dropout, zoneout_h=zoneout_h,
            zoneout_c=zoneout_c, seed=seed, dtype=kwargs.get("dtype"),
            trainable=kwargs.get("trainable", True), name="layer_norm_lstm_cell")
        super().__init__(cell, return_sequences=return_sequences, return_state=return_state,
                         go_backwards=go_backwards, stateful=stateful, unroll=unroll,
                         activity_regularizer=activity_regularizer, **kwargs)
        self.input_spec = keras.layers.InputSpec(ndim=3)
        self.supports_jit = False

    def inner_loop(self, sequences, initial_state, mask, training=False):
        if keras.tree.is_nested(mask):
            mask = mask[0]
        if self.unroll:
            warn_fallback(self, "unroll=True (asks for Keras' unrolled loop; each step is still "
                                "one fused op)")
            return super().inner_loop(sequences, initial_state, mask, training=training)
        x = _as_input(sequences, self)
        if mask is not None:
            shape = tf.shape(x)
            mask = step_mask(mask, shape[0], shape[1])
        cell = self.cell
        h0, c0 = (tf.cast(s, x.dtype) for s in initial_state)
        input_mask, recurrent_mask = cell.dropout_masks(x[:, 0, :], initial_state[0], training)
        if input_mask is not None:  # (the same mask at every step, as the cell's)
            x = x * tf.expand_dims(input_mask, 1)
        zoneout = cell.zoneout_weights(x, training)

        def run(x, seq_lengths, zoneout):
            return cell.run(x, h0, c0, seq_lengths, recurrent_mask, zoneout, training)

        return masked_rnn_loop(x, mask, self.go_backwards, self.return_sequences,
                               self.zero_output_for_mask, run, zoneout)


__all__ = ["LayerNormLSTM", "LayerNormLSTMCell", "haste_weights"]
