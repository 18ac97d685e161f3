"""What the Keras 3 (``tf_lstm_ops.keras``) and Keras 2 (``tf_lstm_ops.tf_keras``) LayerNorm
layers and cells share, with no Keras import: the cells' norm sublayers, step, config and
dropout rules (LSTM on ``TfLstm>LayerNormLSTM``; GRU and SimpleRNN on ``TfLstm>LayerNormRNN``),
the layers' constructor and config, the fused ops' calls on a cell's weights, and haste's weight
conversions (docs/layer_norm_lstm.md, docs/keras_layers.md §8, §9)."""

import numpy as np
import tensorflow as tf

from tf_lstm_ops._fused_rnn import ZoneoutLayer, is_inference, masked_rnn_loop
from tf_lstm_ops._loader import library

# ε of each LSTM preset where the layer is not given one: TF Addons' 1e-3, haste's and the
# paper authors' 1e-5.
DEFAULT_EPSILON = {"addons": 1e-3, "paper": 1e-5}
# ε of the LayerNorm GRU and SimpleRNN: haste's and TF Addons' LayerNormSimpleRNNCell's.
RNN_EPSILON = 1e-5
# The activations TfLstm>LayerNormRNN computes (the op's names, docs/cudnn_rnn.md §4.7), as the
# errors list them (hard_sigmoid: the Keras version's own).
FUSED_ACTIVATIONS = "tanh, sigmoid, relu, hard_sigmoid, linear, elu, softsign, silu (swish), gelu"


def _epsilon(norm_epsilon):
    if (isinstance(norm_epsilon, bool) or not isinstance(norm_epsilon, (int, float))
            or not 0 < norm_epsilon < float("inf")):
        raise ValueError("norm_epsilon must be a positive number, got %r" % (norm_epsilon,))
    return float(norm_epsilon)


def norm_options(norm, norm_epsilon):
    """The preset and ε of a LayerNorm LSTM (None: the preset's), checked."""
    if norm not in DEFAULT_EPSILON:
        raise ValueError("norm must be 'addons' (TF Addons' LayerNormLSTMCell: the normalised "
                         "cell state carried) or 'paper' (Ba et al., haste: the raw cell state "
                         "carried), got %r" % (norm,))
    return norm, _epsilon(DEFAULT_EPSILON[norm] if norm_epsilon is None else norm_epsilon)


