"""The CudnnRNN forward written with TensorFlow ops (docs/cudnn_rnn.md §4-§6), differentiable to
any order, and the gradients of the CudnnRNNBackprop ops built on it.

The Backprop ops compute a vector-Jacobian product g = J(θ)ᵀ v of the forward f at
θ = (input, input_h, input_c, params) for v = (output_backprop, output_h_backprop,
output_c_backprop). Their gradient for a cotangent u of g is, w.r.t. v, the Jacobian-vector
product J(θ) u, and w.r.t. θ the second-order term ∂/∂θ ⟨J(θ)ᵀ v, u⟩. Both come from one double
backpropagation through this module's forward, so nested tapes, Hessian-vector products and
`tf.autodiff.ForwardAccumulator` (whose JVPs transpose the gradient) work through every op of
the family, to any order. An LSTM layer without projection is rebuilt as BlockLSTMV2, whose
second derivatives are fused where BlockLSTMFullGradGrad has a kernel (docs/block_lstm.md §7.2);
every other mode and the projected LSTM as a `tf.scan` per layer and direction: a loop of small
ops, at roughly the speed of Keras' own loop (docs/cudnn_rnn.md §7.4). With dropout between
layers the forward's masks are read back from its reserve space (CudnnRNNDropoutKept) and
replayed, so the composite is the very function the Backprop op differentiated.

The saved `output`, `output_h`, `output_c` and `reserve_space` inputs get no gradient: the
composite recomputes them from θ, so the total derivative is already in θ's gradient.
CudnnRNNBackpropV3Keras's operand masks (Keras' recurrent dropout) are constants, multiplied into
each gate's product as the kernels do (docs/keras_layers.md §5), and so are its zoneout weights,
blending each new state with the previous one (docs/cudnn_rnn.md §4.9).
"""

import tensorflow as tf
from tensorflow.python.framework import ops

from tf_lstm_ops._gradients._common import (has_kernel_where, in_compute_type, runs_on_cpu,
                                             string_attr)
from tf_lstm_ops._loader import OP_NAMESPACE, library
from tf_lstm_ops._rnn_activations import ACTIVATIONS

_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def _operand_mask(op, mask, name):
    """An operand mask input: None when it is the empty vector (none), else the tensor."""
    if mask.shape.rank == 1:
        return None
    if mask.shape.rank == 3:
        return mask
    raise ValueError(
        "the gradient of %s (second derivatives) needs %s's rank when the graph is built: 1 "
        "(none) or 3; got %s" % (op.type, name, mask.shape))


def _zoneout_weights(op, weights, name):
    """A zoneout weights input: None when it is the empty vector (not zoned), else the tensor
    (a scalar, or [T, B, H] in the input's layout)."""
    if weights.shape.rank == 1:
        return None
    if weights.shape.rank in (0, 3):
        return weights
    raise ValueError(
        "the gradient of %s (second derivatives) needs %s's rank when the graph is built: 0, 1 "
        "(none) or 3; got %s" % (op.type, name, weights.shape))


def _zone(weights, new, previous):
    """Zoneout's carried state: weights·new + (1 - weights)·previous (docs/cudnn_rnn.md §4.9)."""
    return weights * new + (1 - weights) * previous


def _static_dim(op, tensor, axis, name):
    if tensor.shape.rank == 3 and tensor.shape[axis] is not None:
        return tensor.shape[axis]
    raise ValueError(
        "the gradient of %s (second derivatives of the CudnnRNN ops) needs %s's dimension %d "
        "when the graph is built; got %s" % (op.type, name, axis, tensor.shape))


