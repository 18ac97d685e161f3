"""Gradients of the LSTM block ops (BlockLSTM, BlockLSTMV2, LSTMBlockCell) under our op namespace
(TfLstm>), registered when ``tf_lstm_ops`` is imported.

Where TF 2.21 is wrong we are right (docs/block_lstm.md §7, §9.1):
- BlockLSTMV2 gets the IFCO gradient (TF registers the ICFO one for it, so its tape gradients
  are wrong);
- LSTMBlockCell has a gradient (TF 2.x registers none): one step of the sequence backward, which
  equals the composition LSTMBlockCellGrad + matmuls of docs/block_lstm.md §6.3;
- gradients flowing into i, f, o, ci and co are propagated (TF drops all but cs and h).
All three run our BlockLSTMFullGrad op: BlockLSTMGrad(V2) has no inputs for the i, f, o, ci, co
gradients, and TF's tape hands a gradient function zeros, never None, for unused outputs, so
there is no cheaper case to pick. The extra inputs cost five loads per element of the fused
element-wise step. For LSTMBlockCell the op runs on a one-step sequence (seq_len_max = 1, ICFO):
x, the outputs and their gradients gain a leading step axis, which x's gradient drops again. The
int64 seq_len_max of BlockLSTM(V2) gets no gradient.
"""

import tensorflow as tf

from tf_lstm_ops._loader import OP_NAMESPACE, library

_INPUTS = ("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b")
_OUTPUTS = ("i", "cs", "f", "o", "ci", "co", "h")


def _sequence_backprop(seq_len_max, inputs, outputs, grads, use_peephole, gate_layout):
    """dL/d(x, cs_prev, h_prev, w, wci, wcf, wco, b) of a BlockLSTM(V2) run, given the forward
    inputs, its seven outputs and their gradients (None = zero)."""
    args = dict(zip(_INPUTS, inputs))
    args.update(zip(_OUTPUTS, outputs))
    for name, grad, out in zip(_OUTPUTS, grads, outputs):
        args[name + "_grad"] = tf.zeros_like(out) if grad is None else grad
    return library.op("BlockLSTMFullGrad")(
        seq_len_max=seq_len_max, use_peephole=use_peephole, gate_layout=gate_layout, **args
    )


def _block_lstm_grad(op, grads, gate_layout):
    result = _sequence_backprop(
        op.inputs[0], op.inputs[1:], op.outputs, grads, op.get_attr("use_peephole"), gate_layout
    )
    return [None] + list(result)  # no gradient for the int64 seq_len_max


@tf.RegisterGradient(OP_NAMESPACE + "BlockLSTM")
def _block_lstm_v1_grad(op, *grads):
    return _block_lstm_grad(op, grads, "ICFO")


@tf.RegisterGradient(OP_NAMESPACE + "BlockLSTMV2")
def _block_lstm_v2_grad(op, *grads):
    return _block_lstm_grad(op, grads, "IFCO")


@tf.RegisterGradient(OP_NAMESPACE + "LSTMBlockCell")
def _lstm_block_cell_grad(op, *grads):
    def as_sequence(t):  # [B, ...] -> [1, B, ...]
        return None if t is None else tf.expand_dims(t, 0)

    x_grad, *rest = _sequence_backprop(
        tf.constant(1, tf.int64),
        [as_sequence(op.inputs[0])] + list(op.inputs[1:]),
        [as_sequence(t) for t in op.outputs],
        [as_sequence(g) for g in grads],
        op.get_attr("use_peephole"),
        "ICFO",
    )
    return [x_grad[0]] + rest
