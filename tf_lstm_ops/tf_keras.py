"""``LSTM``, ``GRU``, ``SimpleRNN`` for tf_keras (Keras 2: ``TF_USE_LEGACY_KERAS=1``, where
``tf.keras`` is tf_keras): drop-ins for ``tf_keras.layers.LSTM`` / ``GRU`` / ``SimpleRNN`` that run
one fused ``TfLstm>KerasRNN`` op on the sequence.

    import os; os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf
    import tf_lstm_ops.tf_keras as tlk2

    model = tf.keras.Sequential([tf.keras.Input((None, 16)), tf.keras.layers.Masking(),
                                 tlk2.LSTM(64, return_sequences=True), tlk2.GRU(32)])

They subclass tf_keras' layers: the same arguments, defaults, weights and ``get_config``, so
``Sequential`` and functional models take them, ``fit`` trains every weight, and ``.h5`` and
SavedModel files round-trip (``import tf_lstm_ops.tf_keras`` before loading). The fused op runs
where tf_keras runs its cuDNN-compatible implementation (tanh/sigmoid, no
``recurrent_dropout``, no ``unroll``, GRU ``reset_after``), with that implementation's input
dropout, and also where tf_keras runs its per-step loop, with that loop's dropout masks:
``use_bias=False``, the other fused activations (relu, hard_sigmoid, linear, elu, softsign,
swish, gelu), ``recurrent_dropout``, ``implementation=1``, ``GRU(reset_after=False)``;
``time_major=True``, masks of any pattern and ragged inputs too. Every other call (``unroll``,
XLA compilation, other activations) runs the tf_keras class's own ``call``, with one warning per
layer and reason. Results equal tf_keras'. Zoneout (``zoneout_h`` / ``zoneout_c``, ``zoneout``)
is ours, on the fused op only.

``LayerNormLSTMCell`` is a drop-in for TF Addons' ``LayerNormLSTMCell`` (its arguments, variables
and results; each step one fused op) and ``LayerNormLSTM`` the layer that runs the whole sequence
in one, as ``tf_lstm_ops.keras``'s (docs/layer_norm_lstm.md); ``LayerNormSimpleRNNCell`` is a
drop-in for TF Addons' ``LayerNormSimpleRNNCell``, ``LayerNormGRUCell`` haste's LayerNorm GRU
(``haste_gru_weights`` converts its weights), with their layers ``LayerNormSimpleRNN`` and
``LayerNormGRU`` (docs/keras_layers.md §9).
"""

import tensorflow as tf
import tf_keras

from tf_lstm_ops._fused_rnn import (
    ZoneoutLayer,
    call_fallback_reason,
    dropout_applies,
    is_inference,
    keras_cell_attrs,
    keras_weights,
    keras_rnn_loop,
    operand_masks,
    step_mask,
)
from tf_lstm_ops._layer_norm import (
    LayerNormLayer,
    LayerNormLSTMCellBase,
    LayerNormRNNCellBase,
    haste_gru_weights,
    haste_weights,
)

_register = tf_keras.saving.register_keras_serializable(package="tf_lstm_ops")
# The tf_keras functions of each activation the kernel fuses, by the op's name for it
# (docs/cudnn_rnn.md §4.7): tf_keras' hard_sigmoid is 0.2x + 0.5, clipped.
_FUSED_ACTIVATIONS = {
    "tanh": (tf_keras.activations.tanh, tf.tanh, tf.math.tanh, tf.nn.tanh),
    "sigmoid": (tf_keras.activations.sigmoid, tf.sigmoid, tf.math.sigmoid, tf.nn.sigmoid),
    "relu": (tf_keras.activations.relu, tf.nn.relu),
    "hard_sigmoid_keras2": (tf_keras.activations.hard_sigmoid,),
    "linear": (tf_keras.activations.linear,),
    "elu": (tf_keras.activations.elu, tf.nn.elu),
    "softsign": (tf_keras.activations.softsign, tf.nn.softsign, tf.math.softsign),
    "silu": (tf_keras.activations.swish, tf.nn.silu, tf.nn.swish),
    "gelu": (tf_keras.activations.gelu, tf.nn.gelu),
}


def _activation_name(fn):
    """The op's name for a tf_keras activation (cells hold the function), or None."""
    return next((name for name, fns in _FUSED_ACTIVATIONS.items() if fn in fns), None)


