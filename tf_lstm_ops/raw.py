"""Drop-in replacements for ``tf.raw_ops``: ``tf_lstm_ops.raw.X(**kw)`` for ``tf.raw_ops.X(**kw)``.

Each function has ``tf.raw_ops.X``'s exact argument names, order and defaults (keyword arguments
only) and returns a namedtuple with the same output names. They additionally accept bfloat16 and
float64, have correct registered gradients, and reject bad shapes with InvalidArgumentError.
"""

from tf_lstm_ops._loader import OP_NAMES, PRIVATE_OP_NAMES, library

# Every op of the library that has a tf.raw_ops namesake, in the loader's order.
__all__ = [name for name in OP_NAMES if name not in PRIVATE_OP_NAMES]


def __getattr__(name):
    if name in __all__:
        return library.op(name)
    raise AttributeError("module 'tf_lstm_ops.raw' has no attribute %r" % name)


def __dir__():
    return sorted(__all__)
