"""The GPU self-test: the CUDA engines without TensorFlow or Bazel (see gpu_selftest.py)."""
