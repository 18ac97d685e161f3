"""What the gradient modules share: a string attribute read from an op, where an op runs, and
running a composite in the kernels' compute type."""

import tensorflow as tf


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


def runs_on_cpu(op):
    """Whether `op` runs on a CPU: its device's type (in eager, the device its output is on: where
    it ran); unplaced or without a device type, whether the process sees no GPU. The fused
    second-order kernels (docs/block_lstm.md §7.2) have CPU kernels only."""
    device = getattr(op, "device", "") or (op.outputs[0].device if op.outputs else "")
    device_type = tf.DeviceSpec.from_string(device).device_type if device else None
    if device_type:
        return device_type.upper() == "CPU"
    return not tf.config.list_logical_devices("GPU")
