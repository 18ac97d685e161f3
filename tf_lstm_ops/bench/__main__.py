"""python -m tf_lstm_ops.bench: the benchmark's command line (tf_lstm_ops.bench.cli.main)."""

import sys

from tf_lstm_ops.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
