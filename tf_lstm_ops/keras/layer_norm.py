"""The LayerNorm RNNs on the fused ops, as layers (one op for the whole sequence) and as cells
(one op per step, for ``keras.layers.RNN`` and decoder loops), with zoneout:

- ``LayerNormLSTM``, ``LayerNormLSTMCell``: the LayerNorm LSTM (docs/layer_norm_lstm.md) on
  ``TfLstm>LayerNormLSTM``;
- ``LayerNormGRU``, ``LayerNormGRUCell``: haste's LayerNorm GRU, and ``LayerNormSimpleRNN``,
  ``LayerNormSimpleRNNCell``: TF Addons' LayerNorm SimpleRNN, on ``TfLstm>LayerNormRNN``
  (docs/keras_layers.md §9).

    tlk.LayerNormLSTM(256, return_sequences=True)                 # TF Addons' cell, fused
    tlk.LayerNormLSTM(256, norm="paper", zoneout_h=0.1)           # Ba et al. / haste
    tlk.LayerNormGRU(256, zoneout=0.1)                            # haste's LayerNormGRU

The LSTM cell subclasses ``keras.layers.LSTMCell``: the same arguments and weights (``kernel``,
``recurrent_kernel``, ``bias``, gates i, f, c, o, ``unit_forget_bias``), plus three
``LayerNormalization`` sublayers created in TF Addons' order (``kernel_norm``, ``recurrent_norm``,
``state_norm``), so an Addons ``LayerNormLSTMCell``'s ``get_weights()`` loads with
``set_weights``; ``haste_weights`` converts haste's. The GRU cell subclasses
``keras.layers.GRUCell`` (γ-only ``kernel_norm`` and ``recurrent_norm``; ``haste_gru_weights``
converts haste's), the SimpleRNN cell ``keras.layers.SimpleRNNCell`` (a γ-only ``layernorm``,
Addons' cell's). Dropout is TF Addons': one input mask and one recurrent mask for every gate
(docs/keras_layers.md §8, §9).
"""

import keras
import tensorflow as tf

from tf_lstm_ops._fused_rnn import dropout_applies, step_mask, warn_fallback
from tf_lstm_ops._layer_norm import (
    LayerNormLayer,
    LayerNormLSTMCellBase,
    LayerNormRNNCellBase,
    haste_gru_weights,
    haste_weights,
)
from tf_lstm_ops.keras._common import _Keras3Only, _as_input, _check_backend, _read, _register
from tf_lstm_ops.keras.drop_in import _activation_name, keras_uniform


class _Keras3Cell:
    """The Keras 3 side of a LayerNorm cell (LayerNormCell's hooks), first in its bases."""

    _keras = keras

    def __init__(self, units, *args, **kwargs):
        _check_backend(type(self).__name__)
        super().__init__(units, *args, **kwargs)
        self.supports_jit = False  # the custom op has no XLA kernel

    def _build_norm(self, norm, width, input_shape):
        norm.build((None, width))

    def dropout_masks(self, x_step, h0, training):
        """TF Addons' dropout: one input mask and one recurrent mask for every gate (the first
        of the masks Keras' cell draws), applied while training a rate Keras' cell applies
        (LSTM, GRU: in (0, 1); SimpleRNN: > 0); None where none."""
        def first(mask):
            return mask[0] if isinstance(mask, (list, tuple)) else mask

        masks = [None, None]
        if bool(training) and dropout_applies(self.dropout, self._gated):
            masks[0] = tf.cast(first(self.get_dropout_mask(x_step)), x_step.dtype)
        if bool(training) and dropout_applies(self.recurrent_dropout, self._gated):
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

    def _activation_name(self, fn):
        return _activation_name(fn)


@_register
class LayerNormLSTMCell(_Keras3Cell, LayerNormLSTMCellBase, _Keras3Only, keras.layers.LSTMCell):
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


@_register
class LayerNormGRUCell(_Keras3Cell, LayerNormRNNCellBase, _Keras3Only, keras.layers.GRUCell):
    """A LayerNorm GRU step (haste's LayerNormGRU, docs/keras_layers.md §9) as one fused op:
    X = LN(x·W; γx) + b_x, U = LN(h·R; γh) + b_h, Keras' reset_after GRU on X and U.

    Args (beyond ``keras.layers.GRUCell``'s; reset_after must be True; activation and
    recurrent_activation among the fused ones):
      norm_epsilon: of both norms (1e-5).
      norm_gamma_initializer, norm_gamma_regularizer, norm_gamma_constraint: of the norms' γ
        (``kernel_norm``, ``recurrent_norm``; no β: the biases play it).
      zoneout: zoneout rate of h (docs/keras_layers.md §7).
    """

    _op_cell = "gru"


