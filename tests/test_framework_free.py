"""Both families' CPU engines without TensorFlow: the proof that the core, the CPU runtime and
the engines are framework-free (docs/architecture.md).

tests/framework_free/engine_driver.cc is compiled with the system C++ compiler against the
repository's cc/ and an include folder that holds Eigen's headers and nothing else (linked to
the copy TensorFlow's wheel ships, the version the op library is built with), and linked with
no TensorFlow library. Its forward and backward runs of both families are compared with the
float64 references (tools/references) in float64 and float32.

The library is built once into build/framework_free/<hash of sources, flags, compiler>/.
"""

import ast
import concurrent.futures
import ctypes
import glob
import hashlib
import importlib.util
import os
import platform
import re
import shutil
import subprocess

import numpy as np
import pytest

from tools.references import block_lstm as ref
from tools.references import cudnn_rnn as R

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRIVER = os.path.join(ROOT, "tests", "framework_free", "engine_driver.cc")
OUT_DIR = os.path.join(ROOT, "build", "framework_free")
CXX = os.environ.get("CXX", "g++")
BASE_FLAGS = ["-std=c++17", "-O2", "-fPIC", "-fno-trapping-math", "-DEIGEN_MAX_ALIGN_BYTES=64"]
X86 = platform.machine() in ("x86_64", "AMD64")


def eigen_source():
    """The folder with Eigen/ and unsupported/ in it: the copy inside TensorFlow's wheel."""
    spec = importlib.util.find_spec("tensorflow")
    include = os.path.join(os.path.dirname(spec.origin), "include")
    if not os.path.isdir(os.path.join(include, "Eigen")):
        pytest.fail("no Eigen headers in %s" % include)
    return include


def eigen_only_include(out):
    """An include folder with Eigen's two header trees linked in and nothing else."""
    folder = os.path.join(out, "include")
    os.makedirs(folder, exist_ok=True)
    for name in ("Eigen", "unsupported"):
        link = os.path.join(folder, name)
        if not os.path.islink(link):
            os.symlink(os.path.join(eigen_source(), name), link)
    return folder


def isa_copts():
    """cc/cpu/BUILD's ISA_COPTS table (one source of truth for the GEMM builds' flags)."""
    with open(os.path.join(ROOT, "cc", "cpu", "BUILD")) as f:
        text = f.read()
    table = re.search(r"^ISA_COPTS = (\{.*?^\})", text, re.S | re.M).group(1)
    return ast.literal_eval(table)


def translation_units():
    """(source, extra flags, object name) of every object the engines need."""
    units = [(DRIVER, ["-mavx"] if X86 else [], "engine_driver"),
             (os.path.join(ROOT, "cc", "cpu", "gemm_dispatch.cc"), [], "gemm_dispatch")]
    for family in ("block_lstm", "cudnn_rnn"):
        units.append((os.path.join(ROOT, "cc", family, "cpu_engine.cc"),
                      ["-mavx"] if X86 else [], family + "_cpu_engine"))
    copts = isa_copts()
    isas = ("avx512", "avx2", "avx") if X86 else ("generic",)
    for isa in isas:
        flags = copts[isa] + ["-DTF_LSTM_GEMM_ISA=" + isa, "-DEigen=Eigen_" + isa,
                              "-fvisibility=hidden"]
        for name in ("gemm_isa", "packed_isa"):
            units.append((os.path.join(ROOT, "cc", "cpu", name + ".cc"), flags,
                          "%s_%s" % (name, isa)))
    if X86:
        units.append((os.path.join(ROOT, "cc", "cpu", "bf16_isa.cc"),
                      copts["avx512"] + ["-mavx512bf16", "-fvisibility=hidden"], "bf16_isa"))
    return units