def _activation_reason(arg, fn):
    if _activation_name(fn) is not None:
        return None
    return "%s=%r (the fused kernel implements %s)" % (
        arg, getattr(fn, "__name__", fn), ", ".join(
            "hard_sigmoid" if name == "hard_sigmoid_keras2" else name
            for name in _FUSED_ACTIVATIONS))


class _FusedCall(ZoneoutLayer):
    """call() for tf_keras' RNN subclasses: the fused op where it computes what tf_keras computes,
    else the tf_keras class's own call (zoneout, which tf_keras has not: ZoneoutLayer)."""

    def __init__(self, units, *args, **kwargs):
        rates = {name: kwargs.pop(name, 0.0) for name in self._zoneout_args}
        super().__init__(units, *args, **kwargs)
        self._init_zoneout(**rates)

    def get_config(self):
        return {**super().get_config(), **self._zoneout_config()}

    _keras_class = None
    _rnn_mode = None

    def _static_fallback_reason(self):
        raise NotImplementedError

    def _op_weights(self, dtype):
        cell = self.cell
        bias = self._read(cell.bias, dtype) if cell.use_bias else None
        return keras_weights(self._read(cell.kernel, dtype),
                             self._read(cell.recurrent_kernel, dtype), bias)

    def _read(self, variable, dtype):
        return _read_variable(variable, dtype)

    def _loop(self, x, mask, states, training, masks):
        """The fused loop over batch-major x from the initial states (in x's dtype), with
        _dropout's masks: (last output, outputs, final states)."""
        input_masks, recurrent_masks = masks
        zoneout = self._zoneout_weights(x, _training_or_phase(training),
                                        self.cell._random_generator.random_uniform)
        lstm = self._rnn_mode == "lstm"
        cell = self.cell
        cell_attrs = keras_cell_attrs(
            self._rnn_mode, _activation_name(cell.activation),
            _activation_name(cell.recurrent_activation) if lstm or self._rnn_mode == "gru"
            else None, getattr(cell, "reset_after", True))
        return keras_rnn_loop(x, states[0], states[1] if lstm else None,
                              self._op_weights(x.dtype), mask, self._rnn_mode, self.go_backwards,
                              self.return_sequences, self.zero_output_for_mask, training,
                              cell_attrs, input_masks, recurrent_masks, *zoneout)

    def _dropout(self, x, h0, training):
        """tf_keras' dropout, drawn and applied as the implementation tf_keras runs for this layer
        does (docs/keras_layers.md §5): (x (as the layer got it: [T, B, I] with time_major) times
        the input mask where one serves every gate, (the op's per-gate input masks where each gate
        has its own, its recurrent masks)). At inference tf_keras' masks are ones: none."""
        if is_inference(training):
            return x, (None, None)
        cell = self.cell
        gates = {"lstm": 4, "gru": 3}.get(self._rnn_mode, 1)
        if gates > 1 and self._could_use_gpu_kernel:
            # tf_keras' cuDNN-compatible path (LSTM, GRU; no recurrent dropout): one mask over
            # the whole input, a fresh one per step, the first of the per-gate masks it draws.
            self.reset_dropout_mask()
            mask = self.get_dropout_mask_for_cell(x, training, count=gates)
            return (x if mask is None else x * mask[0]), (None, None)
        # tf_keras' per-step loop: the cell's masks, drawn for the first step (input masks, then
        # recurrent ones) and the same at every step. LSTM and GRU draw one per gate and apply a
        # rate in (0, 1): each gate its own with implementation 1 (which recurrent dropout
        # forces), the first for every gate with implementation 2; SimpleRNN one each.
        self._maybe_reset_cell_dropout_mask(cell)
        step = x[0] if self.time_major else x[:, 0]
        input_mask = cell.get_dropout_mask_for_cell(step, training, count=gates)
        recurrent_mask = cell.get_recurrent_dropout_mask_for_cell(h0, training, count=gates)
        if not dropout_applies(cell.dropout, gates > 1):
            input_mask = None
        elif gates > 1 and cell.implementation != 1:
            input_mask = input_mask[0]
        if not dropout_applies(cell.recurrent_dropout, gates > 1):
            recurrent_mask = None
        input_masks = None
        if isinstance(input_mask, (list, tuple)):
            input_masks = operand_masks(self._rnn_mode, input_mask, x.dtype)
        elif input_mask is not None:
            x = x * tf.expand_dims(input_mask, 0 if self.time_major else 1)
        return x, (input_masks, operand_masks(self._rnn_mode, recurrent_mask, x.dtype))

    def call(self, inputs, mask=None, training=None, initial_state=None, **kwargs):
        def keras_call():
            return self._keras_class.call(self, inputs, mask=mask, training=training,
                                          initial_state=initial_state, **kwargs)

        ragged = isinstance(inputs, tf.RaggedTensor)
        reason = None
        if kwargs.get("constants") is not None:
            reason = "constants"
        elif ragged and self.time_major:
            reason = "ragged inputs with time_major=True (tf_keras' own call fails on them)"
        if call_fallback_reason(self, reason) is not None:
            return keras_call()
        if isinstance(mask, list):
            mask = mask[0]
        row_lengths = None
        if ragged:  # as tf_keras: the padded tensor, its rows' lengths as the mask
            self._validate_args_if_ragged(True, mask)  # (tf_keras' errors: a mask, unroll)
            row_lengths = tf.cast(inputs.nested_row_lengths()[0], tf.int32)
            inputs = inputs.to_tensor()
            mask = tf.sequence_mask(row_lengths, tf.shape(inputs)[1])
        return self._fused_call(inputs, mask, training, initial_state, row_lengths)

    def _fused_call(self, inputs, mask, training, initial_state, row_lengths=None):
        inputs, initial_state, _ = self._process_inputs(inputs, initial_state, None)
        x = tf.convert_to_tensor(inputs)
        if not x.dtype.is_floating:
            x = tf.cast(x, self.compute_dtype)
        dtype = x.dtype
        x, masks = self._dropout(x, initial_state[0], training)
        if self.time_major:  # tf_keras' inputs and mask are then [T, B, ...], its outputs too
            x = tf.transpose(x, [1, 0, 2])
            if mask is not None:
                mask = tf.convert_to_tensor(mask)
                mask = tf.transpose(mask, [1, 0] + ([2] if mask.shape.rank == 3 else []))
        if mask is not None:
            shape = tf.shape(x)
            mask = step_mask(mask, shape[0], shape[1])
        states = [tf.cast(s, dtype) for s in initial_state]
        last, outputs, states = self._loop(x, mask, states, training, masks)
        if self.stateful:  # as tf_keras' RNN.call
            updates = [tf.compat.v1.assign(self_state, tf.cast(state, self_state.dtype))
                       for self_state, state in zip(tf.nest.flatten(self.states), states)]
            self.add_update(updates)
        if self.time_major and self.return_sequences:
            outputs = tf.transpose(outputs, [1, 0, 2])
        if row_lengths is not None and self.return_sequences:
            outputs = _to_ragged(outputs, row_lengths, self.go_backwards)
        output = outputs if self.return_sequences else last
        if self.return_state:
            return [output] + list(states)
        return output