class _Model:
    """The model of one Backprop op, from its attributes and its inputs' static sizes (as the
    kernel resolves them, docs/cudnn_rnn.md §3)."""

    def __init__(self, op, version):
        self.mode = string_attr(op, "rnn_mode")
        # The *Keras ops' activations ("": cuDNN's; docs/cudnn_rnn.md §4.7); the
        # other ops have no such attributes.
        keras_op = op.type.endswith("Keras")
        self.activation_attrs = {
            name: string_attr(op, name) if keras_op else ""
            for name in ("activation", "recurrent_activation")}
        # GRU resetting before its recurrent product (docs/cudnn_rnn.md §4.8)
        self.reset_after = op.get_attr("reset_after") if keras_op else True
        self.act = ACTIVATIONS[self.activation_attrs["activation"] or (
            "relu" if self.mode == "rnn_relu" else "tanh")]
        self.rec = ACTIVATIONS[self.activation_attrs["recurrent_activation"] or "sigmoid"]
        cudnn_cells = self.act is tf.tanh and self.rec is tf.sigmoid
        # BlockLSTMV2's second derivatives are fused where BlockLSTMFullGradGrad has a kernel
        # (CPU; GPU in a CUDA build): elsewhere the scan, which stays on the op's device
        self.lstm_by_block = (self.mode == "lstm" and cudnn_cells
                              and has_kernel_where("BlockLSTMFullGradGrad", op))
        self.G = _GATES[self.mode]
        self.D = 2 if string_attr(op, "direction") == "bidirectional" else 1
        self.version = version
        self.time_major = op.get_attr("time_major") if version == 3 else True
        x, h0, c0 = op.inputs[0], op.inputs[1], op.inputs[2]
        self.I = _static_dim(op, x, 2, "input")
        self.Hr = _static_dim(op, h0, 2, "input_h")
        self.L = _static_dim(op, h0, 0 if self.time_major else 1, "input_h") // self.D
        # H: the cell width, input_c's for LSTM (wider than h with a projection)
        self.H = _static_dim(op, c0, 2, "input_c") if self.mode == "lstm" else self.Hr
        num_proj = op.get_attr("num_proj") if version == 3 else 0
        self.P = num_proj if 0 < num_proj < self.H else 0  # == H: none, as the kernels read it
        input_mode = string_attr(op, "input_mode")
        self.skip = input_mode == "skip_input" or (input_mode == "auto_select"
                                                    and self.I == self.H)
        # dropout between layers (none with one layer): the forward's masks are replayed
        self.dropout = op.get_attr("dropout") if self.L > 1 else 0.0
        # the operand masks [G, B, width] of the *V3Keras Backprop (inputs 13, 14), or None
        self.input_masks = self.recurrent_masks = None
        if keras_op:
            self.input_masks, self.recurrent_masks = (
                _operand_mask(op, op.inputs[k], name)
                for k, name in ((13, "input_masks"), (14, "recurrent_masks")))
        # the zoneout weights of h and c (inputs 15, 16), or None
        self.zoneout = (None, None)
        if keras_op:
            self.zoneout = tuple(_zoneout_weights(op, op.inputs[k], name)
                                 for k, name in ((15, "zoneout_h_weights"),
                                                 (16, "zoneout_c_weights")))
        if (self.input_masks is not None or self.recurrent_masks is not None
                or any(w is not None for w in self.zoneout)):
            self.lstm_by_block = False  # BlockLSTMV2 has no per-gate operands, nor zoneout

    def layer_input(self, layer):
        return self.I if layer == 0 else self.D * self.Hr

    def unpack(self, params):
        """Per pseudo-layer (W [G*H, in] or None, R [G*H, Hr], P [P, H] or None, bW, bR [G*H])
        (docs/cudnn_rnn.md §6.2)."""
        GH, layers, offset = self.G * self.H, [], 0
        for p in range(self.L * self.D):
            layer = p // self.D
            skips = layer == 0 and self.skip
            cols = 0 if skips else self.layer_input(layer)
            # (None only for skip input: a zero-width input has a [G*H, 0] W)
            w = None if skips else tf.reshape(params[offset:offset + GH * cols], [GH, cols])
            offset += GH * cols
            r = tf.reshape(params[offset:offset + GH * self.Hr], [GH, self.Hr])
            offset += GH * self.Hr
            proj = None
            if self.P:
                proj = tf.reshape(params[offset:offset + self.P * self.H], [self.P, self.H])
                offset += self.P * self.H
            layers.append([w, r, proj])
        for p in range(self.L * self.D):
            layers[p] += [params[offset:offset + GH], params[offset + GH:offset + 2 * GH]]
            offset += 2 * GH
        return layers

    def input_side(self, weights, inputs):
        """W x + b_W of every step at once, [T, B, G*H]: one product of the whole sequence, so
        that the loop (and its derivatives) keeps only the recurrent one."""
        w, _, _, bias_w, _ = weights
        if w is None:  # skip_input: each gate block receives x itself
            return tf.tile(inputs, [1, 1, self.G]) + bias_w
        steps_and_batch = tf.shape(inputs)[:2]
        if self.input_masks is not None:  # gate g: (x ⊙ mask_g)·W_gᵀ, the mask at every step
            masks = tf.cast(self.input_masks, inputs.dtype)
            ax = tf.einsum("gtbi,ghi->tbgh", inputs[None] * masks[:, None],
                           tf.reshape(w, [self.G, self.H, w.shape[1]]))
            return tf.reshape(ax, tf.concat([steps_and_batch, [self.G * self.H]], 0)) + bias_w
        return tf.tensordot(inputs, w, [[2], [1]]) + bias_w

    def step(self, weights, ax, h, c):
        """One cell step from its input side ax (docs/cudnn_rnn.md §4): (h_new, c_new)."""
        _, r, proj, _, bias_r = weights
        masks = None
        if self.recurrent_masks is None:
            ah = tf.matmul(h, r, transpose_b=True) + bias_r
        else:  # gate g: (h ⊙ mask_g)·R_gᵀ
            masks = tf.cast(self.recurrent_masks, h.dtype)
            ah = tf.einsum("gbk,ghk->bgh", h[None] * masks,
                           tf.reshape(r, [self.G, self.H, self.Hr]))
            ah = tf.reshape(ah, [-1, self.G * self.H]) + bias_r
        act, rec = self.act, self.rec
        if self.mode in ("rnn_tanh", "rnn_relu"):
            return act(ax + ah), c
        if self.mode == "gru":
            xr, xu, xn = tf.split(ax, 3, axis=1)
            hr, hu, hn = tf.split(ah, 3, axis=1)
            reset, update = rec(xr + hr), rec(xu + hu)
            if self.reset_after:
                candidate = act(xn + reset * hn)
            else:  # the candidate's product reads r ⊙ h (h times its mask, if any)
                operand = reset * (h if masks is None else h * masks[2])
                r_n, b_n = tf.split(r, 3, axis=0)[2], tf.split(bias_r, 3)[2]
                candidate = act(xn + (tf.matmul(operand, r_n, transpose_b=True) + b_n))
            return (1 - update) * candidate + update * h, c
        i, f, g, o = tf.split(ax + ah, 4, axis=1)
        c_new = rec(f) * c + rec(i) * act(g)
        m = rec(o) * act(c_new)
        return (tf.matmul(m, proj, transpose_b=True) if self.P else m), c_new

    def forward(self, x, h0, c0, params, lengths, kept):
        """output, output_h, output_c in the op's layouts (output_c: c0 unchanged outside LSTM
        mode, where the kernel ignores it), with the dropout masks `kept` (CudnnRNNDropoutKept's,
        or None without dropout). 16-bit types compute in float32, as the kernels accumulate
        (docs/cudnn_rnn.md §8)."""
        return in_compute_type(lambda t: self._forward(*t, lengths, kept), [x, h0, c0, params])

    def dropout_scale(self, dtype):
        """What a kept element is multiplied by: 1 / (1 - dropout) computed in `dtype`, as the
        kernels compute it; 0 when dropout is 1 (docs/cudnn_rnn.md §5.3)."""
        if self.dropout >= 1:
            return tf.zeros([], dtype)
        one = tf.ones([], dtype)
        return one / (one - tf.constant(self.dropout, dtype))

    def _forward(self, x, h0, c0, params, lengths, kept):
        if not self.time_major:
            x = tf.transpose(x, [1, 0, 2])
        steps, batch = tf.shape(x)[0], tf.shape(x)[1]
        LD = self.L * self.D
        lstm = self.mode == "lstm"
        # Batch-major states are the time-major memory relabelled (docs/cudnn_rnn.md §3).
        h0_tm = tf.reshape(h0, [LD, batch, self.Hr])
        c0_tm = tf.reshape(c0, [LD, batch, self.H]) if lstm else tf.zeros([LD, batch, self.H],
                                                                           x.dtype)
        if lengths is None:
            lengths = tf.fill([batch], steps)
        valid = tf.expand_dims(tf.sequence_mask(lengths, steps, dtype=tf.bool), -1)  # [B, T, 1]
        valid = tf.transpose(valid, [1, 0, 2])
        layers = self.unpack(params)
        # zoneout (one layer, one direction): scalar weights, or per step [T, B, H]
        self.zoneout_steps = tuple(
            None if w is None else tf.transpose(tf.cast(w, x.dtype), [1, 0, 2])
            if w.shape.rank == 3 and not self.time_major else tf.cast(w, x.dtype)
            for w in self.zoneout)
        final_h, final_c = [], []
        inputs = x
        # On the CPU an LSTM without projection runs as BlockLSTMV2, so that its second
        # derivatives are the fused ones (docs/block_lstm.md §7.2), not a scan's.
        layer_fn = self._block_layer if self.lstm_by_block and not self.P else self._scan_layer
        for layer in range(self.L):
            outputs = []
            for d in range(self.D):
                p = layer * self.D + d
                ys, h_n, c_n = layer_fn(layers[p], inputs, valid, lengths, h0_tm[p], c0_tm[p],
                                        d == 1)
                outputs.append(ys)
                final_h.append(h_n)
                final_c.append(c_n)
            inputs = tf.concat(outputs, axis=2) if self.D == 2 else outputs[0]
            if kept is not None and layer + 1 < self.L:  # the next layer's input, dropped out
                scale = self.dropout_scale(inputs.dtype)
                inputs = inputs * tf.where(kept[layer], scale, tf.zeros_like(scale))
        output_h = tf.reshape(tf.stack(final_h), tf.shape(h0))
        output_c = tf.reshape(tf.stack(final_c), tf.shape(c0)) if lstm else c0
        if not self.time_major:
            inputs = tf.transpose(inputs, [1, 0, 2])
        return inputs, output_h, output_c

    def _scan_layer(self, weights, inputs, valid, lengths, h0, c0, reverse):
        """One layer and direction as a `tf.scan` of step(): (outputs, final h, final c). The
        loop carries h (and c for the LSTM) and nothing else: the outputs are the carried h
        where a step is valid, zeros elsewhere."""
        del lengths  # `valid` holds them
        lstm = self.mode == "lstm"
        # zoneout's per-step weights go through the scan with the inputs, scalar ones are
        # constants of the step
        per_step = [w for w in self.zoneout_steps if w is not None and w.shape.rank == 3]

        def cell(carry, elems):
            h, c = carry if lstm else (carry, None)
            ax_t, valid_t, *step_weights = elems
            h_new, c_new = self.step(weights, ax_t, h, c)
            step_weights = iter(step_weights)
            zoned = [None if w is None else next(step_weights) if w.shape.rank == 3 else w
                     for w in self.zoneout_steps]
            if zoned[0] is not None:  # (the new h read the un-zoned new c)
                h_new = _zone(zoned[0], h_new, h)
            if zoned[1] is not None:
                c_new = _zone(zoned[1], c_new, c)
            h_new = tf.where(valid_t, h_new, h)
            return (h_new, tf.where(valid_t, c_new, c)) if lstm else h_new

        states = tf.scan(cell, (self.input_side(weights, inputs), valid, *per_step),
                         initializer=(h0, c0) if lstm else h0, reverse=reverse)
        hs, cs = states if lstm else (states, None)
        ys = tf.where(valid, hs, tf.zeros_like(hs))

        def last(initial, carried):
            """The carry after the last processed step (t = T-1 forward, t = 0 backward; the
            initial state when T = 0)."""
            if reverse:
                return tf.concat([carried, initial[None]], 0)[0]
            return tf.concat([initial[None], carried], 0)[-1]

        return ys, last(h0, hs), last(c0, cs) if lstm else c0

    def _block_layer(self, weights, inputs, valid, lengths, h0, c0, reverse):
        """One LSTM layer and direction without projection as BlockLSTMV2: cuDNN's gate order
        i, f, g, o is its IFCO layout, the two biases add, no forget bias, clip or peepholes
        (docs/cudnn_rnn.md §4). Sequence lengths without a per-row trip count: the reverse
        direction reverses each row's first `length` steps (tf.reverse_sequence); steps past a
        row's length run on zero inputs (never NaN), influence no earlier step, are zeroed in the
        output, and the final state is gathered at each row's length."""
        w, r, _, bias_w, bias_r = weights
        if w is None:  # skip_input: each gate block receives x itself
            w = tf.tile(tf.eye(self.H, dtype=inputs.dtype), [4, 1])
        x = tf.where(valid, inputs, tf.zeros_like(inputs))
        if reverse:
            x = tf.reverse_sequence(x, lengths, seq_axis=0, batch_axis=1)
        zeros = tf.zeros([self.H], inputs.dtype)
        out = library.op("BlockLSTMV2")(
            seq_len_max=tf.cast(tf.shape(x)[0], tf.int64), x=x, cs_prev=c0, h_prev=h0,
            w=tf.concat([tf.transpose(w), tf.transpose(r)], 0), wci=zeros, wcf=zeros, wco=zeros,
            b=bias_w + bias_r, cell_clip=0.0, use_peephole=False)
        ys = tf.reverse_sequence(out.h, lengths, seq_axis=0, batch_axis=1) if reverse else out.h
        # state k of [initial, after step 0, ...] is the state after k steps
        at_length = tf.stack([lengths, tf.range(tf.shape(x)[1], dtype=lengths.dtype)], 1)
        final_h = tf.gather_nd(tf.concat([h0[None], out.h], 0), at_length)
        final_c = tf.gather_nd(tf.concat([c0[None], out.cs], 0), at_length)
        return tf.where(valid, ys, tf.zeros_like(ys)), final_h, final_c