@_register
class LayerNormSimpleRNNCell(_Keras3Cell, LayerNormRNNCellBase, _Keras3Only,
                             keras.layers.SimpleRNNCell):
    """A LayerNorm SimpleRNN step (TF Addons' LayerNormSimpleRNNCell, docs/keras_layers.md §9)
    as one fused op: h = activation(LN(x·W + h·R; γ) + b).

    Args (beyond ``keras.layers.SimpleRNNCell``'s; activation among the fused ones):
      norm_epsilon: of the norm (1e-5).
      norm_gamma_initializer, norm_gamma_regularizer, norm_gamma_constraint: of its γ
        (``layernorm``; no β: the bias plays it).
      zoneout: zoneout rate of h (docs/keras_layers.md §7).
    """

    _op_cell = "simple_rnn"


class _Keras3Layer(LayerNormLayer, _Keras3Only, keras.layers.RNN):
    """A Keras 3 LayerNorm layer: one fused op for the whole sequence (forward and backward);
    ``unroll=True`` runs Keras' loop of the fused cell (one op per step), with a warning."""

    _layer_args = ("return_sequences", "return_state", "go_backwards", "stateful", "unroll",
                   "zero_output_for_mask", "activity_regularizer", "name", "dtype", "trainable",
                   "autocast", "input_shape", "input_dim", "batch_input_shape", "batch_size")

    def __init__(self, units, **kwargs):
        super().__init__(units, **kwargs)
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
        states = [tf.cast(s, x.dtype) for s in initial_state]
        x, recurrent_mask = self._cell_dropout(x, states[0], training)
        return self._cell_loop(x, mask, states, recurrent_mask, training)


@_register
class LayerNormLSTM(_Keras3Layer):
    """The LayerNorm LSTM as a layer: one fused op for the whole sequence (forward and backward).

    Takes ``keras.layers.LSTM``'s arguments (activations fixed to tanh and sigmoid;
    ``use_cudnn`` and ``implementation`` do not apply) and ``LayerNormLSTMCell``'s (``norm``,
    ``norm_epsilon``, ``norm_center``, the norms' initializers and regularizers, ``zoneout_h``,
    ``zoneout_c``). Masks of any pattern, ``go_backwards``, ``stateful``, ``return_state``,
    ``Bidirectional`` and mixed precision run the fused op; ``unroll=True`` runs Keras' loop of
    the fused cell (one op per step), with a warning.
    """

    _cell_class = LayerNormLSTMCell
    _cell_name = "layer_norm_lstm_cell"

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
        super().__init__(
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
            zoneout_c=zoneout_c, seed=seed, return_sequences=return_sequences,
            return_state=return_state, go_backwards=go_backwards, stateful=stateful,
            unroll=unroll, activity_regularizer=activity_regularizer, **kwargs)


@_register
class LayerNormGRU(_Keras3Layer):
    """haste's LayerNorm GRU as a layer: one fused op for the whole sequence.

    Takes ``keras.layers.GRU``'s arguments (``reset_after`` must be True; activations among the
    fused ones; ``use_cudnn`` and ``implementation`` do not apply) and ``LayerNormGRUCell``'s
    (``norm_epsilon``, ``norm_gamma_initializer``, ``norm_gamma_regularizer``,
    ``norm_gamma_constraint``, ``zoneout``), as keywords. Masks, ``go_backwards``, ``stateful``,
    ``return_state``, ``Bidirectional`` and mixed precision run the fused op (docs/keras_layers.md
    §9).
    """

    _cell_class = LayerNormGRUCell
    _cell_name = "layer_norm_gru_cell"


@_register
class LayerNormSimpleRNN(_Keras3Layer):
    """TF Addons' LayerNorm SimpleRNN as a layer: one fused op for the whole sequence.

    Takes ``keras.layers.SimpleRNN``'s arguments (the activation among the fused ones) and
    ``LayerNormSimpleRNNCell``'s (``norm_epsilon``, ``norm_gamma_initializer``,
    ``norm_gamma_regularizer``, ``norm_gamma_constraint``, ``zoneout``), as keywords
    (docs/keras_layers.md §9).
    """

    _cell_class = LayerNormSimpleRNNCell
    _cell_name = "layer_norm_simple_rnn_cell"


__all__ = ["LayerNormLSTM", "LayerNormLSTMCell", "LayerNormGRU", "LayerNormGRUCell",
           "LayerNormSimpleRNN", "LayerNormSimpleRNNCell", "haste_weights", "haste_gru_weights"]
