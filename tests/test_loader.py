"""The loader: finding the library, version and ABI checks, and the kernel registry."""

import os
import subprocess
import sys

import pytest
import tensorflow as tf
from tensorflow.python.framework import kernels

import tf_lstm_ops
from tf_lstm_ops import _loader

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_op_is_loaded_with_cpu_kernels_for_every_dtype():
    module = tf_lstm_ops.load_library()
    expected = {d.as_datatype_enum for d in (tf.half, tf.bfloat16, tf.float32, tf.float64)}
    for name in _loader.OP_NAMES:
        assert hasattr(module, _loader.python_op_name(name)), name
        registered = kernels.get_registered_kernels_for_op(_loader.OP_NAMESPACE + name)
        cpu_types = {
            k.constraint[0].allowed_values.list.type[0]
            for k in registered.kernel
            if k.device_type == "CPU"
        }
        assert cpu_types == expected, name


def test_build_info_matches_running_tensorflow():
    info = _loader.read_build_info(_loader.find_library())
    assert info is not None
    assert info.TF_VERSION.split(".")[:2] == tf.__version__.split(".")[:2]
    assert info.TF_CXX11_ABI_FLAG == tf.sysconfig.CXX11_ABI_FLAG


def test_minor_version_mismatch_is_a_clear_import_error(monkeypatch):
    monkeypatch.delenv("TF_LSTM_OPS_SKIP_VERSION_CHECK", raising=False)
    with pytest.raises(ImportError, match=r"built against TensorFlow 2\.20\.1 but TensorFlow 2\.21\.0"):
        _loader.check_version("2.20.1", "2.21.0")
    _loader.check_version("2.21.0", "2.21.3")  # patch releases share the ABI
    monkeypatch.setenv("TF_LSTM_OPS_SKIP_VERSION_CHECK", "1")
    _loader.check_version("2.20.1", "2.21.0")


def test_missing_library_names_where_it_looked_and_how_to_build(monkeypatch, tmp_path):
    missing = str(tmp_path / "nowhere" / "_lstm_ops.so")
    monkeypatch.setenv("TF_LSTM_OPS_LIBRARY", missing)
    with pytest.raises(ImportError, match="configure.sh") as info:
        _loader.find_library()
    assert missing in str(info.value)


def test_undefined_symbol_becomes_import_error_naming_both_versions(monkeypatch):
    def fail(path):
        raise tf.errors.NotFoundError(None, None, path + ": undefined symbol: _ZN10tensorflow3FooEv")

    monkeypatch.setattr(tf, "load_op_library", fail)
    with pytest.raises(ImportError) as info:
        _loader.load(tf)
    message = str(info.value)
    assert "undefined symbol" in message and "./configure.sh" in message
    assert message.count(tf.__version__) >= 2  # built-against and running versions


def test_library_without_the_ops_is_rejected(monkeypatch):
    monkeypatch.setattr(tf, "load_op_library", lambda path: object())
    with pytest.raises(ImportError, match="does not define the ops LSTMBlockCell"):
        _loader.load(tf)


def test_import_without_the_library_is_a_clear_import_error(tmp_path):
    script = (
        "try:\n"
        "    import tf_lstm_ops\n"
        "except ImportError as e:\n"
        "    print('ImportError:', e)\n"
    )
    env = dict(os.environ, TF_LSTM_OPS_LIBRARY=str(tmp_path / "missing.so"), TF_CPP_MIN_LOG_LEVEL="3")
    env["PYTHONPATH"] = REPO_ROOT
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "ImportError: tf_lstm_ops: the op library _lstm_ops.so was not found" in out.stdout
    assert "configure.sh" in out.stdout


def test_import_registers_cpu_kernels_for_tf_core_cudnn_ops():
    """After `import tf_lstm_ops` (done at the top of this file), TF's own op names run on CPU."""
    for name in _loader.CUDNN_OP_NAMES:
        registered = kernels.get_registered_kernels_for_op(name)
        assert any(k.device_type == "CPU" for k in registered.kernel), name