def _training_or_phase(training):
    """A call's `training`, None resolved as tf_keras resolves it (its learning phase)."""
    return tf_keras.backend.learning_phase() if training is None else training


def _to_ragged(outputs, row_lengths, go_backwards):
    """The ragged sequence output of ragged inputs, as tf_keras builds it: each row's first
    `length` outputs, in processing order (with go_backwards those are at the end of the padded
    outputs, which are in reversed time)."""
    if not go_backwards:
        return tf.RaggedTensor.from_tensor(outputs, row_lengths)
    ragged = tf.RaggedTensor.from_tensor(tf.reverse(outputs, [1]), row_lengths)
    return tf.reverse(ragged, [1])


def _gpu_kernel_reason(layer):
    """Why the fused kernel cannot compute what tf_keras computes for this LSTM or GRU."""
    cell = layer.cell
    reason = (_activation_reason("activation", cell.activation)
              or _activation_reason("recurrent_activation", cell.recurrent_activation))
    if reason is not None:
        return reason
    if layer.unroll:
        return "unroll=True (asks for tf_keras' unrolled loop)"
    if not tf.compat.v1.executing_eagerly_outside_functions():
        return "TF1 graph mode (tf_keras runs its per-step loop there)"
    return None


@_register
class LSTM(_FusedCall, tf_keras.layers.LSTM):
    """Drop-in ``tf_keras.layers.LSTM`` on the fused kernel (see the module doc)."""

    _keras_class = tf_keras.layers.LSTM
    _rnn_mode = "lstm"
    _zoneout_args = ("zoneout_h", "zoneout_c")

    def _static_fallback_reason(self):
        return _gpu_kernel_reason(self)