class LayerNormCell(ZoneoutLayer):
    """What every LayerNorm cell shares (a Keras cell subclass: LSTMCell, GRUCell, SimpleRNNCell):
    its LayerNormalization sublayers (``_norms``: attribute and width in units, in weight order),
    built after Keras' own weights; one fused op per step; zoneout; the config. The kinds
    (LayerNormLSTMCellBase, LayerNormRNNCellBase) add their arguments and op. The Keras version's
    mixin, first in the class's bases, provides `_keras` (keras or tf_keras) and the hooks
    below."""

    _keras = None
    _norms = ()
    _gates = 1  # weight blocks (and Keras' per-gate dropout masks): LSTM 4, GRU 3, SimpleRNN 1
    _norm_args = ()  # the cell's own arguments beyond Keras' cell's (but zoneout), for its config

    @property
    def _gated(self):
        """Keras' dropout rule (_fused_rnn.dropout_applies): gated cells apply a rate in (0, 1)."""
        return self._gates > 1

    def _make_norms(self, epsilon, gamma_initializer, gamma_regularizer, gamma_constraint=None,
                    centers=(), beta_initializer="zeros", beta_regularizer=None):
        """The `_norms` sublayers: γ each, β where `centers` (one flag per norm) says."""
        keras = self._keras
        for k, (name, _) in enumerate(self._norms):
            setattr(self, name, keras.layers.LayerNormalization(
                epsilon=epsilon, center=bool(centers[k]) if centers else False,
                gamma_initializer=gamma_initializer, beta_initializer=beta_initializer,
                gamma_regularizer=gamma_regularizer, beta_regularizer=beta_regularizer,
                gamma_constraint=gamma_constraint, dtype=self.dtype_policy, name=name))

    def build(self, input_shape):
        super().build(input_shape)
        for name, width in self._norms:
            self._build_norm(getattr(self, name), width * self.units, input_shape)

    # Per Keras version: a norm sublayer's build, a weight read in a dtype, a step's input as a
    # tensor, a call's `training` as zoneout reads it, the cell's uniform draws, Keras' dropout
    # masks, the op's name for an activation function (None: not fused).
    def _build_norm(self, norm, width, input_shape):
        raise NotImplementedError

    def _read_weight(self, variable, dtype):
        raise NotImplementedError

    def _step_input(self, inputs):
        raise NotImplementedError

    def _zoneout_training(self, training):
        raise NotImplementedError

    def _uniform(self, shape):
        raise NotImplementedError

    def dropout_masks(self, x_step, h0, training):
        """TF Addons' dropout: (one input mask, one recurrent mask on h_{t-1}), each for every
        gate (the first of the per-gate masks Keras' cell draws), None where none applies."""
        raise NotImplementedError

    def _activation_name(self, fn):
        raise NotImplementedError

    def _static_fallback_reason(self):
        return None  # (every step runs the fused op)

    def zoneout_weights(self, x, training):
        """The op's zoneout weights for x [B, T, I] (ZoneoutLayer._zoneout_weights)."""
        return self._zoneout_weights(x, self._zoneout_training(training), self._uniform)

    def run(self, x, states, seq_lengths, recurrent_mask, zoneout, training):
        """The fused op over x [B, T, I] from the states (h first): (outputs, final states)."""
        raise NotImplementedError

    def call(self, inputs, states, training=None):
        nested = isinstance(states, (list, tuple))  # (Keras' cells take a list or the state)
        states = list(states) if nested else [states]
        x = self._step_input(inputs)
        input_mask, recurrent_mask = self.dropout_masks(x, states[0], training)
        if input_mask is not None:
            x = x * tf.cast(input_mask, x.dtype)
        x = tf.expand_dims(x, 1)  # a sequence of one step
        _, states = self.run(x, states, tf.ones([tf.shape(x)[0]], tf.int32), recurrent_mask,
                             self.zoneout_weights(x, training), training)
        return states[0], states if nested else states[0]

    def get_config(self):
        return {**super().get_config(), **self._norm_config(), **self._zoneout_config()}

    def _keras_getter(self, name, serialize=False):
        """Keras' get (or serialize) for an argument named *_initializer, *_regularizer or
        *_constraint; the identity for others."""
        module = {"initializer": "initializers", "regularizer": "regularizers",
                  "constraint": "constraints"}.get(name.rsplit("_", 1)[-1])
        if module is None:
            return lambda value: value
        return getattr(getattr(self._keras, module), "serialize" if serialize else "get")

    def _set_norm_args(self, **values):
        for name, value in values.items():
            setattr(self, name, self._keras_getter(name)(value))

    def _norm_config(self):
        return {name: self._keras_getter(name, serialize=True)(getattr(self, name))
                for name in self._norm_args}