def test_raw_namespace_lists_exactly_the_tf_raw_ops():
    assert sorted(dir(tf_lstm_ops.raw)) == sorted(
        ["LSTMBlockCell", "LSTMBlockCellGrad", "BlockLSTM", "BlockLSTMGrad", "BlockLSTMV2",
         "BlockLSTMGradV2"] + list(_loader.CUDNN_OP_NAMES)
    )  # fmt: skip
    for name in dir(tf_lstm_ops.raw):
        assert hasattr(tf.raw_ops, name), name
    with pytest.raises(AttributeError):
        tf_lstm_ops.raw.BlockLSTMFullGrad  # ours, not a tf.raw_ops name


# --- what a wheel user is told (no checkout, so no ./configure.sh) ---------------------------

def test_checkout_is_told_apart_from_an_installed_wheel(monkeypatch, tmp_path):
    assert _loader.checkout_root() == REPO_ROOT
    assert _loader.checkout_root(_loader.find_library()) == REPO_ROOT
    site = tmp_path / "site-packages"
    (site / "tf_lstm_ops").mkdir(parents=True)
    monkeypatch.setattr(_loader, "_REPO_ROOT", str(site))
    assert _loader.checkout_root(str(site / "tf_lstm_ops" / "_lstm_ops.so")) is None
    repo = tmp_path / "repo"
    (repo / "bazel-bin" / "tf_lstm_ops").mkdir(parents=True)
    (repo / "configure.sh").write_text("")
    in_bazel_bin = repo / "bazel-bin" / "tf_lstm_ops" / "_lstm_ops.so"
    assert _loader.checkout_root(str(in_bazel_bin)) == str(repo)


def test_wheel_user_with_another_tensorflow_minor_is_told_what_to_pip_install(monkeypatch):
    monkeypatch.delenv("TF_LSTM_OPS_SKIP_VERSION_CHECK", raising=False)
    monkeypatch.setattr(_loader, "checkout_root", lambda library_path=None: None)
    monkeypatch.setattr(_loader, "_installed_tensorflow", lambda: "tensorflow-cpu")
    with pytest.raises(ImportError) as info:
        _loader.check_version("2.21.0", "2.20.1", "/site-packages/tf_lstm_ops/_lstm_ops.so")
    message = str(info.value)
    assert 'pip install "tensorflow-cpu==2.21.*"' in message, message
    assert 'pip install "tensorflow[and-cuda]==2.21.*"' in message, message
    assert "configure.sh" not in message
    monkeypatch.setattr(_loader, "_installed_tensorflow", lambda: "tensorflow")
    with pytest.raises(ImportError, match=r'pip install "tensorflow==2\.21\.\*"'):
        _loader.check_version("2.21.0", "2.22.0", "/site-packages/tf_lstm_ops/_lstm_ops.so")


def test_wheel_user_without_tensorflow_is_told_both_pip_commands(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # `import tensorflow` fails
    with pytest.raises(ImportError) as info:
        _loader.require_tensorflow()
    message = str(info.value)
    minor = ".".join(tf.__version__.split(".")[:2])
    for command in ('pip install "tf_lstm_ops[cpu]"', 'pip install "tf_lstm_ops[and-cuda]"',
                    'pip install "tensorflow-cpu==%s.*"' % minor):
        assert command in message, message
    assert "./configure.sh" in message  # run from this checkout
    monkeypatch.setattr(_loader, "checkout_root", lambda library_path=None: None)
    with pytest.raises(ImportError) as info:
        _loader.require_tensorflow()
    assert "configure.sh" not in str(info.value)


def test_wheel_user_without_the_library_is_told_to_reinstall(monkeypatch, tmp_path):
    monkeypatch.setenv("TF_LSTM_OPS_LIBRARY", str(tmp_path / "missing.so"))
    monkeypatch.setattr(_loader, "checkout_root", lambda library_path=None: None)
    with pytest.raises(ImportError, match="reinstall the wheel") as info:
        _loader.find_library()
    assert "configure.sh" not in str(info.value)
