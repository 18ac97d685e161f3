#!/usr/bin/env bash
# One-command set-up for tf_lstm_ops: Python venv, Bazel, TensorFlow and CUDA flags, build, demo.
#
#   ./configure.sh                # set up .venv, build //:tf_lstm_ops/_lstm_ops.so, run the demo
#   ./configure.sh --skip-demo    # the same without the demo (what the test command uses)
#
# Non-interactive and idempotent: a second run only re-checks and lets Bazel rebuild incrementally.
# Options (or environment variables):
#   --python PATH     PYTHON        interpreter (3.11+) that creates .venv      [python3]
#   --gpu             TF_PACKAGE    install `tensorflow` instead of `tensorflow-cpu`
#   --tf-version V    TF_VERSION    TensorFlow version to pin                    [2.21.0]
#   --no-venv         TF_LSTM_OPS_NO_VENV=1  use PYTHON as is (it must already have tensorflow)
#   --skip-build      only set up the environment and write .tf_configure.bazelrc
#   --skip-demo       do not run the demo
#   --wheel           after the build, pack the library into dist/tf_lstm_ops-*.whl and check
#                     its tags (tools/build_wheel.py; with --no-cuda: the CPU-only wheel)
# CUDA (the GPU kernels; by default built whenever a CUDA toolkit is found):
#   --cuda            TF_NEED_CUDA=1  require CUDA (fail if no usable toolkit is found)
#   --no-cuda         TF_NEED_CUDA=0  CPU-only library, even where nvcc exists
#   --cuda-home DIR   CUDA_HOME       the toolkit (else CUDA_PATH, else the one of `nvcc` on PATH);
#                                     it needs bin/nvcc, include/cuda_runtime.h, libcudart_static.a
#   --cuda-capabilities LIST  TF_CUDA_COMPUTE_CAPABILITIES  GPU code to build, plus PTX of the
#                                     highest for newer GPUs                         [80,90]
#   --cuda-from-pip   install NVIDIA's CUDA 13.0 compiler wheels (nvidia-cuda-nvcc, -crt, -runtime,
#                     -cccl, nvidia-nvvm) into the venv and build with them. PyPI has no CUDA 12
#                     nvcc (nvidia-cuda-nvcc-cu12 ships only ptxas), so the library then needs an
#                     NVIDIA driver for CUDA 13 (>= 580); with an older driver, use a CUDA 12
#                     toolkit from NVIDIA (--cuda-home) instead.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
ROOT=$PWD

PYTHON=${PYTHON:-python3}
TF_VERSION=${TF_VERSION:-2.21.0}
TF_PACKAGE=${TF_PACKAGE:-tensorflow-cpu}
NO_VENV=${TF_LSTM_OPS_NO_VENV:-0}
NEED_CUDA=${TF_NEED_CUDA:-}        # 1 require, 0 disable, empty: auto-detect
CUDA_DIR=${CUDA_HOME:-${CUDA_PATH:-}}
CUDA_CAPS=${TF_CUDA_COMPUTE_CAPABILITIES:-80,90}
CUDA_FROM_PIP=0
BUILD=1
DEMO=1
WHEEL=0
need_arg() { [[ $# -ge 2 && -n "$2" ]] || { echo "configure.sh: $1 needs a value (see --help)" >&2; exit 2; }; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --python) need_arg "$@"; PYTHON=$2; shift 2 ;;
    --gpu) TF_PACKAGE=tensorflow; shift ;;
    --tf-version) need_arg "$@"; TF_VERSION=$2; shift 2 ;;
    --no-venv) NO_VENV=1; shift ;;
    --skip-build) BUILD=0; DEMO=0; shift ;;
    --skip-demo) DEMO=0; shift ;;
    --wheel) WHEEL=1; shift ;;
    --cuda) NEED_CUDA=1; shift ;;
    --no-cuda) NEED_CUDA=0; shift ;;
    --cuda-home) need_arg "$@"; CUDA_DIR=$2; shift 2 ;;
    --cuda-capabilities) need_arg "$@"; CUDA_CAPS=$2; shift 2 ;;
    --cuda-from-pip) CUDA_FROM_PIP=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "configure.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$NEED_CUDA" in
  ""|0|1) ;;
  *) echo "configure.sh: TF_NEED_CUDA must be 1, 0 or unset, not '$NEED_CUDA'" >&2; exit 2 ;;
