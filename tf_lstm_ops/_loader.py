"""Finds, checks and loads the compiled op library, once (`import tf_lstm_ops` does it).

Search order: $TF_LSTM_OPS_LIBRARY, the package directory (an installed wheel), then the
repository's bazel-bin (a source checkout after ./configure.sh). Every failure is an ImportError
that says what was found, what was expected and how to fix it: with `pip install ...` for a wheel
user, with ./configure.sh only when running from a checkout (checkout_root()).
"""

import ctypes
import functools
import importlib.util
import os
import threading

_LIBRARY_NAME = "_lstm_ops.so"
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_REPO_ROOT = os.path.dirname(_PACKAGE_DIR)

# TF op names (namespaced: TF silently ignores a plugin op registered under a core name).
OP_NAMESPACE = "TfLstm>"
# The CudnnRNN family: also registered as CPU kernels for TF's own op names.
CUDNN_OP_NAMES = (
    "CudnnRNN",
    "CudnnRNNV2",
    "CudnnRNNV3",
    "CudnnRNNBackprop",
    "CudnnRNNBackpropV2",
    "CudnnRNNBackpropV3",
    "CudnnRNNParamsSize",
    "CudnnRNNParamsToCanonical",
    "CudnnRNNParamsToCanonicalV2",
    "CudnnRNNCanonicalToParams",
    "CudnnRNNCanonicalToParamsV2",
)
# Ours alone, with no tf.raw_ops namesake, so tf_lstm_ops.raw leaves them out.
PRIVATE_OP_NAMES = (
    "BlockLSTMFullGrad",  # the gradient w.r.t. all seven outputs
    "BlockLSTMFullGradGrad",  # its gradient (second derivatives)
    "KerasToCudnnParams",  # the Keras layers' weights as CudnnRNN params, and back
    "CudnnParamsToKeras",
    "CudnnRNNDropoutKept",  # the dropout masks in a reserve space (second derivatives), CPU only
    "CudnnRNNV3Keras",  # V3 with Keras' cell options (the Keras layers run it)
    "CudnnRNNBackpropV3Keras",
    "KerasRNN",  # V3Keras on Keras' weights as Keras stores them (the Keras layers run it)
    "KerasRNNBackprop",
    "LayerNormLSTM",  # the LayerNorm LSTM (its layers and cells run it)
    "LayerNormLSTMGrad",
    "LayerNormRNN",  # the LayerNorm GRU and SimpleRNN (their layers and cells run it)
    "LayerNormRNNGrad",
)
OP_NAMES = (
    "LSTMBlockCell",
    "LSTMBlockCellGrad",
    "BlockLSTM",
    "BlockLSTMGrad",
    "BlockLSTMV2",
    "BlockLSTMGradV2",
) + PRIVATE_OP_NAMES + CUDNN_OP_NAMES

_REBUILD_HINT = "rebuild it with ./configure.sh (or: bazel build //:tf_lstm_ops/_lstm_ops.so)"


def checkout_root(library_path=None):
    """The repository root when tf_lstm_ops runs from a source checkout (the package's parent, or
    the directory holding the library's bazel-bin, has configure.sh), else None: an installed
    wheel, whose users have no ./configure.sh to run."""
    candidates = [_REPO_ROOT]
    if library_path:
        parts = os.path.abspath(library_path).split(os.sep)
        if "bazel-bin" in parts:
            candidates.append(os.sep.join(parts[: parts.index("bazel-bin")]) or os.sep)
    for root in candidates:
        if os.path.isfile(os.path.join(root, "configure.sh")):
            return root
    return None


def _installed_tensorflow():
    """The installed TensorFlow distribution's name ("tensorflow-cpu", "tensorflow", ...), or
    None; asked of the package metadata, without importing TensorFlow."""
    from importlib import metadata

    for name in ("tensorflow-cpu", "tensorflow", "tensorflow-intel", "tf-nightly",
                 "tf-nightly-cpu"):
        try:
            metadata.version(name)
            return name
        except metadata.PackageNotFoundError:
            continue
    return None


def pip_hint(tf_minor, installed=None):
    """How a wheel user gets a TensorFlow the library loads into: the pip commands."""
    package = "tensorflow" if installed in ("tensorflow", "tensorflow-intel", "tf-nightly") else (
        "tensorflow-cpu")
    return (
        'install the TensorFlow it was built for: pip install "%s==%s.*" (for NVIDIA GPUs: '
        'pip install "tensorflow[and-cuda]==%s.*"), or a tf_lstm_ops wheel built for your '
        "TensorFlow (its version names the TensorFlow minor: +tf<major>.<minor>)"
        % (package, tf_minor, tf_minor))


def _fix_hint(library_path, built_version):
    """What to do when the library does not fit the running TensorFlow: rebuild (a checkout) or
    install the TensorFlow minor it was built for (a wheel)."""
    if checkout_root(library_path) is not None or built_version is None:
        return _REBUILD_HINT
    return pip_hint(".".join(built_version.split(".")[:2]), _installed_tensorflow())


