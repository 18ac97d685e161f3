"""The CPU time loops split the units of a layer into slices, one per intra-op thread (at least
16 units each), that run on a spinning team; both directions of a bidirectional layer share it.
The rest of the suite uses small H (one slice) and small batches (one chunk of steps), so this
checks the multi-slice and multi-chunk paths: forward and gradients of BlockLSTM(V2) and
CudnnRNNV3 at H = 20..70 and B up to 130 against the float64 references,
with 1 thread (one slice) and 3 threads (up to three slices per layer, or one per direction and
one spare), in a fresh process each (the thread count is fixed when TensorFlow starts)."""

import os
import subprocess
import sys

import pytest

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "slices_worker.py")


@pytest.mark.parametrize("threads", [1, 3])
def test_multi_slice_time_loops_match_the_reference(threads):
    proc = subprocess.run([sys.executable, WORKER, str(threads)], capture_output=True, text=True,
                          timeout=600)
    lines = proc.stdout.splitlines()
    failures = [line for line in lines if line.startswith("FAIL")]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not failures, "\n".join(failures[:20])
    assert lines and lines[-1].startswith("DONE "), proc.stdout[-2000:]
    assert int(lines[-1].split()[1]) >= 320  # every check ran
