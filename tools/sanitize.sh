#!/usr/bin/env bash
# Builds the library with AddressSanitizer and UndefinedBehaviorSanitizer and runs the bad-input,
# hostile-size, fuzz and CPU kernel tests against it, and the GPU engines' host emulation backend
# (its self-test module built with the same sanitizers) through their tests:
#
#   tools/sanitize.sh                 # build (into bazel-asan-bin/; the normal build stays) + run
#   tools/sanitize.sh -k cudnn        # extra pytest arguments
#   SANITIZE_TESTS="tests/test_validation.py" tools/sanitize.sh   # another set of tests
#
# Needs ./configure.sh to have run (the venv and .tf_configure.bazelrc). A finding stops the run
# (halt_on_error), with the report on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

BAZEL=${BAZEL:-tools/bazel}
# -c dbg: another output directory (bazel-out/k8-dbg), so the optimised library stays where the
# loader finds it. GCC 12 cannot compile TF's absl headers with UBSan's null, nonnull and vptr
# checks ("... is not a constant expression"): those three are left out.
"$BAZEL" build --symlink_prefix=bazel-asan- -c dbg --copt=-O1 \
  --copt=-fsanitize=address,undefined \
  --copt=-fno-sanitize=null,nonnull-attribute,returns-nonnull-attribute,vptr \
  --copt=-fno-omit-frame-pointer --copt=-fno-sanitize-recover=undefined \
  --linkopt=-fsanitize=address,undefined //:tf_lstm_ops/_lstm_ops.so

# The GPU self-test module with the same sanitizers (for its host emulation backend), built
# before the runtime is preloaded: nvcc itself must not run with it.
# (nvcc splits -Xcompiler values at commas: one sanitizer per flag.)
export TF_LSTM_OPS_SELFTEST_HOST_FLAGS="-fsanitize=address -fsanitize=undefined \
  -fno-omit-frame-pointer"
if command -v nvcc >/dev/null || [ -n "${CUDA_HOME:-}" ] || [ -n "${NVCC:-}" ]; then
  .venv/bin/python tools/gpu_selftest/build.py --arch 80
fi

# TensorFlow itself is not instrumented: the ASan runtime must be loaded before it (LD_PRELOAD),
# and libstdc++ with it (Python does not link it, and ASan's __cxa_throw interceptor needs the
# real one at start: without it the first C++ exception, in matplotlib's or TF's import, aborts).
# Leak checking is off (Python and TF keep allocations for the process's life).
export TF_LSTM_OPS_LIBRARY="$PWD/bazel-asan-bin/tf_lstm_ops/_lstm_ops.so"
export LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libstdc++.so)"
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
TESTS=${SANITIZE_TESTS:-"tests/test_validation.py tests/test_cudnn_validation.py \
  tests/test_hostile_sizes.py tests/test_fuzz.py tests/test_tf_compat.py tests/test_cpu_gemm.py \
  tests/test_block_lstm_forward.py tests/test_block_lstm_backward.py tests/test_cudnn_rnn.py \
  tests/test_gpu_block_lstm_engine.py tests/test_gpu_cudnn_rnn_engine.py \
  tests/test_gpu_layer_norm_lstm_engine.py tests/test_gpu_layer_norm_rnn_engine.py"}
# shellcheck disable=SC2086
exec .venv/bin/python -m pytest -q -p no:cacheprovider $TESTS "$@"