def require_tensorflow():
    """Imports TensorFlow, or raises an ImportError naming the pip commands that install the
    TensorFlow the library was built for (tf_lstm_ops' wheel does not require TensorFlow: its
    extras [cpu] and [and-cuda] pick the CPU or the GPU build)."""
    try:
        import tensorflow  # noqa: F401
    except ModuleNotFoundError as e:
        if e.name != "tensorflow":
            raise
        info = None
        try:
            library_path = find_library()
            info = read_build_info(library_path)
        except ImportError:
            library_path = None
        if info is not None:
            minor = ".".join(info.TF_VERSION.split(".")[:2])
            needs = "TensorFlow %s (the op library was built against %s)" % (minor, info.TF_VERSION)
            pin = "==%s.*" % minor
        else:
            needs, pin = "TensorFlow", ""
        message = (
            "tf_lstm_ops needs %s, which is not installed. Install it with the package's extra:\n"
            '  pip install "tf_lstm_ops[cpu]"        # tensorflow-cpu%s\n'
            '  pip install "tf_lstm_ops[and-cuda]"   # tensorflow[and-cuda]%s, for NVIDIA GPUs\n'
            'or directly: pip install "tensorflow-cpu%s".'
            % (needs, pin, pin, pin))
        root = checkout_root(library_path)
        if root is not None:
            message += " In the source checkout %s, ./configure.sh sets up .venv with it." % root
        raise ImportError(message) from e


def candidate_paths():
    """Where the library may be, in the order searched ($TF_LSTM_OPS_LIBRARY alone if set)."""
    if os.environ.get("TF_LSTM_OPS_LIBRARY"):
        return [os.environ["TF_LSTM_OPS_LIBRARY"]]
    return [
        os.path.join(_PACKAGE_DIR, _LIBRARY_NAME),
        os.path.join(_REPO_ROOT, "bazel-bin", "tf_lstm_ops", _LIBRARY_NAME),
    ]


def find_library():
    for path in candidate_paths():
        if os.path.isfile(path):
            return path
    if checkout_root() is not None:
        fix = ("Build it from the repository root with ./configure.sh (sets up .venv and runs "
               "bazel build).")
    else:
        fix = ("The installed package is incomplete: reinstall the wheel "
               '(pip install --force-reinstall "tf_lstm_ops[cpu]"), or unset '
               "TF_LSTM_OPS_LIBRARY if it points to the wrong file.")
    raise ImportError(
        "tf_lstm_ops: the op library %s was not found; looked in:\n  %s\n%s"
        % (_LIBRARY_NAME, "\n  ".join(candidate_paths()), fix)
    )


