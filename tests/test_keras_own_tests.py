"""Keras' own test files for LSTM, GRU, SimpleRNN and Bidirectional (shipped in the installed
keras package), run with keras.layers.LSTM / GRU / SimpleRNN replaced by tf_lstm_ops.keras's
drop-ins: drop-in means passing the tests Keras writes for its own layers. A conftest makes the
substitution and reports how often each of our layers ran, so the run cannot pass without them."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys

KERAS_TESTS = ("lstm_test.py", "gru_test.py", "simple_rnn_test.py", "bidirectional_test.py")
CONFTEST = '''
import collections, json, os
os.environ["KERAS_BACKEND"] = "tensorflow"
import tf_lstm_ops.keras as tlk
from keras.src import layers

RUNS = collections.Counter()
for cls in (tlk.LSTM, tlk.GRU, tlk.SimpleRNN):
    setattr(layers, cls.__name__, cls)
    original = cls.inner_loop

    def counted(self, *args, _original=original, _name=cls.__name__, **kwargs):
        RUNS[_name] += 1
        return _original(self, *args, **kwargs)

    cls.inner_loop = counted


def pytest_sessionfinish(session, exitstatus):
    with open(os.environ["RUNS_FILE"], "w") as f:
        json.dump(dict(RUNS), f)
'''


def test_keras_rnn_test_files_pass_with_our_layers(tmp_path):
    source = os.path.join(os.path.dirname(importlib.util.find_spec("keras").origin), "src",
                          "layers", "rnn")
    for name in KERAS_TESTS:
        shutil.copy(os.path.join(source, name), tmp_path / name)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    runs_file = tmp_path / "runs.json"
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, RUNS_FILE=str(runs_file), TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path)] + list(KERAS_TESTS),
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    runs = json.loads(runs_file.read_text())
    assert all(runs.get(name, 0) > 10 for name in ("LSTM", "GRU", "SimpleRNN")), runs
