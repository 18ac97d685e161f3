"""Build definitions shared by the layers of cc/ (docs/architecture.md)."""

load("@local_config_cuda//:build_defs.bzl", "if_cuda")
load("//third_party/gpus:cuda.bzl", "cuda_objects")

# Flags of the CPU code of every layer (engines and the TensorFlow binding). TensorFlow's own x86
# wheels require AVX, so it is a safe floor; it doubles Eigen's GEMM throughput over the SSE2
# default. -fno-trapping-math lets GCC turn the cell math's selects into vector blends (we never
# rely on floating-point exceptions).
CPU_COPTS = ["-fno-trapping-math"] + select({
    "//cc:x86_64": ["-mavx"],
    "//conditions:default": [],
})

def engine_family(family):
    """One op family's engines, in cc/<family>/, framework-free, each with a scratch-size query
    and a run on caller-owned memory:
      :cpu_engine     cpu_engine.{h,cc} on the CPU runtime (Eigen, cc/cpu)
      :gpu_api        gpu_launchers.h, the family's part of the launcher API
      :gpu_engine     gpu_engine.h on the GPU runtime (cc/gpu)
      :gpu_launchers  <family>_launchers.cu.cc compiled by nvcc (only with CUDA)
    """
    native.cc_library(
        name = "cpu_engine",
        srcs = ["cpu_engine.cc"],
        hdrs = ["cpu_engine.h"],
        # No fused multiply-adds in the element-wise passes: their AVX-512 variants
        # (cc/cpu/elementwise.h) round exactly like the AVX code (which has no FMA). GCC 12's
        # AVX-512 intrinsic headers (their "undefined" vectors) trip -Wmaybe-uninitialized in
        # those variants: a false positive that would fill every build log.
        copts = CPU_COPTS + ["-ffp-contract=off", "-Wno-maybe-uninitialized"],
        deps = [
            "//cc/core",
            "//cc/cpu:linalg",
            "//cc/cpu:rnn_inputs",
        ],
    )
    native.cc_library(
        name = "gpu_api",
        hdrs = ["gpu_launchers.h"],
        deps = ["//cc/gpu:launchers"],
    )
    native.cc_library(
        name = "gpu_engine",
        hdrs = ["gpu_engine.h"],
        deps = [
            ":gpu_api",
            "//cc/gpu:runtime",
        ],
    )
    cuda_objects(
        name = "gpu_launcher_objs",
        srcs = if_cuda([family + "_launchers.cu.cc"]),
        deps = [":gpu_engine"],
    )
    native.cc_library(
        name = "gpu_launchers",
        srcs = if_cuda([":gpu_launcher_objs"]),
        alwayslink = 1,
        deps = ["//cc/gpu:gpu_runtime"],
    )
