"""TensorFlow's kernel registry after loading the library: which op has kernels on which device,
for which dtypes, with which arguments in host memory.

The registry lists GPU kernels whether or not a GPU (or a GPU build of TensorFlow) is present, so
the GPU registrations are checked here on any machine; executing them needs a GPU.
"""

import json
import os
import re
import subprocess
import sys

import pytest
import tensorflow as tf
from tensorflow.python.framework import kernels

import tf_lstm_ops
from tf_lstm_ops import _loader

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTYPES = {d.as_datatype_enum: d.name for d in (tf.half, tf.bfloat16, tf.float32, tf.float64)}
INDEX_TYPES = {d.as_datatype_enum: d.name for d in (tf.int32, tf.int64)}

# What the GPU kernels keep in host memory (as TF's own GPU kernels of these ops do); None: the
# op has CPU kernels only.
PARAMS_SCALARS = ("num_layers", "num_units", "input_size")
GPU_HOST_MEMORY = {
    "LSTMBlockCell": (),
    "LSTMBlockCellGrad": (),
    "BlockLSTM": ("seq_len_max",),
    "BlockLSTMGrad": ("seq_len_max",),
    "BlockLSTMV2": ("seq_len_max",),
    "BlockLSTMGradV2": ("seq_len_max",),
    "BlockLSTMFullGrad": ("seq_len_max",),
    "CudnnRNN": (),
    "CudnnRNNV2": ("host_reserved",),
    "CudnnRNNV3": ("sequence_lengths", "host_reserved"),
    "CudnnRNNBackprop": (),
    "CudnnRNNBackpropV2": ("host_reserved",),
    "CudnnRNNBackpropV3": ("sequence_lengths", "host_reserved"),
    "CudnnRNNParamsSize": PARAMS_SCALARS + ("params_size",),
    "CudnnRNNParamsToCanonical": PARAMS_SCALARS,
    "CudnnRNNParamsToCanonicalV2": PARAMS_SCALARS,
    "CudnnRNNCanonicalToParams": PARAMS_SCALARS,
    "CudnnRNNCanonicalToParamsV2": PARAMS_SCALARS,
    "KerasToCudnnParams": (),
    "CudnnParamsToKeras": (),
    "BlockLSTMFullGradGrad": ("seq_len_max",),
    "CudnnRNNDropoutKept": None,  # CPU only: reads a reserve space on the host (§5.3 of cudnn_rnn.md)
    "CudnnRNNV3Keras": ("sequence_lengths", "host_reserved"),
    "CudnnRNNBackpropV3Keras": ("sequence_lengths", "host_reserved"),
    "KerasRNN": ("sequence_lengths", "host_reserved"),
    "KerasRNNBackprop": ("sequence_lengths", "host_reserved"),
    "LayerNormLSTM": ("sequence_lengths",),
    "LayerNormLSTMGrad": ("sequence_lengths",),
    "LayerNormRNN": ("sequence_lengths",),
    "LayerNormRNNGrad": ("sequence_lengths",),
}


@pytest.fixture(scope="module", autouse=True)
def library():
    return tf_lstm_ops.load_library()


@pytest.fixture(scope="module")
def build_info():
    return _loader.build_info()


def kernel_defs(op_name, device):
    return [k for k in kernels.get_registered_kernels_for_op(op_name).kernel
            if k.device_type == device]


def constraint_types(kernel, name):
    for c in kernel.constraint:
        if c.name == name:
            return tuple(c.allowed_values.list.type)
    return None


def signatures(defs):
    """(T, S) of each kernel: S is the CudnnRNNParamsSize output type, None elsewhere."""
    sigs = []
    for k in defs:
        (t,) = constraint_types(k, "T")
        s = constraint_types(k, "S")
        sigs.append((DTYPES.get(t, t), INDEX_TYPES.get(s[0], s[0]) if s else None))
    return sorted(sigs, key=str)


def expected_signatures(op):
    index_types = sorted(INDEX_TYPES.values()) if op == "CudnnRNNParamsSize" else [None]
    return sorted(((t, s) for t in DTYPES.values() for s in index_types), key=str)


def test_the_op_table_is_complete():
    assert set(GPU_HOST_MEMORY) == set(_loader.OP_NAMES)


