"""``LSTMCell``, ``GRUCell``, ``SimpleRNNCell``: drop-ins for Keras' cells whose step is one fused
``TfLstm>KerasRNN`` op (docs/keras_layers.md), with zoneout
(docs/keras_layers.md §7): the layers' math one step at a time, for loops that step a cell
themselves (a decoder stepping its LSTMs inside an attention loop, as Tacotron 2's). In
``keras.layers.RNN`` prefer the layers (``tlk.LSTM``: one op for the whole sequence).

They subclass Keras' cells: the same arguments, defaults, weights and states; with zoneout 0
their results equal Keras' cells'. A cell's zoneout masks are fresh at every call (a step); its
dropout masks are Keras' (drawn on the first step, kept until ``reset_dropout_mask()``, as
Keras' cells). A step the kernel cannot serve (an activation outside the fused set, XLA) runs
the Keras cell's own ``call``, with a warning, or, zoned, is a ``ValueError``.
"""

import keras
import tensorflow as tf

from tf_lstm_ops._fused_rnn import ZoneoutLayer, call_fallback_reason, keras_rnn_loop
from tf_lstm_ops.keras._common import _Keras3Only, _as_input, _check_backend, _register
from tf_lstm_ops.keras.drop_in import (
    _activation_name,
    _activation_reason,
    _gate_activations_reason,
    cell_attrs,
    cell_dropout,
    cell_weights,
    keras_uniform,
)


class _FusedCellMixin(ZoneoutLayer, _Keras3Only):
    """call() for Keras' cells: one step of the fused op (a sequence of one step), returning what
    the Keras cell returns, or the Keras cell's own call where the kernel cannot serve it."""

    _keras_class = None

    def _init_cell(self, name, **rates):
        _check_backend(name)
        self.supports_jit = False  # the custom op has no XLA kernel
        self._init_zoneout(**rates)

    def call(self, inputs, states, training=False):
        if call_fallback_reason(self) is not None:
            return self._keras_class.call(self, inputs, states, training=training)
        nested = keras.tree.is_nested(states)
        states = list(states) if nested else [states]
        mode = self._rnn_mode
        x = tf.expand_dims(_as_input(inputs, self), 1)  # [B, 1, I]: a sequence of one step
        dtype = x.dtype
        lstm = mode == "lstm"
        h0 = tf.cast(states[0], dtype)
        c0 = tf.cast(states[1], dtype) if lstm else None
        x, input_masks, recurrent_masks = cell_dropout(self, mode, x, states[0], training)
        zoneout = self._zoneout_weights(x, bool(training), keras_uniform(self))
        h, _, new_states = keras_rnn_loop(
            x, h0, c0, cell_weights(self, dtype), None, mode, False, False, False, training,
            cell_attrs(self, mode), input_masks, recurrent_masks, *zoneout)
        return h, new_states if nested or lstm else new_states[0]

    def get_config(self):
        return {**super().get_config(), **self._zoneout_config()}


@_register
class LSTMCell(_FusedCellMixin, keras.layers.LSTMCell):
    """Drop-in ``keras.layers.LSTMCell`` whose step is one fused op, with ``zoneout_h`` and
    ``zoneout_c`` (see the module doc)."""

    _keras_class = keras.layers.LSTMCell
    _rnn_mode = "lstm"
    _zoneout_args = ("zoneout_h", "zoneout_c")

    def __init__(self, units, *args, zoneout_h=0.0, zoneout_c=0.0, **kwargs):
        super().__init__(units, *args, **kwargs)
        self._init_cell("LSTMCell", zoneout_h=zoneout_h, zoneout_c=zoneout_c)

    def _static_fallback_reason(self):
        return _gate_activations_reason(self)


@_register
class GRUCell(_FusedCellMixin, keras.layers.GRUCell):
    """Drop-in ``keras.layers.GRUCell`` whose step is one fused op, with ``zoneout`` (see the
    module doc)."""

    _keras_class = keras.layers.GRUCell
    _rnn_mode = "gru"
    _zoneout_args = ("zoneout",)

    def __init__(self, units, *args, zoneout=0.0, **kwargs):
        super().__init__(units, *args, **kwargs)
        self._init_cell("GRUCell", zoneout=zoneout)

    def _static_fallback_reason(self):
        return _gate_activations_reason(self)


@_register
class SimpleRNNCell(_FusedCellMixin, keras.layers.SimpleRNNCell):
    """Drop-in ``keras.layers.SimpleRNNCell`` whose step is one fused op, with ``zoneout`` (see
    the module doc)."""

    _keras_class = keras.layers.SimpleRNNCell
    _zoneout_args = ("zoneout",)

    def __init__(self, units, *args, zoneout=0.0, **kwargs):
        super().__init__(units, *args, **kwargs)
        self._init_cell("SimpleRNNCell", zoneout=zoneout)

    @property
    def _rnn_mode(self):
        # cuDNN's own mode for tanh and relu; Keras' other activations on rnn_tanh's weights
        return "rnn_relu" if _activation_name(self.activation) == "relu" else "rnn_tanh"

    def _static_fallback_reason(self):
        return _activation_reason("activation", self.activation)
