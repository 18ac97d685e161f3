"""The CPU GEMM blocks (cc/cpu) that every CPU kernel's products run on, checked directly against
NumPy in float64: all four transpose combinations, with and without accumulation, float and
double, plain and long (gemm::Sum::kLong) sums, on shapes at every edge of the register tiles,
the few-rows paths (the dot products of a few rows by a transposed B), the slabs of B, the row
blocks and the size beyond which Eigen takes over; and the products by packed panels that the
recurrent steps run. Every operand ends where an inaccessible page
begins (a read or write past its end kills the worker), the padding between its rows is NaN (a
value read from there and used poisons C), and C's padding must come back untouched. Also the
vectorised float <-> bfloat16 conversions, bit for bit against TensorFlow's casts. One fresh process per
ISA build (the native one, and the AVX-512, AVX2 and AVX builds where the CPU has more)."""

import os
import subprocess
import sys

import pytest

from test_cpu_time_loop_slices import ISA_ORDER, native_isa

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gemm_worker.py")


@pytest.mark.parametrize("isa", [None, "avx512", "avx2", "avx"])
def test_gemm_blocks_match_numpy(isa):
    native = native_isa()
    if isa is not None and (native not in ISA_ORDER
                            or ISA_ORDER.index(isa) >= ISA_ORDER.index(native)):
        pytest.skip("this CPU runs %s: the %s build is already its own (or not x86)" % (native, isa))
    proc = subprocess.run([sys.executable, WORKER] + ([isa] if isa else []),
                          capture_output=True, text=True, timeout=600)
    lines = proc.stdout.splitlines()
    assert lines and lines[0] == "ISA %s" % (isa or native), proc.stdout[:500] + proc.stderr[-3000:]
    failures = [line for line in lines if line.startswith("FAIL")]
    # (-11, SIGSEGV: a read or write past an operand's end reached its guard page)
    assert proc.returncode == 0, "worker exit %d after %r\n%s" % (
        proc.returncode, lines[-1], proc.stderr[-3000:])
    assert not failures, "\n".join(failures[:20])
    assert lines[-1].startswith("DONE "), proc.stdout[-2000:]
    assert int(lines[-1].split()[1]) == 8 + 2 * 8 * (11 * 8 + 2 * 6) + 2 * 4 * 5 * 8 + 2 * 9 * 10 + 2 * 8 + 2