@pytest.mark.parametrize("op", _loader.OP_NAMES)
def test_cpu_kernels_for_every_dtype_without_host_memory(op):
    defs = kernel_defs(_loader.OP_NAMESPACE + op, "CPU")
    assert signatures(defs) == expected_signatures(op)
    assert all(not k.host_memory_arg for k in defs)


@pytest.mark.parametrize("op", _loader.OP_NAMES)
def test_gpu_kernels_for_every_dtype_with_host_memory_args(op, build_info):
    defs = kernel_defs(_loader.OP_NAMESPACE + op, "GPU")
    if GPU_HOST_MEMORY[op] is None:
        assert defs == [], "%s has GPU kernels: list their host-memory arguments" % op
        return
    if not build_info.get("CUDA_VERSION"):
        assert defs == [], "a CPU-only library registered GPU kernels"
        pytest.skip("the library was built without CUDA (./configure.sh --no-cuda or no nvcc)")
    assert signatures(defs) == expected_signatures(op)
    for k in defs:
        assert sorted(k.host_memory_arg) == sorted(GPU_HOST_MEMORY[op]), (op, k)


@pytest.fixture(scope="module")
def tf_gpu_kernels_unchanged_by_loading():
    """For TF's own CudnnRNN names: whether loading the library (in a fresh process) left their
    GPU kernels as they were (none with tensorflow-cpu; TF's cuDNN kernels with a GPU build)."""
    script = (
        "import json, sys, tensorflow as tf\n"
        "from tensorflow.python.framework import kernels\n"
        "names = %r\n"
        "def gpu(op): return sorted(str(k) for k in kernels.get_registered_kernels_for_op(op).kernel\n"
        "                           if k.device_type == 'GPU')\n"
        "before = {op: gpu(op) for op in names}\n"
        "tf.load_op_library(%r)\n"
        "print(json.dumps({op: gpu(op) == before[op] for op in names}))\n"
        % (list(_loader.CUDNN_OP_NAMES), _loader.find_library())
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("op", _loader.CUDNN_OP_NAMES)
def test_tf_cudnn_names_get_our_cpu_kernels_and_no_gpu_kernels(op, tf_gpu_kernels_unchanged_by_loading):
    # TF's own names: our CPU kernels (TF has none); their GPU kernels stay TF's.
    assert signatures(kernel_defs(op, "CPU")) == expected_signatures(op)
    assert tf_gpu_kernels_unchanged_by_loading[op], "the library registered GPU kernels for " + op


def test_build_info_describes_cuda_consistently(build_info):
    caps = build_info["CUDA_COMPUTE_CAPABILITIES"]
    if build_info["CUDA_VERSION"]:
        assert re.fullmatch(r"\d+\.\d+", build_info["CUDA_VERSION"])
        assert caps and all(re.fullmatch(r"\d+[af]?", c) for c in caps)
    else:
        assert caps == ()


def test_library_in_bazel_bin_matches_the_configuration(build_info):
    # A source checkout: what ./configure.sh decided (TF_NEED_CUDA in .tf_configure.bazelrc) is
    # what the library in bazel-bin was built with (catches a stale CPU-only library on a CUDA
    # machine, where the GPU tests above would otherwise skip).
    rc = os.path.join(REPO_ROOT, ".tf_configure.bazelrc")
    bazel_bin = os.path.join(REPO_ROOT, "bazel-bin", "tf_lstm_ops")
    if not os.path.isfile(rc) or os.path.dirname(os.path.realpath(_loader.find_library())) != \
            os.path.realpath(bazel_bin):
        pytest.skip("not the library of this checkout's bazel-bin")
    with open(rc) as f:
        need = re.findall(r"--action_env=TF_NEED_CUDA=(\d)", f.read())
    if not need:
        pytest.skip(".tf_configure.bazelrc predates the CUDA options; re-run ./configure.sh")
    assert bool(build_info["CUDA_VERSION"]) == (need[-1] == "1"), (
        "bazel-bin holds a library built %s CUDA but .tf_configure.bazelrc says TF_NEED_CUDA=%s: "
        "rebuild with ./configure.sh" % ("with" if build_info["CUDA_VERSION"] else "without", need[-1]))