def source_hash(units):
    digest = hashlib.sha256()
    files = sorted(glob.glob(os.path.join(ROOT, "cc", "*", "*.h")) +
                   glob.glob(os.path.join(ROOT, "cc", "*", "*.cc")) + [DRIVER])
    for path in files:
        with open(path, "rb") as f:
            digest.update(path.encode() + f.read())
    digest.update(repr([u[1] for u in units] + BASE_FLAGS).encode())
    digest.update(subprocess.run([CXX, "--version"], capture_output=True).stdout)
    return digest.hexdigest()[:16]


def compile_flags(include):
    # The repository root and Eigen, nothing else: a tensorflow/ or absl/ include cannot resolve.
    return BASE_FLAGS + ["-I" + ROOT, "-isystem", include]


@pytest.fixture(scope="module")
def engines():
    if shutil.which(CXX) is None:
        pytest.fail("no C++ compiler (%s) on PATH" % CXX)
    units = translation_units()
    out = os.path.join(OUT_DIR, source_hash(units))
    library = os.path.join(out, "engines.so")
    include = eigen_only_include(out)
    if not os.path.exists(library):
        def build(unit):
            source, extra, name = unit
            obj = os.path.join(out, name + ".o")
            command = [CXX] + compile_flags(include) + extra + ["-c", source, "-o", obj]
            proc = subprocess.run(command, capture_output=True, text=True)
            assert proc.returncode == 0, "%s failed:\n%s" % (source, proc.stderr[-4000:])
            return obj

        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            objects = list(pool.map(build, units))
        partial = library + ".partial"
        proc = subprocess.run([CXX, "-shared", "-o", partial] + objects + ["-lpthread"],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-4000:]
        os.replace(partial, library)
    return dict(lib=ctypes.CDLL(library), path=library, include=include)


# ------------------------------------------------------------------------------------------------
# framework-free: what the library was built from and against
# ------------------------------------------------------------------------------------------------

def test_links_no_tensorflow_library(engines):
    dynamic = subprocess.run(["readelf", "-d", engines["path"]], capture_output=True, text=True)
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.*?)\]", dynamic.stdout)
    assert needed, dynamic.stdout
    assert not [n for n in needed if "tensorflow" in n or "absl" in n], needed


@pytest.mark.parametrize("header", ["tensorflow/core/framework/tensor.h", "absl/status/status.h",
                                    "xla/stream_executor/stream.h"])
def test_framework_headers_are_out_of_reach(engines, header, tmp_path):
    # The same include path as the engines': were one of them to include a framework header, its
    # build would fail like this probe (so the engines above compiled without any).
    probe = tmp_path / "probe.cc"
    probe.write_text('#include "%s"\n' % header)
    proc = subprocess.run([CXX] + compile_flags(engines["include"]) +
                          ["-fsyntax-only", str(probe)], capture_output=True, text=True)
    assert proc.returncode != 0 and "No such file" in proc.stderr, proc.stderr[-2000:]
    assert sorted(os.listdir(engines["include"])) == ["Eigen", "unsupported"]


# ------------------------------------------------------------------------------------------------
# the LSTM block ops' engine
# ------------------------------------------------------------------------------------------------

DTYPES = {"float64": (np.float64, ctypes.c_double, "f64", 1e-10),
          "float32": (np.float32, ctypes.c_float, "f32", 2e-5)}
INPUTS = ("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b")
GRADS = ref.SEQ_GRAD_NAMES


def pointers(arrays, ctype):
    return (ctypes.POINTER(ctype) * len(arrays))(
        *[a.ctypes.data_as(ctypes.POINTER(ctype)) for a in arrays])


def ptr(a):
    return None if a is None else a.ctypes.data_as(ctypes.c_void_p)


def aligned_bytes(n, alignment=64):
    """n zero bytes starting on an `alignment` boundary (the reserve space's contract)."""
    buf = np.zeros(n + alignment, np.uint8)
    start = -buf.ctypes.data % alignment
    return buf[start:start + n]


