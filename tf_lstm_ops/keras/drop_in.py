"""``LSTM``, ``GRU``, ``SimpleRNN``: drop-in replacements for ``keras.layers.LSTM``,
``keras.layers.GRU`` and ``keras.layers.SimpleRNN`` that run one fused ``TfLstm>KerasRNN`` op
(forward and backward) on the sequence instead of Keras' per-step loop, with Keras' other cell
options too (activations other than cuDNN's, ``GRU(reset_after=False)``, recurrent dropout).

They subclass Keras' layers and keep Keras' cell, so they have the same constructor arguments and
defaults, the same weight variables and the same ``get_config``; the op takes its cell's
``kernel``, ``recurrent_kernel`` and ``bias`` as they are (docs/cudnn_rnn.md §6.6). A call
the fused kernel cannot serve (activations outside the fused set: tanh, sigmoid, relu,
hard_sigmoid, linear, elu, softsign, silu/swish, gelu; ``use_cudnn=False``, ``unroll=True``, a
function compiled by XLA) runs Keras' own implementation instead
(the Keras class's ``inner_loop``), with one warning per layer and reason: same results, Keras'
speed. Masks of any pattern (docs/keras_layers.md §3) and ``dropout`` / ``recurrent_dropout``
with Keras' masks (§5) run the fused op.
"""

import keras
import tensorflow as tf

from tf_lstm_ops._fused_rnn import (
    ZoneoutLayer,
    call_fallback_reason,
    dropout_applies,
    keras_cell_attrs,
    keras_weights,
    keras_rnn_loop,
    operand_masks,
    step_mask,
)
from tf_lstm_ops.keras._common import (
    _Keras3Only,
    _as_input,
    _check_backend,
    _read,
    _register,
)


def _functions(*names):
    """The function objects Keras and TF use for an activation (keras.activations.get(name),
    keras.ops.<name>, tf.<name>, tf.nn.<name>, tf.math.<name>)."""
    found = set()
    for name in names:
        found.add(keras.activations.get(name))
        for module in (keras.ops, tf, tf.nn, tf.math):
            fn = getattr(module, name, None)
            if fn is not None:
                found.add(fn)
    return found


# The Keras 3 functions of each activation the kernel fuses, by the op's name for it
# (docs/cudnn_rnn.md §4.7). keras.ops.gelu is left out: its default is the tanh approximation.
_FUSED_ACTIVATIONS = {
    "tanh": _functions("tanh"),
    "sigmoid": _functions("sigmoid"),
    "relu": _functions("relu"),
    "hard_sigmoid": {keras.activations.hard_sigmoid, keras.ops.hard_sigmoid},
    "linear": {keras.activations.linear},
    "elu": _functions("elu"),
    "softsign": _functions("softsign"),
    "silu": _functions("silu", "swish"),
    "gelu": {keras.activations.gelu, tf.nn.gelu},
}


def _activation_name(activation):
    """The op's name for a Keras activation, or None when the kernel does not fuse it."""
    fn = keras.activations.get(activation)
    for name, group in _FUSED_ACTIVATIONS.items():
        if fn in group:
            return name
    return None


def _activation_reason(arg, value):
    """Why `value` keeps the fused kernel from running (None: it is one the kernel fuses)."""
    if _activation_name(value) is not None:
        return None
    shown = getattr(value, "__name__", value)  # Keras' cells hold the function
    return "%s=%r (the fused kernel implements %s)" % (
        arg, shown, ", ".join(_FUSED_ACTIVATIONS))


def _gate_activations_reason(cell):
    """LSTM and GRU: both activations must be ones the kernel fuses."""
    return (_activation_reason("activation", cell.activation)
            or _activation_reason("recurrent_activation", cell.recurrent_activation))


def cell_weights(cell, dtype):
    """A Keras cell's weights as the op takes them (keras_weights), in `dtype`."""
    bias = _read(cell.bias, dtype) if cell.use_bias else None
    return keras_weights(_read(cell.kernel, dtype), _read(cell.recurrent_kernel, dtype), bias)


def cell_attrs(cell, rnn_mode):
    """CudnnRNNV3Keras's attributes for a Keras cell (keras_cell_attrs)."""
    gated = rnn_mode in ("lstm", "gru")
    return keras_cell_attrs(
        rnn_mode, _activation_name(cell.activation),
        _activation_name(cell.recurrent_activation) if gated else None,
        getattr(cell, "reset_after", True))


def cell_dropout(cell, rnn_mode, x, h0, training):
    """Keras' dropout as its cell applies it, with the masks the cell holds for this call (drawn
    by Keras' RNN.call, or on a cell's first step: the cell's seed generator, in Keras' order;
    docs/keras_layers.md §5): (x [B, T, I] times the input mask where one serves every gate, the
    op's per-gate input masks where each gate has its own (implementation 1), its recurrent
    masks). LSTM and GRU apply a rate in (0, 1), SimpleRNN any rate > 0, and only while
    training."""
    gated = rnn_mode in ("lstm", "gru")

    def applies(rate):
        return bool(training) and dropout_applies(rate, gated)

    input_masks = recurrent_masks = None
    if applies(cell.dropout):
        mask = cell.get_dropout_mask(x[:, 0, :])
        if isinstance(mask, (list, tuple)):
            input_masks = operand_masks(rnn_mode, mask, x.dtype)
        else:
            x = x * tf.expand_dims(tf.cast(mask, x.dtype), 1)
    if applies(cell.recurrent_dropout):
        recurrent_masks = operand_masks(rnn_mode, cell.get_recurrent_dropout_mask(h0), x.dtype)
    return x, input_masks, recurrent_masks


