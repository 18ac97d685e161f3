"""Run in a subprocess by test_cpu_gemm.py: the ISA of the CPU GEMM blocks is picked once per
process (TF_LSTM_OPS_CPU_ISA caps it), so each build is checked in a process of its own.

usage: python gemm_worker.py [ISA]
    prints "ISA <name>", one line per failed check, then "DONE <n checks>".
"""

import ctypes
import mmap
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if len(sys.argv) > 1:
    os.environ["TF_LSTM_OPS_CPU_ISA"] = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402,F401  (the library links against TensorFlow's)

from tf_lstm_ops._loader import cpu_isa, find_library  # noqa: E402

block = ctypes.CDLL(find_library()).tf_lstm_ops_gemm_block
block.restype = ctypes.c_bool
block.argtypes = [ctypes.c_int, ctypes.c_bool, ctypes.c_bool, ctypes.c_int64, ctypes.c_int64,
                  ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                  ctypes.c_int64, ctypes.c_bool, ctypes.c_void_p, ctypes.c_int64, ctypes.c_bool]

packed_block = ctypes.CDLL(find_library()).tf_lstm_ops_gemm_packed_block
packed_block.restype = ctypes.c_bool
packed_block.argtypes = [ctypes.c_int, ctypes.c_bool, ctypes.c_int64, ctypes.c_int64,
                         ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                         ctypes.c_int64, ctypes.c_bool, ctypes.c_void_p, ctypes.c_int64]

TOL = {np.float32: 2e-5, np.float64: 1e-12}
PAD = 3  # extra columns in every leading dimension, filled with NaN: reading them poisons C
SENTINEL = -7.25  # C's padding, which must come back untouched
PAGE = mmap.PAGESIZE
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
checks = 0


class Guarded:
    """A [rows, cols] matrix with leading dimension cols + PAD whose last element ends where an
    inaccessible page begins (its last row has no padding): a read or write past the operand's
    end faults and kills the worker. `view` is the matrix, `ptr` its address."""

    def __init__(self, rows, cols, dtype, fill):
        item = np.dtype(dtype).itemsize
        ld = cols + PAD
        count = rows * ld - PAD
        data_pages = (count * item + PAGE - 1) // PAGE
        self.map = mmap.mmap(-1, (data_pages + 1) * PAGE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.map))
        if libc.mprotect(base + data_pages * PAGE, PAGE, 0) != 0:  # PROT_NONE
            raise OSError(ctypes.get_errno(), "mprotect")
        offset = data_pages * PAGE - count * item
        flat = np.frombuffer(self.map, dtype, count, offset)
        flat[:] = fill
        self.view = np.lib.stride_tricks.as_strided(flat, (rows, cols), (ld * item, item))
        self.ptr, self.ld = base + offset, ld
        self._padding = np.lib.stride_tricks.as_strided(flat[cols:], (rows - 1, PAD),
                                                        (ld * item, item))

    def padding(self):
        """The PAD values after each row but the last."""
        return self._padding