def assert_close(got, want, tol, what):
    err = np.max(np.abs(got - want), initial=0.0) / max(1.0, np.max(np.abs(want), initial=0.0))
    assert err <= tol, "%s: relative error %.3g > %.3g" % (what, err, tol)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("layout,peephole,reuse", [("ICFO", False, False), ("ICFO", True, True),
                                                   ("IFCO", True, False), ("IFCO", False, True)])
@pytest.mark.parametrize("T,B,I,H,L", [(5, 3, 4, 6, 5), (6, 2, 3, 5, 4), (1, 1, 1, 1, 1),
                                       (9, 17, 12, 33, 9)])
def test_block_lstm_engine_matches_reference(engines, rng, dtype, layout, peephole, reuse, T, B, I,
                                             H, L):
    np_type, ctype, suffix, tol = DTYPES[dtype]
    lib = engines["lib"]
    forget_bias = 1.0 if layout == "ICFO" else 0.0
    raw = ref.random_inputs(rng, B, I, H, T)
    inputs = {k: np.ascontiguousarray(raw[k], np_type) for k in INPUTS}
    exact = {k: v.astype(np.float64) for k, v in inputs.items()}
    dims = (ctypes.c_int64 * 4)(T, B, I, H)

    outputs = {k: np.full((T, B, H), np.nan, np_type) for k in ref.OUTPUT_NAMES}
    ran = getattr(lib, "block_lstm_forward_" + suffix)(
        dims, int(layout == "IFCO"), ctypes.c_double(forget_bias), ctypes.c_double(3.0),
        int(peephole), ctypes.c_int64(L), pointers([inputs[k] for k in INPUTS], ctype),
        pointers([outputs[k] for k in ref.OUTPUT_NAMES], ctype))
    assert ran == 1
    want = ref.block_lstm(L, *[exact[k] for k in INPUTS], forget_bias=forget_bias, cell_clip=3.0,
                          use_peephole=peephole, layout=layout)
    for k in ref.OUTPUT_NAMES:
        assert_close(outputs[k], want[k], tol, "forward " + k)

    cs_grad = rng.uniform(-1, 1, (T, B, H)).astype(np_type)
    h_grad = rng.uniform(-1, 1, (T, B, H)).astype(np_type)
    # The reference reads the activations as the engine does (reuse overwrites i, f, ci, o).
    act = {k: v.astype(np.float64) for k, v in outputs.items()}
    grads = {k: np.full(exact[k[:-5]].shape, np.nan, np_type) for k in GRADS}
    ran = getattr(lib, "block_lstm_backward_" + suffix)(
        dims, int(layout == "IFCO"), int(peephole), ctypes.c_int64(L),
        pointers([inputs[k] for k in INPUTS], ctype),
        pointers([outputs[k] for k in ref.OUTPUT_NAMES], ctype), ptr(cs_grad), ptr(h_grad),
        pointers([grads[k] for k in GRADS], ctype), int(reuse))
    assert ran == 1
    want = ref.block_lstm_grad(L, *[exact[k] for k in INPUTS],
                               *[act[k] for k in ref.OUTPUT_NAMES], cs_grad.astype(np.float64),
                               h_grad.astype(np.float64), peephole, layout)
    for k in GRADS:
        assert_close(grads[k], want[k], tol * 10, "backward " + k)


def test_block_lstm_engine_refuses_a_short_scratch(engines, rng):
    T, B, I, H = 4, 3, 5, 6
    raw = ref.random_inputs(rng, B, I, H, T)
    inputs = [np.ascontiguousarray(raw[k], np.float32) for k in INPUTS]
    outputs = [np.zeros((T, B, H), np.float32) for _ in ref.OUTPUT_NAMES]
    dims = (ctypes.c_int64 * 4)(T, B, I, H)
    assert engines["lib"].block_lstm_forward_refuses_short_scratch(
        dims, ctypes.c_int64(T), pointers(inputs, ctypes.c_float),
        pointers(outputs, ctypes.c_float)) == 1


# ------------------------------------------------------------------------------------------------
# the CudnnRNN family's engine
# ------------------------------------------------------------------------------------------------