class LayerNormLSTMCellBase(LayerNormCell):
    """The LayerNorm LSTM cell (docs/layer_norm_lstm.md): an LSTMCell with TF Addons' three
    norms (kernel_norm, recurrent_norm, state_norm), the presets, zoneout of h and c."""

    _gates = 4
    _norms = (("kernel_norm", 4), ("recurrent_norm", 4), ("state_norm", 1))
    _zoneout_args = ("zoneout_h", "zoneout_c")
    _norm_args = ("norm", "norm_epsilon", "norm_center", "norm_gamma_initializer",
                  "norm_beta_initializer", "norm_gamma_regularizer", "norm_beta_regularizer")

    def __init__(self, units, norm="addons", norm_epsilon=None, norm_center=True,
                 norm_gamma_initializer="ones", norm_beta_initializer="zeros",
                 norm_gamma_regularizer=None, norm_beta_regularizer=None, zoneout_h=0.0,
                 zoneout_c=0.0, **kwargs):
        super().__init__(units, **kwargs)
        keras = self._keras
        self.norm, self.norm_epsilon = norm_options(norm, norm_epsilon)
        self.norm_center = bool(norm_center)
        self._set_norm_args(norm_gamma_initializer=norm_gamma_initializer,
                            norm_beta_initializer=norm_beta_initializer,
                            norm_gamma_regularizer=norm_gamma_regularizer,
                            norm_beta_regularizer=norm_beta_regularizer)
        for arg, fn in (("activation", keras.activations.tanh),
                        ("recurrent_activation", keras.activations.sigmoid)):
            if getattr(self, arg) is not fn:  # (the fused cell computes these only)
                raise ValueError("%s: %s must be %r, the fused LayerNorm LSTM's, got %r" % (
                    type(self).__name__, arg, fn.__name__, kwargs.get(arg)))
        self._make_norms(self.norm_epsilon, self.norm_gamma_initializer,
                         self.norm_gamma_regularizer,
                         centers=(self.norm_center, self.norm_center, True),
                         beta_initializer=self.norm_beta_initializer,
                         beta_regularizer=self.norm_beta_regularizer)
        self._init_zoneout(zoneout_h=zoneout_h, zoneout_c=zoneout_c)

    def run(self, x, states, seq_lengths, recurrent_mask, zoneout, training):
        return run_cell_op(self, self._read_weight, x, states, seq_lengths, recurrent_mask,
                           zoneout, training)


# The LayerNorm GRU's and SimpleRNN's norms, by the op's cell: the GRU's of x·W and h·R (γ of
# [3H] each), the SimpleRNN's of x·W + h·R (γ of [H]; TF Addons' attribute name).
_RNN_NORMS = {"gru": (("kernel_norm", 3), ("recurrent_norm", 3)),
              "simple_rnn": (("layernorm", 1),)}
_RNN_NORM_ARGS = dict(norm_epsilon=RNN_EPSILON, norm_gamma_initializer="ones",
                      norm_gamma_regularizer=None, norm_gamma_constraint=None)


class LayerNormRNNCellBase(LayerNormCell):
    """The LayerNorm GRU (haste's; `_op_cell` "gru", a GRUCell with reset_after=True) and
    SimpleRNN (TF Addons'; "simple_rnn", a SimpleRNNCell) cells on TfLstm>LayerNormRNN:
    γ-only norms (the biases play β), zoneout of h. `_aliases`: other names the norm arguments
    take (ours: Addons' names), {our name: alias}."""

    _op_cell = None
    _zoneout_args = ("zoneout",)
    _norm_args = tuple(_RNN_NORM_ARGS)
    _aliases = {}

    @property
    def _norms(self):
        return _RNN_NORMS[self._op_cell]

    @property
    def _gates(self):
        return 3 if self._op_cell == "gru" else 1

    def __init__(self, units, *args, norm_epsilon=RNN_EPSILON, norm_gamma_initializer="ones",
                 norm_gamma_regularizer=None, norm_gamma_constraint=None, zoneout=0.0,
                 **kwargs):
        norm_args = dict(norm_epsilon=norm_epsilon, norm_gamma_initializer=norm_gamma_initializer,
                         norm_gamma_regularizer=norm_gamma_regularizer,
                         norm_gamma_constraint=norm_gamma_constraint)
        for name, alias in self._aliases.items():
            if alias in kwargs:
                if norm_args[name] != _RNN_NORM_ARGS[name]:
                    raise ValueError("%s: pass %s or %s (its TF Addons name), not both" % (
                        type(self).__name__, name, alias))
                norm_args[name] = kwargs.pop(alias)
        super().__init__(units, *args, **kwargs)
        epsilon = norm_args.pop("norm_epsilon")
        self.norm_epsilon = _epsilon(RNN_EPSILON if epsilon is None else epsilon)
        self._set_norm_args(**norm_args)
        if self._op_cell == "gru" and not self.reset_after:
            raise ValueError("%s: reset_after must be True (the LayerNorm GRU resets after the "
                             "recurrent product, haste's; its bias is Keras' [2, 3H]), got %r"
                             % (type(self).__name__, self.reset_after))
        for arg in ("activation", "recurrent_activation")[:2 if self._op_cell == "gru" else 1]:
            fn = getattr(self, arg)
            if self._activation_name(fn) is None:
                raise ValueError("%s: %s=%r is not one the fused LayerNorm cell computes (%s)"
                                 % (type(self).__name__, arg,
                                    kwargs.get(arg, getattr(fn, "__name__", fn)),
                                    FUSED_ACTIVATIONS))
        self._make_norms(self.norm_epsilon, self.norm_gamma_initializer,
                         self.norm_gamma_regularizer, self.norm_gamma_constraint)
        self._init_zoneout(zoneout=zoneout)

    def run(self, x, states, seq_lengths, recurrent_mask, zoneout, training):
        return run_rnn_op(self, self._read_weight, x, states, seq_lengths, recurrent_mask,
                          zoneout, training)