def read_build_info(library_path):
    """The _build_info.py written by Bazel next to the library: what it was built against."""
    info_path = os.path.join(os.path.dirname(library_path), "_build_info.py")
    if not os.path.isfile(info_path):
        return None
    spec = importlib.util.spec_from_file_location("_tf_lstm_ops_build_info", info_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_info():
    """What the op library that `import tf_lstm_ops` loads was built with, as a dict:
    TF_VERSION, TF_CXX11_ABI_FLAG, CUDA_VERSION ("" for a CPU-only library) and
    CUDA_COMPUTE_CAPABILITIES (e.g. ("80", "90"); () without CUDA). {} when the library has no
    _build_info.py next to it."""
    info = read_build_info(find_library())
    if info is None:
        return {}
    return {
        "TF_VERSION": info.TF_VERSION,
        "TF_CXX11_ABI_FLAG": info.TF_CXX11_ABI_FLAG,
        "CUDA_VERSION": getattr(info, "CUDA_VERSION", ""),
        "CUDA_COMPUTE_CAPABILITIES": tuple(getattr(info, "CUDA_COMPUTE_CAPABILITIES", ())),
    }


def _major_minor(version):
    return tuple(version.split(".")[:2])


def check_version(built_version, running_version, library_path=None):
    """Raises ImportError when the library was built for another TF major.minor (ABI changes)."""
    if os.environ.get("TF_LSTM_OPS_SKIP_VERSION_CHECK") == "1":
        return
    if _major_minor(built_version) != _major_minor(running_version):
        raise ImportError(
            "tf_lstm_ops: the op library was built against TensorFlow %s but TensorFlow %s is "
            "running; TensorFlow's C++ ABI changes between minor versions, so %s. "
            "(TF_LSTM_OPS_SKIP_VERSION_CHECK=1 skips this check at your own risk.)"
            % (built_version, running_version, _fix_hint(library_path, built_version))
        )


def load(tf):
    """Loads the library into TensorFlow and returns the module of generated op wrappers."""
    path = find_library()
    info = read_build_info(path)
    if info is not None:
        check_version(info.TF_VERSION, tf.__version__, path)
    try:
        module = tf.load_op_library(path)
    except tf.errors.NotFoundError as e:
        if "undefined symbol" in str(e):
            built = (
                "TensorFlow %s (CXX11 ABI %d)" % (info.TF_VERSION, info.TF_CXX11_ABI_FLAG)
                if info is not None
                else "an unknown TensorFlow"
            )
            raise ImportError(
                "tf_lstm_ops: %s was built against %s and does not link with the running "
                "TensorFlow %s (CXX11 ABI %d): %s; %s."
                % (path, built, tf.__version__, tf.sysconfig.CXX11_ABI_FLAG, e,
                   _fix_hint(path, info.TF_VERSION if info is not None else None))
            ) from e
        raise ImportError("tf_lstm_ops: loading %s failed: %s" % (path, e)) from e
    missing = [name for name in OP_NAMES if not hasattr(module, python_op_name(name))]
    if missing:
        raise ImportError(
            "tf_lstm_ops: %s loaded but does not define the ops %s; %s."
            % (path, ", ".join(missing),
               _REBUILD_HINT if checkout_root(path) is not None else
               'reinstall the wheel (pip install --force-reinstall "tf_lstm_ops[cpu]"), or unset '
               "TF_LSTM_OPS_LIBRARY if it points to another library")
        )
    return module


def cpu_isa():
    """Which build of the CPU GEMM blocks runs on this CPU: "avx512_bf16", "avx512", "avx2", "avx"
    or "generic" ($TF_LSTM_OPS_CPU_ISA=avx512, avx2 or avx caps it, for tests)."""
    return _diagnostic("tf_lstm_ops_cpu_isa", ctypes.c_char_p)().decode()


def fma_peak_gflops(seconds):
    """The float32 FMA rate of the core running the calling thread, in GFLOP/s, with the ISA
    build cpu_isa() names: a loop of independent register-only fused multiply-adds run for about
    `seconds`. ctypes releases the GIL during the call, so threads calling it at once measure as
    many cores at once (the benchmark's hardware peak)."""
    return _diagnostic("tf_lstm_ops_fma_peak_gflops", ctypes.c_double, (ctypes.c_double,))(
        seconds)


def in_place_backward_runs():
    """How many CPU BlockLSTM gradient runs in this process stored the gate gradients in place of
    the saved i, f, ci, o (which TensorFlow hands over only when nothing else holds them: inside
    a graph or tf.function, never eagerly); a diagnostic for the tests."""
    return _diagnostic("tf_lstm_ops_in_place_backward_runs", ctypes.c_int64)()


@functools.lru_cache(maxsize=None)
def _diagnostic(name, restype, argtypes=()):
    """One of the library's exported C diagnostics (cc/tf/exports.lds), looked up once."""
    fn = getattr(ctypes.CDLL(find_library()), name)
    fn.restype, fn.argtypes = restype, list(argtypes)
    return fn


def python_op_name(op_name):
    """The generated raw wrapper for an op: 'BlockLSTMV2' -> 'TfLstm_BlockLSTMV2'.

    TF generates it for every op in a loaded library ('>' becomes '_'); it takes keyword
    arguments only, like tf.raw_ops.
    """
    return OP_NAMESPACE.replace(">", "_") + op_name


class Library:
    """The op module, loaded on first access and then cached."""

    def __init__(self):
        self._module = None
        self._wrappers = {}
        self._lock = threading.Lock()

    @property
    def module(self):
        if self._module is None:
            with self._lock:
                if self._module is None:
                    import tensorflow as tf

                    self._module = load(tf)
        return self._module

    def op(self, op_name):
        """The raw wrapper of an op, which refuses to be traced into an XLA-compiled function with
        an error that names the op and the way out (XLA's own says only that no kernel is
        registered for XLA_CPU_JIT). Marked do_not_convert: AutoGraph cannot read the source of
        TF's generated wrappers and would warn inside every tf.function."""
        wrapper = self._wrappers.get(op_name)
        if wrapper is None:
            import tensorflow as tf

            generated = getattr(self.module, python_op_name(op_name))

            @functools.wraps(generated)
            def outside_xla(*args, **kwargs):
                if in_xla_context():
                    raise tf.errors.UnimplementedError(None, None, no_xla_kernel_message(op_name))
                return generated(*args, **kwargs)

            wrapper = tf.autograph.experimental.do_not_convert(outside_xla)
            self._wrappers[op_name] = wrapper
        return wrapper


def in_xla_context():
    """Whether the code being traced is compiled by XLA (tf.function(jit_compile=True), also
    nested, or model.compile(jit_compile=True)). TF has no public API for this; its own ops ask
    control_flow_util the same way. False eagerly, and where that API is missing."""
    import tensorflow as tf

    if tf.executing_eagerly():
        return False
    try:
        from tensorflow.python.framework import ops
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # pragma: no cover - a TF without the private module
        return False
    return bool(control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph()))


def no_xla_kernel_message(op_name):
    return (
        "%s%s has no XLA kernel, so it cannot run in a function compiled by XLA "
        "(tf.function(jit_compile=True), model.compile(jit_compile=True)). Call it outside the "
        "compiled function, or use the tf_lstm_ops.keras LSTM / GRU / SimpleRNN layers, which "
        "run Keras' XLA-compilable implementation when compiled by XLA."
        % (OP_NAMESPACE, op_name)
    )


library = Library()
