"""Float64 NumPy references of both op families, written from docs/block_lstm.md and
docs/cudnn_rnn.md: the oracle of the test suite and of the GPU self-test (NumPy only)."""