def _forward_dropout_masks(op, model, lengths, reserve_space):
    """Which inputs of layers 1..L-1 the forward kept, read from the reserve space the Backprop
    op was given. CudnnRNNDropoutKept has CPU kernels only: it is placed there, out of the
    Backprop op's colocation group (TF copies a GPU reserve space to the host)."""
    if not op.type.startswith(OP_NAMESPACE) and not runs_on_cpu(op):
        raise NotImplementedError(
            "%s on a GPU is TF's cuDNN kernel, whose reserve space holds cuDNN's dropout masks, "
            "which cannot be read back: second derivatives with dropout between layers "
            "(dropout=%g, %d layers) need tf_lstm_ops.raw's op of the same name, or dropout=0"
            % (op.type, model.dropout, model.L))
    x = op.inputs[0]
    if lengths is None:  # V1 and V2: time-major, every length T
        lengths = tf.fill(tf.shape(x)[1:2], tf.shape(x)[0])
    with ops.colocate_with(None, ignore_existing=True), tf.device("/device:CPU:0"):
        return library.op("CudnnRNNDropoutKept")(
            input=x, input_h=op.inputs[1], input_c=op.inputs[2], params=op.inputs[3],
            sequence_lengths=lengths, reserve_space=reserve_space, rnn_mode=model.mode,
            input_mode=string_attr(op, "input_mode"), direction=string_attr(op, "direction"),
            dropout=model.dropout, seed=op.get_attr("seed"), seed2=op.get_attr("seed2"),
            num_proj=op.get_attr("num_proj") if model.version == 3 else 0,
            time_major=model.time_major, reset_after=model.reset_after,
            **model.activation_attrs)


