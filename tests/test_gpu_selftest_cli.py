"""The GPU self-test command (tools/gpu_selftest/gpu_selftest.py) on a machine without a GPU.

  - `--backend host --quick --no-bench` in a subprocess: the engine suites on the host backend,
    exit status 0 and the summary line, and neither TensorFlow nor torch imported on the way
    (skipped only when nvcc is missing: the module cannot be built then);
  - `--help`;
  - the pure-Python pieces: option parsing, FLOP counts, the table, cuBLAS discovery (with
    stand-ins), and the torch -> cuDNN-canonical params conversion (torch_checks.py) against
    tools/references/cudnn_rnn.py's packing with NumPy stand-ins; with torch importable (CPU) also
    torch.nn.LSTM/GRU/RNN and BlockLSTMV2 against the float64 references through it, and the
    command's torch comparisons (--with-torch) in a subprocess.
"""

import importlib.util
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from tools.references import cudnn_rnn as R
from tools.references import block_lstm as block_ref

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SELFTEST = os.path.join(ROOT, "tools", "gpu_selftest")
CLI = os.path.join(SELFTEST, "gpu_selftest.py")


from tools.gpu_selftest import gpu_selftest as cli  # noqa: E402  (pytest.ini: repo on sys.path)
from tools.gpu_selftest import torch_checks as tc  # noqa: E402


def _have_torch():
    return importlib.util.find_spec("torch") is not None


# Runs the command in a fresh interpreter and reports which frameworks it imported.
_RUNNER = r"""
import runpy, sys
sys.argv = [sys.argv[1]] + sys.argv[2:]
code = 0
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as e:
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
imported = sorted({m.split(".")[0] for m in sys.modules} & {"tensorflow", "torch", "keras"})
print("IMPORTED:", ",".join(imported))
sys.exit(code)
"""


