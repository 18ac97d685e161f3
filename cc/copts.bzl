"""Compiler flags shared by the CPU code of every layer (engines and the TensorFlow binding)."""

# TensorFlow's own x86 wheels require AVX, so it is a safe floor; it doubles Eigen's GEMM
# throughput over the SSE2 default. -fno-trapping-math lets GCC turn the cell math's selects
# into vector blends (we never rely on floating-point exceptions).
CPU_COPTS = ["-fno-trapping-math"] + select({
    "//cc:x86_64": ["-mavx"],
    "//conditions:default": [],
})