class LayerNormLayer:
    """What both Keras versions' LayerNorm layers (RNN subclasses) share: the constructor, which
    gives the RNN layer's arguments (`_layer_args`, the Keras version's) to it and the others to
    a `_cell_class` cell (named `_cell_name`; None: Keras' default), and a config that is the
    RNN's with the cell's arguments inlined, as Keras' LSTM's."""

    _cell_class = None
    _cell_name = None
    _layer_args = ()

    def __init__(self, units, **kwargs):
        layer_args = {k: kwargs.pop(k) for k in self._layer_args if k in kwargs}
        cell = self._cell_class(units, dtype=layer_args.get("dtype"),
                                trainable=layer_args.get("trainable", True),
                                name=self._cell_name, **kwargs)
        super().__init__(cell, **layer_args)

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

    def _cell_dropout(self, x, h0, training, time_major=False):
        """The cell's dropout on the layer's inputs x ([B, T, I], [T, B, I] time-major): (x
        times the input mask, the same at every step as the cell's, and the recurrent mask)."""
        input_mask, recurrent_mask = self.cell.dropout_masks(x[0] if time_major else x[:, 0],
                                                             h0, training)
        if input_mask is not None:
            x = x * tf.expand_dims(tf.cast(input_mask, x.dtype), 0 if time_major else 1)
        return x, recurrent_mask

    def _cell_loop(self, x, mask, states, recurrent_mask, training):
        """The fused op over batch-major x (dropped out) from the initial states (in x's
        dtype), with a bool step mask or None: masked_rnn_loop's results."""
        cell = self.cell
        zoneout = cell.zoneout_weights(x, training)

        def run(x, seq_lengths, zoneout):
            return cell.run(x, states, seq_lengths, recurrent_mask, zoneout, training)

        return masked_rnn_loop(x, mask, self.go_backwards, self.return_sequences,
                               self.zero_output_for_mask, run, zoneout)


def _optional(value, dtype):
    """An optional op input: the empty vector [0] where None."""
    return tf.zeros([0], dtype) if value is None else tf.cast(value, dtype)


