"""Repository tools: the GPU self-test (gpu_selftest) and the float64 references (references)."""