@_register
class GRU(_FusedCall, tf_keras.layers.GRU):
    """Drop-in ``tf_keras.layers.GRU`` on the fused kernel (cuDNN's GRU is the ``reset_after=True``
    GRU, tf_keras' default; ``reset_after=False`` runs the kernel's GRU resetting before; see the
    module doc)."""

    _keras_class = tf_keras.layers.GRU
    _rnn_mode = "gru"
    _zoneout_args = ("zoneout",)

    def _static_fallback_reason(self):
        return _gpu_kernel_reason(self)


@_register
class SimpleRNN(_FusedCall, tf_keras.layers.SimpleRNN):
    """Drop-in ``tf_keras.layers.SimpleRNN`` on the fused kernel (``rnn_tanh`` or ``rnn_relu``;
    see the module doc)."""

    _keras_class = tf_keras.layers.SimpleRNN
    _zoneout_args = ("zoneout",)

    @property
    def _rnn_mode(self):
        # cuDNN's own mode for tanh and relu; tf_keras' other activations on rnn_tanh's weights
        return "rnn_relu" if _activation_name(self.cell.activation) == "relu" else "rnn_tanh"

    def _static_fallback_reason(self):
        cell = self.cell
        reason = _activation_reason("activation", cell.activation)
        if reason is not None:
            return reason
        if self.unroll:
            return "unroll=True (asks for tf_keras' unrolled loop)"
        return None


class _TfKerasCell:
    """The tf_keras side of a LayerNorm cell (LayerNormCell's hooks), first in its bases."""

    _keras = tf_keras
    _scoped_norms = True  # each norm's variables under its own name (kernel_norm/gamma:0)

    def _build_norm(self, norm, width, input_shape):
        if not self._scoped_norms:  # (TF Addons' LayerNormSimpleRNNCell: the cell's gamma:0)
            norm.build([input_shape[0], width])
            return
        with tf_keras.backend.name_scope(norm.name):  # (TF Addons' LayerNormLSTMCell's names)
            norm.build([input_shape[0], width])

    def dropout_masks(self, x_step, h0, training):
        """TF Addons' dropout: the first of the cell's per-gate input masks on x and of its
        recurrent masks on h_{t-1}, for every gate (ones at inference); None where a rate does
        not apply (LSTM, GRU: in (0, 1); SimpleRNN: > 0)."""
        def first(mask):
            return mask[0] if isinstance(mask, (list, tuple)) else mask

        masks = [None, None]
        if is_inference(training):
            return masks
        if dropout_applies(self.dropout, self._gated):
            masks[0] = first(self.get_dropout_mask_for_cell(x_step, training,
                                                            count=self._gates))
        if dropout_applies(self.recurrent_dropout, self._gated):
            masks[1] = first(self.get_recurrent_dropout_mask_for_cell(h0, training,
                                                                      count=self._gates))
        return masks

    def _read_weight(self, variable, dtype):
        return _read_variable(variable, dtype)

    def _step_input(self, inputs):
        return tf.convert_to_tensor(inputs)

    def _zoneout_training(self, training):
        return _training_or_phase(training)

    def _uniform(self, shape):
        return self._random_generator.random_uniform(shape)

    def _activation_name(self, fn):
        return _activation_name(fn)


@_register
class LayerNormLSTMCell(_TfKerasCell, LayerNormLSTMCellBase, tf_keras.layers.LSTMCell):
    """Drop-in for TF Addons' ``LayerNormLSTMCell`` (``tfa.rnn.LayerNormLSTMCell``): the same
    arguments (``norm_gamma_initializer``, ``norm_beta_initializer``, ``norm_epsilon``, Keras'
    LSTMCell's), variables (``kernel_norm``, ``recurrent_norm``, ``state_norm`` sublayers, so
    Addons checkpoints and ``get_weights()`` load) and results, each step one fused op; plus
    ``norm="paper"``, ``norm_center``, the norms' regularizers and zoneout
    (docs/layer_norm_lstm.md, docs/keras_layers.md §8). Activations: tanh and sigmoid."""


