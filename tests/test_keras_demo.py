"""The demo (python -m tf_lstm_ops.demo): --help, and a tiny in-process run on a user text file
(loss falls, text is sampled, the speed comparison with keras.layers runs)."""

import os
import re

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest  # noqa: E402

from tf_lstm_ops import demo  # noqa: E402


def test_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        demo.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--epochs", "--layer", "--text", "--time-budget"):
        assert flag in out


def test_bad_flag_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        demo.main(["--layer", "rnn"])
    assert exit_info.value.code == 2


def test_tiny_run_on_a_text_file(tmp_path, capsys):
    text = "".join("%d little pigs went to market, %d stayed home.\n" % (k % 7, k % 5)
                   for k in range(60))
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    demo.main(["--text", str(path), "--layer", "gru", "--epochs", "4", "--steps-per-epoch", "5",
               "--units", "16", "--embedding", "8", "--seq-len", "16", "--batch-size", "8",
               "--learning-rate", "0.02", "--sample-chars", "20", "--compare-steps", "1",
               "--time-budget", "60"])
    out = capsys.readouterr().out
    assert "tf_lstm_ops.keras.GRU(16)" in out
    before, after = map(float, re.search(r"Held-out loss: ([\d.]+) before training -> ([\d.]+)",
                                         out).groups())
    assert after < before
    same = re.search(r"loss ([\d.]+) \(tf_lstm_ops.keras.GRU\) vs ([\d.]+) \(keras", out)
    assert abs(float(same.group(1)) - float(same.group(2))) < 1e-4
    assert re.search(r"tf_lstm_ops.keras.GRU +[\d.]+ ms/step", out)
    assert re.search(r"keras.layers.GRU +[\d.]+ ms/step", out)