def check(rng, dtype, trans_a, trans_b, m, n, k, accumulate, long_sum=False, packed=False):
    """One product against NumPy's in float64: gemm::Block, or with `packed` gemm::PackedBlock
    on op(B) packed into panels (A as stored, trans_a False)."""
    global checks
    checks += 1
    a = Guarded(k if trans_a else m, m if trans_a else k, dtype, np.nan)
    b = Guarded(n if trans_b else k, k if trans_b else n, dtype, np.nan)
    c = Guarded(m, n, dtype, SENTINEL)
    for operand in (a, b, c):
        operand.view[...] = rng.uniform(-1, 1, operand.view.shape)
    op_a = a.view.T if trans_a else a.view
    op_b = b.view.T if trans_b else b.view
    expect = op_a.astype(np.float64) @ op_b.astype(np.float64)
    if accumulate:
        expect += c.view
    if packed:
        ok = packed_block(np.dtype(dtype).itemsize, trans_b, m, n, k, a.ptr, a.ld, b.ptr, b.ld,
                          accumulate, c.ptr, c.ld)
    else:
        ok = block(np.dtype(dtype).itemsize, trans_a, trans_b, m, n, k, a.ptr, a.ld, b.ptr, b.ld,
                   accumulate, c.ptr, c.ld, long_sum)
    what = "%s%s trans_a=%d trans_b=%d m=%d n=%d k=%d accumulate=%d long_sum=%d" % (
        "packed " if packed else "", np.dtype(dtype).name, trans_a, trans_b, m, n, k, accumulate,
        long_sum)
    if not ok:
        print("FAIL %s: not run" % what, flush=True)
        return
    # Each output sums k products of values in [-1, 1]: scale the tolerance with sqrt(k).
    err = np.max(np.abs(c.view - expect), initial=0.0)
    if not err <= TOL[dtype] * np.sqrt(k + 1):
        print("FAIL %s: max error %.3g" % (what, err), flush=True)
    if not np.all(c.padding() == SENTINEL):
        print("FAIL %s: wrote outside C's m x n block" % what, flush=True)


convert = ctypes.CDLL(find_library()).tf_lstm_ops_bf16_convert
convert.restype = None
convert.argtypes = [ctypes.c_bool, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]