esac
[[ "$WHEEL" == 0 || "$BUILD" == 1 ]] || { echo "configure.sh: --wheel needs the build; it contradicts --skip-build" >&2; exit 2; }
if [[ "$CUDA_FROM_PIP" == 1 ]]; then
  [[ "$NEED_CUDA" != 0 ]] || { echo "configure.sh: --cuda-from-pip contradicts --no-cuda / TF_NEED_CUDA=0" >&2; exit 2; }
  NEED_CUDA=1
fi

say() { printf '\033[1m[configure]\033[0m %s\n' "$*"; }
die() { echo "configure.sh: $*" >&2; exit 1; }

# --- 1. Python environment -------------------------------------------------------------------
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || {
  echo "configure.sh: '$PYTHON' is not Python 3.11+ (set PYTHON=/path/to/python3.11)" >&2; exit 1; }

REQUIREMENTS=("$TF_PACKAGE==$TF_VERSION" "numpy>=1.26,<3" "pytest>=8,<10" "pybind11>=2.12,<4" "matplotlib>=3.8,<4")
# Keras 2 (TF_USE_LEGACY_KERAS=1), pinned to TensorFlow's minor version for the suite's tf_keras
# tests. Installed without dependencies: it requires the distribution `tensorflow`, which would
# pull the GPU wheel next to tensorflow-cpu (the module it needs is the same).
TF_KERAS="tf_keras==${TF_VERSION%.*}.0"
if [[ "$NO_VENV" == 1 ]]; then
  VENV_PY=$(command -v "$PYTHON")
else
  VENV_PY=$ROOT/.venv/bin/python
  STAMP=$ROOT/.venv/.tf_lstm_ops-requirements
  if [[ ! -x "$VENV_PY" ]]; then
    say "creating .venv with $("$PYTHON" --version)"
    "$PYTHON" -m venv "$ROOT/.venv"
  fi
  if [[ "$(cat "$STAMP" 2>/dev/null)" != "${REQUIREMENTS[*]} $TF_KERAS" ]]; then
    say "installing ${REQUIREMENTS[*]} $TF_KERAS into .venv"
    "$VENV_PY" -m pip install --disable-pip-version-check -q "${REQUIREMENTS[@]}"
    "$VENV_PY" -m pip install --disable-pip-version-check -q --no-deps "$TF_KERAS"
    echo "${REQUIREMENTS[*]} $TF_KERAS" > "$STAMP"
  else
    say ".venv is up to date (${REQUIREMENTS[*]} $TF_KERAS)"
  fi
fi
if [[ "$NO_VENV" != 1 ]]; then
  # Source-tree install: `import tf_lstm_ops` works in .venv from anywhere (the loader finds
  # the library in bazel-bin).
  "$VENV_PY" -c 'import site, sys; open(site.getsitepackages()[0] + "/tf_lstm_ops_source.pth", "w").write(sys.argv[1] + "\n")' "$ROOT"
fi
"$VENV_PY" -c 'import tensorflow' 2>/dev/null || {
  echo "configure.sh: '$VENV_PY' cannot import tensorflow" >&2; exit 1; }

# --- 2. Bazel ---------------------------------------------------------------------------------
if command -v bazelisk >/dev/null 2>&1; then
  BAZEL=bazelisk
elif command -v bazel >/dev/null 2>&1; then
  BAZEL=bazel
else
  say "no bazel or bazelisk on PATH: installing Debian's bazel-bootstrap (Bazel 4.2.3)"
  SUDO=; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq bazel-bootstrap >/dev/null
  BAZEL=bazel
fi