def keras_uniform(cell):
    """Uniform [0, 1) draws of a shape from the cell's seed generator (zoneout's masks)."""
    return lambda shape: keras.random.uniform(shape, seed=cell.seed_generator)


class _FusedRNNMixin(ZoneoutLayer, _Keras3Only):
    """inner_loop for Keras' RNN subclasses: one KerasRNN op over the whole sequence, returning
    exactly what Keras' generic backend.rnn loop returns (its (last_output, outputs, states)), or
    the Keras class's own inner_loop for a call the kernel cannot serve."""

    _rnn_mode = None
    _keras_class = None  # the Keras layer this one replaces, whose inner_loop is the fallback

    def _static_fallback_reason(self):
        """Why no call of this layer can run the fused kernel (None: calls can)."""
        if getattr(self, "use_cudnn", "auto") is False:
            return "use_cudnn=False (asks for Keras' per-step loop)"
        if self.unroll:
            return "unroll=True (asks for Keras' unrolled loop)"
        return None

    def inner_loop(self, sequences, initial_state, mask, training=False):
        if keras.tree.is_nested(mask):
            mask = mask[0]

        def keras_loop():
            return self._keras_class.inner_loop(self, sequences, initial_state, mask,
                                                training=training)

        if call_fallback_reason(self) is not None:
            return keras_loop()
        if mask is not None:
            shape = tf.shape(sequences)
            mask = step_mask(mask, shape[0], shape[1])
        return self._fused_inner_loop(sequences, initial_state, mask, training)

    def _fused_inner_loop(self, sequences, initial_state, mask, training):
        if not keras.tree.is_nested(initial_state):
            initial_state = [initial_state]
        x = _as_input(sequences, self)
        dtype = x.dtype
        lstm = self._rnn_mode == "lstm"
        h0 = tf.cast(initial_state[0], dtype)
        c0 = tf.cast(initial_state[1], dtype) if lstm else None
        cell = self.cell
        x, input_masks, recurrent_masks = cell_dropout(cell, self._rnn_mode, x,
                                                       initial_state[0], training)
        # (drawn after Keras' dropout masks, which so stay those Keras draws)
        zoneout = self._zoneout_weights(x, bool(training), keras_uniform(cell))
        return keras_rnn_loop(x, h0, c0, cell_weights(cell, dtype), mask,
                              self._rnn_mode, self.go_backwards, self.return_sequences,
                              self.zero_output_for_mask, training,
                              cell_attrs(cell, self._rnn_mode), input_masks, recurrent_masks,
                              *zoneout)

    def get_config(self):
        return {**super().get_config(), **self._zoneout_config()}


@_register
class LSTM(_FusedRNNMixin, keras.layers.LSTM):
    """Drop-in ``keras.layers.LSTM`` running the fused ``TfLstm>KerasRNN`` kernel.

    Same arguments, defaults, weights (``kernel [I, 4H]``, ``recurrent_kernel [H, 4H]``,
    ``bias [4H]``, gates i, f, c, o) and results as ``keras.layers.LSTM``. Calls the kernel cannot
    serve (activations outside the fused set, ``use_cudnn=False``, ``unroll=True``) run
    ``keras.layers.LSTM``'s own implementation, with a warning.
    """

    _rnn_mode = "lstm"
    _keras_class = keras.layers.LSTM
    _zoneout_args = ("zoneout_h", "zoneout_c")

    def __init__(
        self,
        units,
        activation="tanh",
        recurrent_activation="sigmoid",
        use_bias=True,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        unit_forget_bias=True,
        kernel_regularizer=None,
        recurrent_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        recurrent_constraint=None,
        bias_constraint=None,
        dropout=0.0,
        recurrent_dropout=0.0,
        seed=None,
        return_sequences=False,
        return_state=False,
        go_backwards=False,
        stateful=False,
        unroll=False,
        use_cudnn="auto",
        zoneout_h=0.0,
        zoneout_c=0.0,
        **kwargs,
    ):
        _check_backend("LSTM")
        super().__init__(
            units,
            activation=activation,
            recurrent_activation=recurrent_activation,
            use_bias=use_bias,
            kernel_initializer=kernel_initializer,
            recurrent_initializer=recurrent_initializer,
            bias_initializer=bias_initializer,
            unit_forget_bias=unit_forget_bias,
            kernel_regularizer=kernel_regularizer,
            recurrent_regularizer=recurrent_regularizer,
            bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint,
            recurrent_constraint=recurrent_constraint,
            bias_constraint=bias_constraint,
            dropout=dropout,
            recurrent_dropout=recurrent_dropout,
            seed=seed,
            return_sequences=return_sequences,
            return_state=return_state,
            go_backwards=go_backwards,
            stateful=stateful,
            unroll=unroll,
            use_cudnn=use_cudnn,
            **kwargs,
        )
        self.supports_jit = False  # the custom op has no XLA kernel
        self._init_zoneout(zoneout_h=zoneout_h, zoneout_c=zoneout_c)

    def _static_fallback_reason(self):
        return super()._static_fallback_reason() or _gate_activations_reason(self.cell)


