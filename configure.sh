#!/usr/bin/env bash
# One-command set-up for tf_lstm_ops: Python venv, Bazel, TensorFlow flags, build, demo.
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
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
ROOT=$PWD

PYTHON=${PYTHON:-python3}
TF_VERSION=${TF_VERSION:-2.21.0}
TF_PACKAGE=${TF_PACKAGE:-tensorflow-cpu}
NO_VENV=${TF_LSTM_OPS_NO_VENV:-0}
BUILD=1
DEMO=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --python) PYTHON=$2; shift 2 ;;
    --gpu) TF_PACKAGE=tensorflow; shift ;;
    --tf-version) TF_VERSION=$2; shift 2 ;;
    --no-venv) NO_VENV=1; shift ;;
    --skip-build) BUILD=0; DEMO=0; shift ;;
    --skip-demo) DEMO=0; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "configure.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

say() { printf '\033[1m[configure]\033[0m %s\n' "$*"; }

# --- 1. Python environment -------------------------------------------------------------------
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || {
  echo "configure.sh: '$PYTHON' is not Python 3.11+ (set PYTHON=/path/to/python3.11)" >&2; exit 1; }

REQUIREMENTS=("$TF_PACKAGE==$TF_VERSION" "numpy>=1.26,<3" "pytest>=8,<10" "pybind11>=2.12,<4" "matplotlib>=3.8,<4")
if [[ "$NO_VENV" == 1 ]]; then
  VENV_PY=$(command -v "$PYTHON")
else
  VENV_PY=$ROOT/.venv/bin/python
  STAMP=$ROOT/.venv/.tf_lstm_ops-requirements
  if [[ ! -x "$VENV_PY" ]]; then
    say "creating .venv with $("$PYTHON" --version)"
    "$PYTHON" -m venv "$ROOT/.venv"
  fi
  if [[ "$(cat "$STAMP" 2>/dev/null)" != "${REQUIREMENTS[*]}" ]]; then
    say "installing ${REQUIREMENTS[*]} into .venv"
    "$VENV_PY" -m pip install --disable-pip-version-check -q "${REQUIREMENTS[@]}"
    echo "${REQUIREMENTS[*]}" > "$STAMP"
  else
    say ".venv is up to date (${REQUIREMENTS[*]})"
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

# --- 3. TensorFlow flags for Bazel -------------------------------------------------------------
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
say "TensorFlow $TF_FOUND (CXX11 ABI $ABI) at $TF_LIB; Bazel launcher: $BAZEL"

[[ "$BUILD" == 1 ]] || exit 0

# --- 4. Build ---------------------------------------------------------------------------------
say "building //:tf_lstm_ops/_lstm_ops.so"
"$BAZEL" build //:tf_lstm_ops/_lstm_ops.so //:build_info
say "built $(ls -l bazel-bin/tf_lstm_ops/_lstm_ops.so | awk '{print $5}') bytes: bazel-bin/tf_lstm_ops/_lstm_ops.so"

# --- 5. Demo ----------------------------------------------------------------------------------
if [[ "$DEMO" == 1 ]]; then
  say "running the demo (.venv/bin/python -m tf_lstm_ops.demo)"
  TF_CPP_MIN_LOG_LEVEL=2 "$VENV_PY" -m tf_lstm_ops.demo
fi