# --- 3. CUDA ----------------------------------------------------------------------------------
# The same search and checks as third_party/gpus/cuda_configure.bzl, done here to report early and
# to pin the result in .tf_configure.bazelrc.
cuda_problems() {  # why $1 is not a usable toolkit; empty when it is
  local home=$1 problems=()
  [[ -x "$home/bin/nvcc" ]] || problems+=("$home/bin/nvcc does not exist")
  [[ -f "$home/include/cuda_runtime.h" ]] || problems+=("$home/include/cuda_runtime.h does not exist")
  if [[ ${#problems[@]} -eq 0 ]]; then
    local found=0 sub
    for sub in lib64 lib targets/x86_64-linux/lib targets/sbsa-linux/lib; do
      [[ -f "$home/$sub/libcudart_static.a" ]] && found=1
    done
    [[ $found == 1 ]] || problems+=("$home has no lib64/libcudart_static.a (the static CUDA runtime)")
  fi
  if [[ ${#problems[@]} -gt 0 ]]; then
    local joined
    joined=$(printf '%s; ' "${problems[@]}")
    echo "${joined%; }"
  fi
}
nvcc_top() {  # the toolkit of an nvcc that may be a wrapper script: nvcc --dryrun prints TOP=
  { "$1" --dryrun -c tf_lstm_ops_probe.cu -o /dev/null 2>&1 || true; } | sed -n 's/^#\$ TOP=//p' | head -n 1
}

if [[ "$CUDA_FROM_PIP" == 1 ]]; then
  CUDA_WHEELS=("nvidia-cuda-nvcc==13.0.88" "nvidia-cuda-crt==13.0.88" "nvidia-nvvm==13.0.88"
               "nvidia-cuda-runtime==13.0.96" "nvidia-cuda-cccl==13.0.85")
  CUDA_DIR=$("$VENV_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/nvidia/cu13
  CUDA_STAMP=$CUDA_DIR/.tf_lstm_ops-wheels
  if [[ "$(cat "$CUDA_STAMP" 2>/dev/null)" != "${CUDA_WHEELS[*]}" || ! -x "$CUDA_DIR/bin/nvcc" ]]; then
    say "installing the CUDA 13.0 compiler from PyPI: ${CUDA_WHEELS[*]}"
    "$VENV_PY" -m pip install --disable-pip-version-check -q "${CUDA_WHEELS[@]}"
  fi
  # The wheels lay out one toolkit in nvidia/cu13 except for the targets/<arch>/ directory that
  # nvcc.profile adds to the include path (CCCL: cub, thrust, libcu++): link it.
  mkdir -p "$CUDA_DIR/targets/x86_64-linux"
  for sub in include lib; do
    [[ -e "$CUDA_DIR/targets/x86_64-linux/$sub" ]] || ln -s "../../$sub" "$CUDA_DIR/targets/x86_64-linux/$sub"
  done
  echo "${CUDA_WHEELS[*]}" > "$CUDA_STAMP"
fi

CUDA_FOUND=
CUDA_WHY=
if [[ "$NEED_CUDA" == 0 ]]; then
  CUDA_WHY="disabled (--no-cuda / TF_NEED_CUDA=0)"
elif [[ -n "$CUDA_DIR" ]]; then
  # An explicit toolkit that is unusable is an error, never a silent CPU-only build.
  PROBLEMS=$(cuda_problems "$CUDA_DIR")
  [[ -z "$PROBLEMS" ]] || die "CUDA toolkit '$CUDA_DIR' (--cuda-home / CUDA_HOME / CUDA_PATH) is not usable: $PROBLEMS"
  CUDA_FOUND=$(readlink -f "$CUDA_DIR")
elif NVCC=$(command -v nvcc); then
  TOP=$(nvcc_top "$NVCC")
  if [[ -z "$TOP" ]]; then
    CUDA_WHY="'$NVCC --dryrun' did not report its toolkit directory"
  else
    TOP=$(readlink -f "$TOP")
    PROBLEMS=$(cuda_problems "$TOP")
    if [[ -z "$PROBLEMS" ]]; then CUDA_FOUND=$TOP; else CUDA_WHY="the toolkit of $NVCC is not usable: $PROBLEMS"; fi
  fi
else
  CUDA_WHY="no nvcc on PATH and CUDA_HOME is not set"
fi
if [[ -z "$CUDA_FOUND" && "$NEED_CUDA" == 1 ]]; then
  die "CUDA was required (--cuda / TF_NEED_CUDA=1) but $CUDA_WHY; pass --cuda-home DIR, or --no-cuda"
fi
if [[ -n "$CUDA_FOUND" ]]; then
  CUDA_RELEASE=$({ "$CUDA_FOUND/bin/nvcc" --version || true; } | sed -n 's/.*release \([0-9.]*\).*/\1/p')
  [[ -n "$CUDA_RELEASE" ]] || die "'$CUDA_FOUND/bin/nvcc --version' failed"
  SUPPORTED=$({ "$CUDA_FOUND/bin/nvcc" --list-gpu-code 2>/dev/null || true; } | sed -n 's/^sm_//p' | paste -sd ' ')
  CAPS=()
  for cap in ${CUDA_CAPS//,/ }; do
    cap=${cap#sm_}; cap=${cap#compute_}; cap=${cap//./}
    [[ "$cap" =~ ^[0-9]+[af]?$ ]] || die "--cuda-capabilities / TF_CUDA_COMPUTE_CAPABILITIES: '$cap' is not a compute capability (e.g. 80,90)"
    [[ -z "$SUPPORTED" || " $SUPPORTED " == *" ${cap%[af]} "* ]] || die "nvcc $CUDA_RELEASE cannot build for compute capability $cap (it supports: $SUPPORTED)"
    CAPS+=("$cap")
  done
  [[ ${#CAPS[@]} -gt 0 ]] || die "--cuda-capabilities / TF_CUDA_COMPUTE_CAPABILITIES is empty"
  CUDA_CAPS=$(IFS=,; echo "${CAPS[*]}")
  say "CUDA $CUDA_RELEASE at $CUDA_FOUND: building the GPU kernels for compute capabilities $CUDA_CAPS"
else
  say "CUDA: $CUDA_WHY; building the CPU kernels only"
fi

# --- 4. TensorFlow and CUDA flags for Bazel --------------------------------------------------
TF_INFO=$(TF_CPP_MIN_LOG_LEVEL=3 "$VENV_PY" -c '
import tensorflow as tf
print(tf.__version__, int(tf.sysconfig.CXX11_ABI_FLAG), tf.sysconfig.get_lib())' 2>/dev/null | tail -n 1)
read -r TF_FOUND ABI TF_LIB <<<"$TF_INFO"
cat > "$ROOT/.tf_configure.bazelrc" <<RC
# Written by configure.sh; do not edit (re-run ./configure.sh instead).
build --action_env=PYTHON_BIN_PATH=$VENV_PY
build --action_env=TF_VERSION_FOUND=$TF_FOUND
test --test_env=TF_CPP_MIN_LOG_LEVEL=2
RC
if [[ -n "$CUDA_FOUND" ]]; then
  cat >> "$ROOT/.tf_configure.bazelrc" <<RC
build --action_env=TF_NEED_CUDA=1
build --action_env=CUDA_HOME=$CUDA_FOUND
build --action_env=TF_CUDA_COMPUTE_CAPABILITIES=$CUDA_CAPS
RC
else
  echo "build --action_env=TF_NEED_CUDA=0" >> "$ROOT/.tf_configure.bazelrc"
fi
say "TensorFlow $TF_FOUND (CXX11 ABI $ABI) at $TF_LIB; Bazel launcher: $BAZEL"

[[ "$BUILD" == 1 ]] || exit 0

# --- 5. Build ---------------------------------------------------------------------------------
say "building //:tf_lstm_ops/_lstm_ops.so"
"$BAZEL" build //:tf_lstm_ops/_lstm_ops.so //:build_info
say "built $(ls -l bazel-bin/tf_lstm_ops/_lstm_ops.so | awk '{print $5}') bytes: bazel-bin/tf_lstm_ops/_lstm_ops.so ($(if [[ -n "$CUDA_FOUND" ]]; then echo "CPU + GPU kernels, CUDA $CUDA_RELEASE"; else echo "CPU kernels only"; fi))"

if [[ "$WHEEL" == 1 ]]; then
  say "building the wheel (tools/build_wheel.py)"
  "$VENV_PY" "$ROOT/tools/build_wheel.py"
fi

# --- 6. Demo ----------------------------------------------------------------------------------
if [[ "$DEMO" == 1 ]]; then
  say "running the demo (.venv/bin/python -m tf_lstm_ops.demo)"
  TF_CPP_MIN_LOG_LEVEL=2 "$VENV_PY" -m tf_lstm_ops.demo
fi
