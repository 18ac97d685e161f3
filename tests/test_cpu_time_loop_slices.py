"""The CPU time loops split the units of a layer into slices, one per intra-op thread (at least
16 units each), that run on a spinning team; both directions of a bidirectional layer share it;
where the batch gives every thread 8 rows they split the batch rows instead (docs/performance.md
§4).
The rest of the suite uses small H (one slice) and small batches (one chunk of steps), so this
checks the multi-slice, row-split and multi-chunk paths: forward and gradients of BlockLSTM(V2)
and CudnnRNNV3 at H = 20..70 and B up to 130 against the float64 references, with 1 thread (one
slice) and 3 threads (up to three slices per layer, or one per direction and one spare; three row
blocks at B = 24), in a fresh process each (the thread count is fixed when TensorFlow starts);
and the same with the AVX-512 (without bf16 dot product), AVX2 and AVX builds of the GEMM blocks
where the CPU has more. Each process also checks the Keras weight conversions (whose transposes
are built per ISA) exactly.
The engines run a loop too small to share (under 1.5 MFLOP of recurrent products) as one slice;
these shapes are that small, so the workers set TF_LSTM_OPS_SHARE_SMALL_LOOPS=1, the engines'
test-only switch that shares every loop, and the bit-for-bit test also runs without it."""

import os
import subprocess
import sys

import pytest

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "slices_worker.py")


def run_worker(args, share_small_loops=True):
    env = dict(os.environ)
    env.pop("TF_LSTM_OPS_SHARE_SMALL_LOOPS", None)
    if share_small_loops:
        env["TF_LSTM_OPS_SHARE_SMALL_LOOPS"] = "1"
    return subprocess.run([sys.executable, WORKER] + args, capture_output=True, text=True,
                          timeout=600, env=env)


def native_isa():
    import tf_lstm_ops  # noqa: F401  (loads the library)
    from tf_lstm_ops._loader import cpu_isa

    return cpu_isa()


# The CPU GEMM blocks are built per ISA and picked at run time; TF_LSTM_OPS_CPU_ISA caps the
# choice so that the AVX2 and AVX builds (other CPUs' code) run here too.
# (avx512 is AVX-512 without the bf16 dot product of avx512_bf16.)
ISA_ORDER = ["avx", "avx2", "avx512", "avx512_bf16"]


@pytest.mark.parametrize("threads,isa", [(1, None), (3, None), (3, "avx512"), (3, "avx2"),
                                         (2, "avx")])
def test_multi_slice_time_loops_match_the_reference(threads, isa):
    native = native_isa()
    if isa is not None and (native not in ISA_ORDER
                            or ISA_ORDER.index(isa) >= ISA_ORDER.index(native)):
        pytest.skip("this CPU runs %s: the %s build is already its own (or not x86)" % (native, isa))
    proc = run_worker([str(threads)] + ([isa] if isa else []))
    lines = proc.stdout.splitlines()
    assert lines and lines[0] == "ISA %s" % (isa or native), proc.stdout[:500] + proc.stderr[-3000:]
    failures = [line for line in lines if line.startswith("FAIL")]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not failures, "\n".join(failures[:20])
    assert lines and lines[-1].startswith("DONE "), proc.stdout[-2000:]
    assert int(lines[-1].split()[1]) >= 749  # every check ran


def test_row_split_time_loops_match_one_thread_bit_for_bit():
    """At 8 or more batch rows per thread (and weights that fit a core's L2) the time loops split
    by batch rows instead of unit slices (docs/performance.md §4). Each output is still the same
    chain of operations, so 1, 2 and 3 threads give the same bits, and so does running the
    small loops as one slice (2 threads without the switch)."""
    digests = {}
    for threads, share in ((1, True), (2, True), (3, True), (2, False)):
        proc = run_worker([str(threads), "--digest"], share_small_loops=share)
        assert proc.returncode == 0, proc.stderr[-3000:]
        lines = [line for line in proc.stdout.splitlines() if line.startswith("DIGEST ")]
        assert len(lines) == 1, proc.stdout[-2000:]
        digests[(threads, share)] = lines[0].split()[1]
    assert len(set(digests.values())) == 1, digests