MODE_CODES = {"rnn_relu": 0, "rnn_tanh": 1, "lstm": 2, "gru": 3}
CONFIGS = [
    R.Cfg("lstm", 2, 5, 3, "bidirectional"),
    R.Cfg("lstm", 1, 6, 4, num_proj=3),
    R.Cfg("gru", 2, 4, 3),
    R.Cfg("gru", 1, 7, 5, "bidirectional"),
    R.Cfg("rnn_tanh", 2, 4, 2, "bidirectional"),
    R.Cfg("rnn_relu", 1, 3, 4),
]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "%s_L%d_H%d_I%d_D%d_P%d" % (
    c.rnn_mode, c.L, c.H, c.I, c.D, c.num_proj))
def test_cudnn_rnn_engine_matches_reference(engines, rng, dtype, cfg):
    np_type, ctype, suffix, tol = DTYPES[dtype]
    lib = engines["lib"]
    T, B = 5, 3
    raw = R.random_inputs(rng, cfg, T, B)
    cot = R.random_cotangents(rng, cfg, T, B)

    def cast(a):
        return None if a is None else np.ascontiguousarray(a, np_type)

    x, h0, c0, params = (cast(raw[k]) for k in ("input", "input_h", "input_c", "params"))
    dy, dh, dc = (cast(cot[k]) for k in ("dy", "dh", "dc"))
    model = (ctypes.c_int64 * 6)(MODE_CODES[cfg.rnn_mode], cfg.L, cfg.H, cfg.I, cfg.num_proj,
                                 cfg.D)
    lib.cudnn_rnn_workspace_bytes.restype = ctypes.c_int64
    acc_size = 8 if np_type is np.float64 else 4
    reserve = aligned_bytes(lib.cudnn_rnn_workspace_bytes(model, ctypes.c_int64(T),
                                                          ctypes.c_int64(B), acc_size))
    y = np.full((T, B, cfg.D * cfg.Hr), np.nan, np_type)
    hT = np.full(h0.shape, np.nan, np_type)
    cT = np.full(c0.shape, np.nan, np_type) if cfg.is_lstm else None
    assert getattr(lib, "cudnn_rnn_forward_" + suffix)(
        model, ctypes.c_int64(T), ctypes.c_int64(B), ptr(x), ptr(h0), ptr(c0), ptr(params),
        ptr(y), ptr(hT), ptr(cT), ptr(reserve)) == 1

    def exact(a):
        return None if a is None else a.astype(np.float64)

    want = R.forward(cfg, exact(x), exact(h0), exact(c0), exact(params))
    assert_close(y, want["output"], tol, "output")
    assert_close(hT, want["output_h"], tol, "output_h")
    if cfg.is_lstm:
        assert_close(cT, want["output_c"], tol, "output_c")

    dx = np.full(x.shape, np.nan, np_type)
    dh0 = np.full(h0.shape, np.nan, np_type)
    dc0 = np.full(c0.shape, np.nan, np_type) if cfg.is_lstm else None
    dparams = np.full(params.shape, np.nan, np_type)
    assert getattr(lib, "cudnn_rnn_backward_" + suffix)(
        model, ctypes.c_int64(T), ctypes.c_int64(B), ptr(x), ptr(h0), ptr(c0), ptr(params),
        ptr(dy), ptr(dh), ptr(dc), ptr(reserve), ptr(dx), ptr(dh0), ptr(dc0), ptr(dparams)) == 1
    want = R.backward(cfg, exact(x), exact(h0), exact(c0), exact(params), exact(dy), exact(dh),
                      exact(dc))
    assert_close(dx, want["input_backprop"], tol * 10, "input_backprop")
    assert_close(dh0, want["input_h_backprop"], tol * 10, "input_h_backprop")
    if cfg.is_lstm:
        assert_close(dc0, want["input_c_backprop"], tol * 10, "input_c_backprop")
    assert_close(dparams, want["params_backprop"], tol * 10, "params_backprop")