def run_cell_op(cell, read, x, states, seq_lengths, recurrent_mask, zoneout, training):
    """The fused op on a LayerNorm LSTM cell's weights (read(variable, dtype) reads one; the
    norms are the cell's kernel_norm, recurrent_norm and state_norm sublayers) over x [B, T, I]
    from states (h0, c0): (outputs [B, T, H], [h, c]). A missing bias or β is zeros."""
    dtype = x.dtype
    gates = 4 * cell.units

    def weight(variable, size=None):
        return tf.zeros([size], dtype) if variable is None else read(variable, dtype)

    norms = (cell.kernel_norm, cell.recurrent_norm, cell.state_norm)
    (gamma_x, beta_x), (gamma_h, beta_h), (gamma_c, beta_c) = (
        (weight(n.gamma), weight(n.beta, width)) for n, width in zip(norms, (gates, gates,
                                                                            cell.units)))
    h0, c0 = states
    out = library.op("LayerNormLSTM")(
        input=x, input_h=tf.cast(h0, dtype), input_c=tf.cast(c0, dtype),
        kernel=weight(cell.kernel), recurrent_kernel=weight(cell.recurrent_kernel),
        bias=weight(cell.bias, gates), gamma_x=gamma_x, beta_x=beta_x, gamma_h=gamma_h,
        beta_h=beta_h, gamma_c=gamma_c, beta_c=beta_c, sequence_lengths=seq_lengths,
        recurrent_mask=_optional(recurrent_mask, dtype),
        zoneout_h_weights=_optional(zoneout[0], dtype),
        zoneout_c_weights=_optional(zoneout[1], dtype),
        norm=cell.norm, epsilon=cell.norm_epsilon, time_major=False,
        is_training=not is_inference(training))
    return out.output, [out.output_h, out.output_c]


def run_rnn_op(cell, read, x, states, seq_lengths, recurrent_mask, zoneout, training):
    """TfLstm>LayerNormRNN on a LayerNorm GRU or SimpleRNN cell's weights (read(variable, dtype)
    reads one; γ from its norm sublayers) over x [B, T, I] from states [h0]: (outputs [B, T, H],
    [h]). No bias (use_bias=False) is zeros."""
    dtype = x.dtype
    gru = cell._op_cell == "gru"
    gammas = [read(getattr(cell, name).gamma, dtype) for name, _ in cell._norms]
    bias_shape = [2, 3 * cell.units] if gru else [cell.units]
    attrs = dict(activation=cell._activation_name(cell.activation))
    if gru:
        attrs["recurrent_activation"] = cell._activation_name(cell.recurrent_activation)
    out = library.op("LayerNormRNN")(
        input=x, input_h=tf.cast(states[0], dtype), kernel=read(cell.kernel, dtype),
        recurrent_kernel=read(cell.recurrent_kernel, dtype),
        bias=tf.zeros(bias_shape, dtype) if cell.bias is None else read(cell.bias, dtype),
        gamma_x=gammas[0], gamma_h=gammas[1] if gru else tf.zeros([0], dtype),
        sequence_lengths=seq_lengths, recurrent_mask=_optional(recurrent_mask, dtype),
        zoneout_weights=_optional(zoneout[0], dtype), cell=cell._op_cell,
        epsilon=cell.norm_epsilon, time_major=False, is_training=not is_inference(training),
        **attrs)
    return out.output, [out.output_h]


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


def haste_gru_weights(kernel, recurrent_kernel, bias, recurrent_bias, gamma):
    """haste's LayerNormGRU variables (kernel [I, 3H], recurrent_kernel [H, 3H], bias [3H] (of
    x·W), recurrent_bias [3H] (of h·R), gamma [2, 3H] (the x·W norm's, then the h·R norm's);
    gates z, r, h as Keras') as the get_weights() list of a LayerNormGRU (kernel,
    recurrent_kernel, bias [2, 3H], kernel_norm γ, recurrent_norm γ; norm_epsilon 1e-5, haste's),
    with NumPy arrays."""
    gamma = np.asarray(gamma)
    return [np.asarray(kernel), np.asarray(recurrent_kernel),
            np.stack([np.asarray(bias), np.asarray(recurrent_bias)]), gamma[0], gamma[1]]