def _backprop_grad(op, grads, version):
    model = _Model(op, version)
    lengths = op.inputs[4] if version == 3 else None
    shift = 1 if version == 3 else 0
    kept = None
    if model.dropout > 0:
        kept = _forward_dropout_masks(op, model, lengths, op.inputs[10 + shift])
    theta = list(op.inputs[:4])  # input, input_h, input_c, params
    v = list(op.inputs[7 + shift:10 + shift])  # output_backprop, output_h_ and output_c_
    u = list(grads)  # None: no cotangent (its term is left out of the inner product)
    if model.mode != "lstm":
        # the kernel ignores input_c and output_c_backprop there (their gradients are zero)
        theta_used, u_used = [theta[0], theta[1], theta[3]], [u[0], u[1], u[3]]
    else:
        theta_used, u_used = theta, u
    with tf.GradientTape() as outer:
        outer.watch(theta_used + v)
        with tf.GradientTape() as inner:
            inner.watch(theta_used)
            outputs = model.forward(theta[0], theta[1], theta[2], theta[3], lengths, kept)
        used_outputs = outputs if model.mode == "lstm" else outputs[:2]
        used_v = v if model.mode == "lstm" else v[:2]
        vjp = inner.gradient(used_outputs, theta_used, output_gradients=used_v,
                             unconnected_gradients=tf.UnconnectedGradients.ZERO)
        # only the results that have a cotangent: the rest is pruned from the graph
        terms = [tf.reduce_sum(g * w) for g, w in zip(vjp, u_used) if w is not None]
        inner_product = tf.add_n(terms) if terms else tf.zeros([], vjp[0].dtype)
    second = outer.gradient(inner_product, theta_used + v,
                            unconnected_gradients=tf.UnconnectedGradients.ZERO)
    theta_grads, v_grads = second[:len(theta_used)], second[len(theta_used):]
    if model.mode != "lstm":
        theta_grads = [theta_grads[0], theta_grads[1], tf.zeros_like(theta[2]), theta_grads[2]]
        v_grads = [v_grads[0], v_grads[1], tf.zeros_like(v[2])]
    result = list(theta_grads)
    if version == 3:
        result.append(None)  # sequence_lengths
    result += [None, None, None]  # output, output_h, output_c: recomputed from theta
    result += list(v_grads)
    result.append(None)  # reserve_space
    if version >= 2:
        result.append(None)  # host_reserved
    return result


# The forward's dropout masks are constants of every derivative: no gradient, and no JVP.
tf.no_gradient(OP_NAMESPACE + "CudnnRNNDropoutKept")

# Our namespaced ops, and TF's own names, whose CPU kernels are ours once the library is loaded
# and for which TF registers no gradient.
for _prefix in (OP_NAMESPACE, ""):
    for _name, _version in (("CudnnRNNBackprop", 1), ("CudnnRNNBackpropV2", 2),
                            ("CudnnRNNBackpropV3", 3)):
        tf.RegisterGradient(_prefix + _name)(
            lambda op, *grads, _version=_version: _backprop_grad(op, grads, _version))
tf.RegisterGradient(OP_NAMESPACE + "CudnnRNNBackpropV3Keras")(
    # the operand masks and zoneout weights
    lambda op, *grads: _backprop_grad(op, grads, 3) + [None] * 4)
