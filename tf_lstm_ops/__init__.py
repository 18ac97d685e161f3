"""tf_lstm_ops: fast, correct LSTM and cuDNN-format RNN kernels for TensorFlow (custom ops).

    import tf_lstm_ops
    out = tf_lstm_ops.raw.BlockLSTMV2(**kwargs)    # drop-in for tf.raw_ops.BlockLSTMV2
    out = tf_lstm_ops.block_lstm(x, w, b)          # Pythonic wrapper
    out = tf.raw_ops.CudnnRNNV3(**kwargs)          # TF's own op, now with a CPU kernel

Importing loads the op library (an ImportError says why when it cannot) and registers the
gradients: the CPU kernels for TF's own CudnnRNN op names exist from then on, so graphs and
SavedModels that contain them run on CPU.
"""

from tf_lstm_ops._loader import require_tensorflow as _require_tensorflow

_require_tensorflow()  # without TensorFlow: an ImportError naming the pip commands

from tf_lstm_ops import _gradients  # noqa: E402, F401  (registers the gradients, once)
from tf_lstm_ops import raw  # noqa: E402
from tf_lstm_ops._loader import library as _library  # noqa: E402
from tf_lstm_ops.ops import LSTMOutputs, block_lstm, lstm_block_cell  # noqa: E402

__version__ = "0.1.0"

__all__ = ["raw", "block_lstm", "lstm_block_cell", "LSTMOutputs", "load_library"]


def load_library():
    """The loaded op library module (TF's generated wrappers of every op in it)."""
    return _library.module


load_library()