def _run_cli(*args, timeout=300):
    env = dict(os.environ)
    env.pop("TF_LSTM_OPS_ALLOW_TF32", None)
    return subprocess.run([sys.executable, "-c", _RUNNER, CLI] + list(args), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------------------------------------------
# the command
# ------------------------------------------------------------------------------------------------

def test_host_quick_passes_without_tensorflow_or_torch(nvcc):  # conftest.py: skips without nvcc
    proc = _run_cli("--backend", "host", "--quick", "--no-bench")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    lines = out.splitlines()
    assert any(l.startswith("SUMMARY: PASS (8 of 8 groups passed, backend host)") for l in lines), out
    assert lines[-1] == "IMPORTED: ", out  # neither tensorflow nor torch
    for group in ("LSTM block-op engine vs float64 reference",
                  "LSTM block-op engine: repeat runs bitwise equal",
                  "CudnnRNN engine vs float64 reference",
                  "CudnnRNN engine: repeat runs bitwise equal",
                  "LayerNorm LSTM engine vs float64 reference",
                  "LayerNorm LSTM engine: repeat runs bitwise equal",
                  "LayerNorm GRU/RNN engine vs float64 reference",
                  "LayerNorm GRU/RNN engine: repeat runs bitwise equal"):
        assert "PASS  " + group + ":" in out, out
    assert "FAIL" not in out, out


def test_help():
    proc = subprocess.run([sys.executable, CLI, "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for option in ("--backend", "--quick", "--arch", "--no-bench", "--json", "--precisions",
                   "--bench-sizes", "--repeat", "TF_LSTM_OPS_ALLOW_TF32", "TF_LSTM_OPS_CUBLAS",
                   "SUMMARY"):
        assert option in proc.stdout, option
    assert "--bench-worker" not in proc.stdout  # internal


@pytest.mark.skipif(not _have_torch(), reason="torch is not importable")
def test_host_with_torch_cpu_compares_with_torch(nvcc):  # conftest.py: skips without nvcc
    """The torch comparisons of the command, on the CPU (torch tensors as the engines' buffers)."""
    proc = _run_cli("--backend", "host", "--with-torch", "--quick", "--no-bench",
                    "--dtypes", "float64,float32,bfloat16")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "SUMMARY: PASS (10 of 10 groups passed, backend host)" in out, out
    assert "IMPORTED: torch" in out


# ------------------------------------------------------------------------------------------------
# pure-Python pieces
# ------------------------------------------------------------------------------------------------

def test_options():
    a = cli.parse_args([])
    assert a.backend == "cuda" and a.bench and a.dtypes == list(cli.DTYPES)
    assert a.precisions == ["fp32", "tf32", "fp16", "bf16"]
    a = cli.parse_args(["--backend", "host", "--quick"])
    assert not a.bench and a.quick
    a = cli.parse_args(["--no-bench", "--dtypes", "half,float32", "--precisions", "tf32",
                        "--bench-sizes", "5,4,3,2; 1,1,1,1"])
    assert not a.bench and a.dtypes == ["half", "float32"] and a.precisions == ["tf32"]
    assert a.bench_sizes == [(5, 4, 3, 2), (1, 1, 1, 1)]
    assert cli.parse_args(["--bench-only"]).bench
    for bad in (["--dtypes", "int8"], ["--precisions", "fp8"], ["--bench-sizes", "1,2,3"],
                ["--backend", "host", "--bench"]):
        with pytest.raises(SystemExit):
            cli.parse_args(bad)


def test_versions_and_flops():
    assert cli._version(12040) == "12.4" and cli._version(13000) == "13.0"
    assert cli._version(0) == "none"
    assert cli._cudnn_version(91002) == "9.10.2" and cli._cudnn_version(8902) == "8.9.2"
    assert tc.forward_flops("lstm", 50, 32, 128, 256) == 8 * 32 * 256 * (128 + 256) * 50
    assert tc.forward_flops("gru", 2, 3, 4, 5) == 6 * 3 * 5 * 9 * 2
    row = dict(precision="fp32", engine="CudnnRNNV3 LSTM", mode="lstm", T=50, B=32, I=128, H=256,
               ours_fwd_ms=1.0, ours_fb_ms=3.0, torch_fwd_ms=2.0, torch_fb_ms=4.5,
               ours_fb_gflops=100.0, torch_fb_gflops=66.7, ratio_fwd=2.0, ratio_fb=1.5,
               max_rel_diff=1e-6, diff_ok=True)
    line = tc.format_bench_row(row)
    assert "CudnnRNNV3 LSTM" in line and "1.50" in line and "too large" not in line
    assert "too large" in tc.format_bench_row(dict(row, diff_ok=False))
    assert len(tc.BENCH_HEADER.split("|")) == len(line.split("|"))


def test_cublas_discovery_with_stand_ins(tmp_path, monkeypatch):
    lib = tmp_path / "site" / "nvidia" / "cublas" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcublas.so.12").write_bytes(b"")
    (tmp_path / "site" / "torch").mkdir()
    fake_torch = types.SimpleNamespace(
        __file__=str(tmp_path / "site" / "torch" / "__init__.py"),
        randn=lambda *shape, device=None: np.ones(shape))
    assert cli.torch_cublas_files(fake_torch)[-1] == str(lib / "libcublas.so.12")
    assert cli.loaded_libraries("libc.so") or cli.loaded_libraries("libc-")  # /proc/self/maps
    assert cli.cublas_loaded_name() in (None,) + cli.CUBLAS_NAMES

    monkeypatch.delenv("TF_LSTM_OPS_CUBLAS", raising=False)
    monkeypatch.setattr(cli, "cublas_loaded_name", lambda: None)
    monkeypatch.setattr(cli, "loaded_libraries", lambda prefix: [])
    lines = []
    ok = types.SimpleNamespace(initialize=lambda: None)
    assert cli.prepare_cublas(fake_torch, "cuda", ok, log=lines.append) is None
    assert os.environ["TF_LSTM_OPS_CUBLAS"] == str(lib / "libcublas.so.12")
    assert any("TF_LSTM_OPS_CUBLAS=" in l for l in lines), lines

    def fail():
        raise RuntimeError("Initialize failed: cudaErrorSharedObjectInitFailed: tf_lstm_ops: "
                           "cuBLAS could not be loaded")

    monkeypatch.setenv(cli.RETRY_ENV, "1")  # no re-exec of the test process
    error = cli.prepare_cublas(fake_torch, "cuda", types.SimpleNamespace(initialize=fail),
                               log=lines.append)
    assert "cuBLAS could not be loaded" in error and "hint" in error


# ---- weights: torch names -> cuDNN-canonical params ----

TORCH_CFGS = [R.Cfg("lstm", 2, 5, 3, "bidirectional"), R.Cfg("lstm", 2, 5, 3, "bidirectional",
                                                              num_proj=2),
              R.Cfg("gru", 2, 4, 6, "unidirectional"), R.Cfg("rnn_tanh", 1, 3, 2, "bidirectional"),
              R.Cfg("rnn_relu", 3, 2, 2, "unidirectional")]


def _torch_like_weights(rng, cfg):
    """Random weights with torch's names and shapes (what torch.nn.<RNN>.state_dict() holds)."""
    out = {}
    for l in range(cfg.L):
        for d in range(cfg.D):
            s = "_l%d%s" % (l, "_reverse" if d else "")
            out["weight_ih" + s] = rng.normal(size=(cfg.G * cfg.H, cfg.layer_input(l)))
            out["weight_hh" + s] = rng.normal(size=(cfg.G * cfg.H, cfg.Hr))
            out["bias_ih" + s] = rng.normal(size=cfg.G * cfg.H)
            out["bias_hh" + s] = rng.normal(size=cfg.G * cfg.H)
            if cfg.proj:
                out["weight_hr" + s] = rng.normal(size=(cfg.num_proj, cfg.H))
    return out


@pytest.mark.parametrize("cfg", TORCH_CFGS, ids=lambda c: "%s%s_L%d_D%d" % (
    c.rnn_mode, "P" if c.proj else "", c.L, c.D))
def test_torch_to_params_is_the_canonical_packing(cfg):
    rng = np.random.default_rng(0)
    w = _torch_like_weights(rng, cfg)
    params = tc.torch_to_params(cfg, w)
    assert params.shape == (R.cfg_params_size(cfg),)
    # by hand: gate blocks of weight_ih / weight_hh are W_g / R_g (torch's gate order is
    # cuDNN's), bias_ih / bias_hh are b_W / b_R, weight_hr the projection
    G, H = cfg.G, cfg.H
    mats, biases = [], []
    for l in range(cfg.L):
        for d in range(cfg.D):
            s = "_l%d%s" % (l, "_reverse" if d else "")
            mats += [w["weight_ih" + s][g * H:(g + 1) * H] for g in range(G)]
            mats += [w["weight_hh" + s][g * H:(g + 1) * H] for g in range(G)]
            mats += [w["weight_hr" + s]] if cfg.proj else []
            biases += [w["bias_ih" + s][g * H:(g + 1) * H] for g in range(G)]
            biases += [w["bias_hh" + s][g * H:(g + 1) * H] for g in range(G)]
    np.testing.assert_array_equal(params, R.canonical_to_params(cfg, mats, biases))
    # unpack sees torch's blocks
    lay = R.unpack(cfg, params)[cfg.D * cfg.L - 1]
    s = "_l%d%s" % (cfg.L - 1, "_reverse" if cfg.D == 2 else "")
    np.testing.assert_array_equal(lay["W"].reshape(G * H, -1), w["weight_ih" + s])
    np.testing.assert_array_equal(lay["bR"].reshape(-1), w["bias_hh" + s])
    # the inverse, and the flat torch-tensor form (NumPy stands in for torch.cat)
    back = tc.params_to_torch(cfg, params)
    assert sorted(back) == sorted(w) == sorted(tc.torch_param_names(cfg))
    for k in w:
        np.testing.assert_array_equal(back[k], w[k])
    fake_torch = types.SimpleNamespace(cat=np.concatenate)
    np.testing.assert_array_equal(tc.torch_params_flat(fake_torch, cfg, w), params)


def test_torch_to_params_rejects_bad_shapes_and_skip_input():
    cfg = TORCH_CFGS[0]
    w = _torch_like_weights(np.random.default_rng(1), cfg)
    w["weight_hh_l1_reverse"] = w["weight_hh_l1_reverse"][:, :-1]
    with pytest.raises(AssertionError):
        tc.torch_to_params(cfg, w)
    with pytest.raises(ValueError, match="skip"):
        tc.torch_to_params(R.Cfg("gru", 1, 3, 3, input_mode="skip_input"), {})


def test_block_lstm_mapping():
    rng = np.random.default_rng(2)
    I, H = 3, 4
    w_ih, w_hh = rng.normal(size=(4 * H, I)), rng.normal(size=(4 * H, H))
    b_ih, b_hh = rng.normal(size=4 * H), rng.normal(size=4 * H)
    w, b = tc.torch_lstm_to_block(w_ih, w_hh, b_ih, b_hh)
    assert w.shape == (I + H, 4 * H)
    np.testing.assert_array_equal(w[:I], w_ih.T)
    np.testing.assert_array_equal(w[I:], w_hh.T)
    np.testing.assert_array_equal(b, b_ih + b_hh)
    g = tc.block_grads_to_torch(w, b, I)
    np.testing.assert_array_equal(g["weight_ih_l0"], w_ih)
    np.testing.assert_array_equal(g["bias_hh_l0"], b)


def test_relative_error_and_judge():
    assert tc.relative_error([1.0, 2.0], [1.0, 2.5]) == pytest.approx(0.2)
    assert tc.relative_error([np.nan], [1.0]) == float("inf")
    assert tc.relative_error(np.zeros((2, 0)), np.zeros((2, 0))) == 0.0
    assert tc.relative_error(np.zeros(2), np.zeros(3)) == float("inf")
    exact = dict(output=np.ones(3))
    problems = []
    tc.judge(dict(output=np.ones(3) + 3e-2), dict(output=np.ones(3) + 1e-2), exact, "half",
             ["output"], problems)
    assert problems == []  # within 4x torch's own error
    tc.judge(dict(output=np.ones(3) + 5e-2), dict(output=np.ones(3) + 1e-3), exact, "half",
             ["output"], problems)
    assert len(problems) == 1 and "output" in problems[0]


# ---- with torch on the CPU: torch.nn through the conversion equals the float64 references ----

def _torch():
    return pytest.importorskip("torch")


SMALL = dict(time=5, batch=3, input_size=4, num_units=5)


@pytest.mark.parametrize("case", [
    tc.TorchCase("lstm", 2, True, 0, False, (5, 1, 3), **SMALL),
    tc.TorchCase("lstm", 2, True, 3, True, None, **SMALL),
    tc.TorchCase("lstm", 1, False, 2, False, (2, 5, 4), **SMALL),
    tc.TorchCase("gru", 2, True, 0, True, (4, 5, 1), **SMALL),
    tc.TorchCase("rnn_tanh", 2, False, 0, False, None, **SMALL),
    tc.TorchCase("rnn_relu", 1, True, 0, True, (1, 5, 2), **SMALL),
], ids=lambda c: c.name)
def test_torch_cpu_matches_cudnn_reference(case):
    """torch.nn (float64, CPU) with our params converted to its weights equals
    tools/references/cudnn_rnn.py's forward and backward, gradients converted back."""
    torch = _torch()
    cfg = case.cfg
    rng = np.random.default_rng(3)
    inp, cot = tc.make_torch_inputs(rng, case)
    tin = dict(input=inp["input"], input_h=inp["input_h"], input_c=inp["input_c"])
    res = tc.run_torch(torch, "cpu", cfg, case.batch_first, case.lengths, "float64", tin, cot,
                       tc.params_to_torch(cfg, inp["params"]))
    # the reference's batch-major states are [B, L*D, n] labels on [L*D, B, n] memory (TF's
    # quirk); torch's are [L*D, B, n] in both layouts: the same memory
    tm = not case.batch_first
    lens = None if case.lengths is None else list(case.lengths)
    c0 = inp["input_c"] if cfg.is_lstm else np.zeros(())
    fwd = R.forward(cfg, inp["input"], inp["input_h"], c0, inp["params"], seq_lengths=lens,
                    time_major=tm)
    bwd = R.backward(cfg, inp["input"], inp["input_h"], c0, inp["params"], cot["dy"], cot["dh"],
                     cot["dc"], seq_lengths=lens, time_major=tm)
    LD, B = cfg.L * cfg.D, case.batch
    close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)  # noqa: E731
    close(res["output"], fwd["output"])
    close(res["output_h"], np.reshape(fwd["output_h"], (LD, B, cfg.Hr)))
    close(res["input_backprop"], bwd["input_backprop"])
    close(res["input_h_backprop"], np.reshape(bwd["input_h_backprop"], (LD, B, cfg.Hr)))
    if cfg.is_lstm:
        close(res["output_c"], np.reshape(fwd["output_c"], (LD, B, cfg.H)))
        close(res["input_c_backprop"], np.reshape(bwd["input_c_backprop"], (LD, B, cfg.H)))
    close(tc.torch_to_params(cfg, res["weight_grads"]), bwd["params_backprop"])


def test_torch_cpu_lstm_is_block_lstm_v2():
    torch = _torch()
    T, B, I, H = 4, 3, 2, 5
    rng = np.random.default_rng(4)
    w_ih, w_hh = rng.uniform(-1, 1, (4 * H, I)), rng.uniform(-1, 1, (4 * H, H))
    b_ih, b_hh = rng.uniform(-1, 1, 4 * H), rng.uniform(-1, 1, 4 * H)
    x, h0, c0 = rng.uniform(-1, 1, (T, B, I)), rng.uniform(-1, 1, (1, B, H)), rng.uniform(
        -1, 1, (1, B, H))
    lstm = torch.nn.LSTM(I, H).double()
    with torch.no_grad():
        for name, v in dict(weight_ih_l0=w_ih, weight_hh_l0=w_hh, bias_ih_l0=b_ih,
                            bias_hh_l0=b_hh).items():
            getattr(lstm, name).copy_(torch.from_numpy(v))
    y, (hn, cn) = lstm(torch.from_numpy(x), (torch.from_numpy(h0), torch.from_numpy(c0)))
    w, b = tc.torch_lstm_to_block(w_ih, w_hh, b_ih, b_hh)
    zeros = np.zeros(H)
    out = block_ref.block_lstm(T, x, c0[0], h0[0], w, zeros, zeros, zeros, b, forget_bias=0.0,
                               cell_clip=0.0, use_peephole=False, layout="IFCO")
    np.testing.assert_allclose(out["h"], y.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out["cs"][-1], cn[0].detach().numpy(), rtol=1e-12, atol=1e-12)