def check_bf16_conversions(rng):
    """float32 -> bfloat16 -> float32 bit for bit as Eigen::bfloat16(float), which the kernels
    used before (round to nearest even; NaN to 0x7FC0 with its sign) and, NaNs aside, as
    TensorFlow's own casts (whose vectorised path drops a NaN's sign): ties both ways, the largest
    finite values (rounding up to inf), denormals, infinities, NaNs of both signs and payloads,
    and random bit patterns; lengths that leave vector remainders."""
    global checks
    special = np.array([0x00000000, 0x80000000, 0x3F808000, 0x3F818000, 0x3F807FFF, 0x3F808001,
                        0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F7FFF, 0x00000001, 0x807FFFFF, 0x00408000,
                        0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x7F800001, 0xFFBFFFFF],
                       np.uint32)
    for n in (1, 7, 15, 16, 17, 18, 33, 1000):  # (n < 18: the first n special values)
        checks += 1
        bits = np.concatenate([special, rng.integers(0, 2**32, n, dtype=np.uint64)
                               .astype(np.uint32)])[:n]
        values = bits.view(np.float32)
        got = np.zeros(len(bits), np.uint16)
        convert(True, values.ctypes.data, got.ctypes.data, len(bits))
        nan = (bits & 0x7FFFFFFF) > 0x7F800000
        rounded = ((bits.astype(np.uint64) + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        expect = np.where(nan, ((bits >> 16) & 0x8000) | 0x7FC0, rounded).astype(np.uint16)
        tf_cast = tf.bitcast(tf.cast(tf.constant(values), tf.bfloat16), tf.uint16).numpy()
        if not np.array_equal(expect[~nan], tf_cast[~nan]):
            print("FAIL the test's own rounding disagrees with tf.cast n=%d" % n, flush=True)
        if not np.array_equal(got, expect):
            bad = np.flatnonzero(got != expect)[:5]
            print("FAIL float->bf16 n=%d: at %s got %s expected %s (inputs %s)" % (
                n, bad, [hex(v) for v in got[bad]], [hex(v) for v in expect[bad]],
                [hex(v) for v in bits[bad]]), flush=True)
        back = np.zeros(len(bits), np.float32)
        convert(False, got.ctypes.data, back.ctypes.data, len(bits))
        expect_back = tf.cast(tf.bitcast(tf.constant(got), tf.bfloat16), tf.float32).numpy()
        if not np.array_equal(back.view(np.uint32), expect_back.view(np.uint32)):
            print("FAIL bf16->float n=%d" % n, flush=True)


def check_long_sum_accuracy(rng, trans_a):
    """gemm::Sum::kLong on float sums over 6400 rows of products of mixed signs, like a weight
    gradient's (the sum is small next to its terms, so the rounding of long partial sums shows):
    at least 2x more accurate than kPlain where the register tiles run (AVX2, AVX-512; about 4x
    measured), never less accurate elsewhere."""
    global checks
    checks += 1
    m, n, k = 13, 300, 6400
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
    b = (0.1 * rng.standard_normal((k, n)) + 0.02).astype(np.float32)
    expect = (a.T if trans_a else a).astype(np.float64) @ b.astype(np.float64)
    errors = []
    for long_sum in (False, True):
        c = np.zeros((m, n), np.float32)
        block(4, trans_a, False, m, n, k, a.ctypes.data, m if trans_a else k, b.ctypes.data, n,
              False, c.ctypes.data, n, long_sum)
        errors.append(np.abs(c - expect).max() / np.abs(expect).max())
    tiles = cpu_isa().startswith(("avx512", "avx2"))
    if errors[1] > errors[0] or (tiles and not errors[1] * 2 <= errors[0]):
        print("FAIL long sum trans_a=%d: relative error %.3g (plain %.3g)" % (
            trans_a, errors[1], errors[0]), flush=True)


def main():
    print("ISA %s" % cpu_isa(), flush=True)
    check_bf16_conversions(np.random.default_rng(3))
    rng = np.random.default_rng(7)
    # Edges of the register tiles (6 rows, 16-lane vectors, 4 of them; 1-3 rows up to 8 vectors:
    # n = 130 is 8 vectors and a part), the few-rows paths (m < 12;
    # m <= 3 with a transposed B: dot products), the 256-deep slabs, the 384-row blocks, and both
    # sums (gemm::Sum), the 2^27 multiply-add limit beyond which Eigen runs (both sides of it below).
    ms, ns, ks = [1, 2, 3, 5, 6, 7, 11, 12, 13, 64, 385], [1, 15, 16, 17, 63, 64, 65, 130], [
        1, 3, 255, 256, 257, 600]
    for dtype in (np.float32, np.float64):
        for trans_a in (False, True):
            for trans_b in (False, True):
                for accumulate in (False, True):
                    for m in ms:
                        for n in ns:
                            check(rng, dtype, trans_a, trans_b, m, n, ks[rng.integers(len(ks))],
                                  accumulate, bool(rng.integers(2)))
                    for k in ks:
                        for long_sum in (False, True):
                            check(rng, dtype, trans_a, trans_b, 13, 65, k, accumulate, long_sum)
        # The dot products (m <= 3 rows by a transposed B): 4-column and single-column tiles, k
        # at every remainder of the 4- to 16-lane vectors.
        for m in (1, 2, 3, 4):
            for n in (1, 3, 4, 5, 9):
                for k in (1, 4, 7, 8, 15, 16, 17, 300):
                    check(rng, dtype, False, True, m, n, k, bool(rng.integers(2)),
                          bool(rng.integers(2)))
        # Products by packed panels (the recurrent steps'): every row count up to two tiles (1-3
        # rows run AVX2's wider few-row tiles: 64 and 24 columns), columns around the 16-wide
        # panels and those tiles' widths.
        for m in (1, 2, 3, 4, 5, 6, 8, 9, 13):
            for n in (1, 15, 16, 17, 24, 25, 63, 64, 65, 130):
                check(rng, dtype, False, bool(rng.integers(2)), m, n, ks[rng.integers(len(ks))],
                      bool(rng.integers(2)), packed=True)
        for trans_a, trans_b in ((False, False), (True, False), (False, True), (True, True)):
            check(rng, dtype, trans_a, trans_b, 400, 560, 599, False)  # just under 2^27: tiles
            check(rng, dtype, trans_a, trans_b, 400, 560, 600, True)  # just over: Eigen
    for trans_a in (False, True):
        check_long_sum_accuracy(rng, trans_a)
    print("DONE %d" % checks, flush=True)


if __name__ == "__main__":
    main()
