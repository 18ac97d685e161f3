"""tf_lstm_ops: fast, correct LSTM kernels for TensorFlow, loaded as a custom-op plugin.

    import tf_lstm_ops
    out = tf_lstm_ops.raw.BlockLSTMV2(**kwargs)    # drop-in for tf.raw_ops.BlockLSTMV2
    out = tf_lstm_ops.block_lstm(x, w, b)          # Pythonic wrapper

The compiled library loads on first use; gradients are registered on import.
"""

from tf_lstm_ops import _gradients  # noqa: F401  (registers the gradients, once)
from tf_lstm_ops import raw
from tf_lstm_ops._loader import library as _library
from tf_lstm_ops.ops import LSTMOutputs, block_lstm, lstm_block_cell

__version__ = "0.1.0"

__all__ = ["raw", "block_lstm", "lstm_block_cell", "LSTMOutputs", "load_library"]


def load_library():
    """Loads the op library now (it otherwise loads on first use); raises ImportError on failure."""
    return _library.module