@_register
class GRU(_FusedRNNMixin, keras.layers.GRU):
    """Drop-in ``keras.layers.GRU`` running the fused ``TfLstm>KerasRNN`` kernel (cuDNN's GRU is
    Keras' "reset after" GRU, its default; ``reset_after=False`` runs the op's GRU resetting
    before).

    Same arguments, defaults, weights (``kernel [I, 3H]``, ``recurrent_kernel [H, 3H]``,
    ``bias [2, 3H]`` (``[3H]`` with ``reset_after=False``), gates z, r, h) and results as
    ``keras.layers.GRU``. Calls the kernel cannot serve (activations outside the fused set,
    ``use_cudnn=False``, ``unroll=True``) run ``keras.layers.GRU``'s own implementation, with a
    warning.
    """

    _rnn_mode = "gru"
    _keras_class = keras.layers.GRU
    _zoneout_args = ("zoneout",)

    def __init__(
        self,
        units,
        activation="tanh",
        recurrent_activation="sigmoid",
        use_bias=True,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        kernel_regularizer=None,
        recurrent_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        recurrent_constraint=None,
        bias_constraint=None,
        dropout=0.0,
        recurrent_dropout=0.0,
        seed=None,
        return_sequences=False,
        return_state=False,
        go_backwards=False,
        stateful=False,
        unroll=False,
        reset_after=True,
        use_cudnn="auto",
        zoneout=0.0,
        **kwargs,
    ):
        _check_backend("GRU")
        super().__init__(
            units,
            activation=activation,
            recurrent_activation=recurrent_activation,
            use_bias=use_bias,
            kernel_initializer=kernel_initializer,
            recurrent_initializer=recurrent_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            recurrent_regularizer=recurrent_regularizer,
            bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint,
            recurrent_constraint=recurrent_constraint,
            bias_constraint=bias_constraint,
            dropout=dropout,
            recurrent_dropout=recurrent_dropout,
            seed=seed,
            return_sequences=return_sequences,
            return_state=return_state,
            go_backwards=go_backwards,
            stateful=stateful,
            unroll=unroll,
            reset_after=reset_after,
            use_cudnn=use_cudnn,
            **kwargs,
        )
        self.supports_jit = False  # the custom op has no XLA kernel
        self._init_zoneout(zoneout=zoneout)

    def _static_fallback_reason(self):
        return super()._static_fallback_reason() or _gate_activations_reason(self.cell)


@_register
class SimpleRNN(_FusedRNNMixin, keras.layers.SimpleRNN):
    """Drop-in ``keras.layers.SimpleRNN`` running the fused ``TfLstm>KerasRNN`` kernel
    (``rnn_tanh`` or ``rnn_relu``).

    Same arguments, defaults, weights (``kernel [I, H]``, ``recurrent_kernel [H, H]``,
    ``bias [H]``) and results as ``keras.layers.SimpleRNN``. Calls the kernel cannot serve
    (an activation outside the fused set, ``unroll=True``) run ``keras.layers.SimpleRNN``'s own
    implementation, with a warning.
    """

    _keras_class = keras.layers.SimpleRNN
    _zoneout_args = ("zoneout",)

    def __init__(
        self,
        units,
        activation="tanh",
        use_bias=True,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        kernel_regularizer=None,
        recurrent_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        recurrent_constraint=None,
        bias_constraint=None,
        dropout=0.0,
        recurrent_dropout=0.0,
        return_sequences=False,
        return_state=False,
        go_backwards=False,
        stateful=False,
        unroll=False,
        seed=None,
        zoneout=0.0,
        **kwargs,
    ):
        _check_backend("SimpleRNN")
        super().__init__(
            units,
            activation=activation,
            use_bias=use_bias,
            kernel_initializer=kernel_initializer,
            recurrent_initializer=recurrent_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            recurrent_regularizer=recurrent_regularizer,
            bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint,
            recurrent_constraint=recurrent_constraint,
            bias_constraint=bias_constraint,
            dropout=dropout,
            recurrent_dropout=recurrent_dropout,
            return_sequences=return_sequences,
            return_state=return_state,
            go_backwards=go_backwards,
            stateful=stateful,
            unroll=unroll,
            seed=seed,
            **kwargs,
        )
        # cuDNN's own mode for tanh and relu; Keras' other activations on rnn_tanh's weights
        self._rnn_mode = "rnn_relu" if _activation_name(activation) == "relu" else "rnn_tanh"
        self.supports_jit = False  # the custom op has no XLA kernel
        self._init_zoneout(zoneout=zoneout)

    def _static_fallback_reason(self):
        return (super()._static_fallback_reason()
                or _activation_reason("activation", self.cell.activation))
