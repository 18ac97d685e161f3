"""What the gradient modules share: a string attribute read from an op, where an op runs and
whether a kernel exists there, and running a composite in the kernels' compute type."""

import functools

import tensorflow as tf
from tensorflow.python.framework import kernels

from tf_lstm_ops._loader import OP_NAMESPACE


def string_attr(op, name):
    value = op.get_attr(name)
    return value.decode() if isinstance(value, bytes) else value


def in_compute_type(fn, tensors):
    """fn(tensors) on float32 copies of the 16-bit ones, its results cast back: the kernels
    compute half and bfloat16 in float32 (docs/block_lstm.md §8.1, docs/cudnn_rnn.md §8)."""
    dtype = next(t.dtype for t in tensors if t.dtype.is_floating)
    if dtype not in (tf.float16, tf.bfloat16):
        return fn(tensors)
    wide = [tf.cast(t, tf.float32) if t.dtype == dtype else t for t in tensors]
    return [tf.cast(t, dtype) for t in fn(wide)]


def device_type(op):
    """"CPU" or "GPU": where `op` runs: its device's type (in eager, the device its output is on:
    where it ran); unplaced or without a device type, GPU when the process sees one."""
    device = getattr(op, "device", "") or (op.outputs[0].device if op.outputs else "")
    kind = tf.DeviceSpec.from_string(device).device_type if device else None
    if kind:
        return kind.upper()
    return "GPU" if tf.config.list_logical_devices("GPU") else "CPU"


def runs_on_cpu(op):
    """Whether `op` runs on a CPU (device_type)."""
    return device_type(op) == "CPU"


@functools.lru_cache(maxsize=None)
def _has_kernel(op_name, kind):
    return any(k.device_type == kind
               for k in kernels.get_registered_kernels_for_op(OP_NAMESPACE + op_name).kernel)


def has_kernel_where(op_name, op):
    """Whether our op `op_name` has a kernel on the device type `op` runs on: the fused
    second-order op (docs/block_lstm.md §7.2) has CPU kernels, and GPU ones in a CUDA build."""
    return _has_kernel(op_name, device_type(op))


def double_backprop(op, grads, forward, attrs, n, n_constants, cotangents):
    """The gradient of a fused Grad op whose inputs are the forward's n differentiable inputs θ,
    its n_constants constants, the `cotangents` output cotangents v and a reserve space, from
    `forward` (the forward op written with TensorFlow ops, called with θ, the constants and
    attrs). The Grad op computes g = J(θ)ᵀ v: for a cotangent u of g, the gradient w.r.t. v is
    J(θ) u and w.r.t. θ ∂/∂θ ⟨J(θ)ᵀ v, u⟩, both from one double backpropagation."""
    theta = list(op.inputs[:n])
    constants = list(op.inputs[n:n + n_constants])
    v = list(op.inputs[n + n_constants:n + n_constants + cotangents])
    with tf.GradientTape() as outer:
        outer.watch(theta + v)
        with tf.GradientTape() as inner:
            inner.watch(theta)
            outputs = forward(*theta, *constants, **attrs)
        vjp = inner.gradient(outputs, theta, output_gradients=v,
                             unconnected_gradients=tf.UnconnectedGradients.ZERO)
        terms = [tf.reduce_sum(g * u) for g, u in zip(vjp, grads) if u is not None]
        inner_product = tf.add_n(terms) if terms else tf.zeros([], vjp[0].dtype)
    second = outer.gradient(inner_product, theta + v,
                            unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return second[:n] + [None] * n_constants + second[n:] + [None]  # (reserve_space)
