"""The engines' element-wise passes run a variant compiled for AVX-512 where the CPU has it
(cc/cpu/elementwise.h), without fused multiply-adds, so that it rounds exactly like the AVX code
the AVX2 and AVX CPUs run. Checked here bit for bit: the same forward and gradients (block LSTM in
float, double and half with every flag; the Keras layers' LSTM, GRU and SimpleRNN with Keras'
activations and a mask; the LayerNorm layers) from this CPU's AVX-512 build and from the AVX2
build, whose GEMM tiles
sum every product in the same order (B >= 4), each in a process of its own."""

import os
import subprocess
import sys

import numpy as np
import pytest

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elementwise_isa_worker.py")


def run_worker(path, isa=None):
    proc = subprocess.run([sys.executable, WORKER, str(path)] + ([isa] if isa else []),
                          capture_output=True, text=True, timeout=600)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and lines and lines[-1].startswith("DONE "), (
        proc.stdout[-2000:] + proc.stderr[-3000:])
    return lines[0].split()[1], np.load(path)


def test_avx512_elementwise_passes_round_like_avx(tmp_path):
    native, wide = run_worker(tmp_path / "native.npz")
    if not native.startswith("avx512"):
        pytest.skip("this CPU runs %s: no AVX-512 variant to compare" % native)
    isa, narrow = run_worker(tmp_path / "avx2.npz", "avx2")
    assert isa == "avx2"
    assert sorted(wide.files) == sorted(narrow.files) and len(wide.files) >= 100
    different = [name for name in wide.files
                 if not np.array_equal(wide[name], narrow[name], equal_nan=True)]
    assert not different, different[:20]