@_register
class LayerNormGRUCell(_TfKerasCell, LayerNormRNNCellBase, tf_keras.layers.GRUCell):
    """haste's LayerNorm GRU step on tf_keras' ``GRUCell`` (``reset_after=True``): its arguments
    and weights plus the γ-only ``kernel_norm`` and ``recurrent_norm`` (``norm_epsilon``,
    ``norm_gamma_initializer``, ``norm_gamma_regularizer``, ``norm_gamma_constraint``) and
    ``zoneout``, each step one fused op (docs/keras_layers.md §9)."""

    _op_cell = "gru"


@_register
class LayerNormSimpleRNNCell(_TfKerasCell, LayerNormRNNCellBase, tf_keras.layers.SimpleRNNCell):
    """Drop-in for TF Addons' ``LayerNormSimpleRNNCell`` (``tfa.rnn.LayerNormSimpleRNNCell``):
    its arguments (``layernorm_epsilon``, ``gamma_initializer``, ``gamma_regularizer``,
    ``gamma_constraint``, also as ``norm_epsilon``, ``norm_gamma_*``; the rest tf_keras'
    SimpleRNNCell's, by keyword), variables (``kernel``, ``recurrent_kernel``, ``bias``, then the
    ``layernorm`` sublayer's ``gamma``, so Addons checkpoints and ``get_weights()`` load) and
    results, each step one fused op; plus ``zoneout`` (docs/keras_layers.md §9)."""

    _op_cell = "simple_rnn"
    _scoped_norms = False
    _aliases = dict(norm_epsilon="layernorm_epsilon", norm_gamma_initializer="gamma_initializer",
                    norm_gamma_regularizer="gamma_regularizer",
                    norm_gamma_constraint="gamma_constraint")


class _TfKerasLayer(LayerNormLayer, _FusedCall, tf_keras.layers.RNN):
    """A tf_keras LayerNorm layer: its cell's arguments and the RNN layer's, the whole sequence
    one fused op (masks, ``go_backwards``, ``stateful``, ``time_major``, ragged inputs as the
    other layers of this module); ``unroll=True`` and the other calls this module leaves to
    tf_keras run tf_keras' loop of the fused cell."""

    _keras_class = tf_keras.layers.RNN
    _zoneout_args = ()  # (the cell's)
    _layer_args = ("return_sequences", "return_state", "go_backwards", "stateful", "unroll",
                   "time_major", "zero_output_for_mask", "activity_regularizer", "name", "dtype",
                   "trainable", "autocast", "dynamic", "input_shape", "batch_input_shape",
                   "batch_size", "input_dim", "input_length")

    def _static_fallback_reason(self):
        if self.unroll:
            return "unroll=True (asks for tf_keras' unrolled loop; each step is still one fused op)"
        if not tf.compat.v1.executing_eagerly_outside_functions():
            return "TF1 graph mode (tf_keras' loop of the fused cell)"
        return None

    def _dropout(self, x, h0, training):
        self._maybe_reset_cell_dropout_mask(self.cell)
        return self._cell_dropout(x, h0, training, self.time_major)

    def _loop(self, x, mask, states, training, recurrent_mask):
        return self._cell_loop(x, mask, states, recurrent_mask, training)


@_register
class LayerNormLSTM(_TfKerasLayer):
    """The LayerNorm LSTM as a tf_keras layer: ``LayerNormLSTMCell``'s arguments and the RNN
    layer's (see _TfKerasLayer)."""

    _cell_class = LayerNormLSTMCell


@_register
class LayerNormGRU(_TfKerasLayer):
    """haste's LayerNorm GRU as a tf_keras layer: ``LayerNormGRUCell``'s arguments and the RNN
    layer's (see _TfKerasLayer)."""

    _cell_class = LayerNormGRUCell


@_register
class LayerNormSimpleRNN(_TfKerasLayer):
    """TF Addons' LayerNorm SimpleRNN as a tf_keras layer (tf_keras' ``RNN`` of a
    ``LayerNormSimpleRNNCell``, the sequence one fused op): the cell's arguments and the RNN
    layer's (see _TfKerasLayer)."""

    _cell_class = LayerNormSimpleRNNCell


def _read_variable(variable, dtype):
    return tf.cast(tf.convert_to_tensor(variable), dtype)


__all__ = ["LSTM", "GRU", "SimpleRNN", "LayerNormLSTM", "LayerNormLSTMCell", "LayerNormGRU",
           "LayerNormGRUCell", "LayerNormSimpleRNN", "LayerNormSimpleRNNCell", "haste_weights",
           "haste_gru_weights"]
