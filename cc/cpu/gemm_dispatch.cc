// Picks the fastest GEMM build this CPU supports, once.
#include "cc/cpu/gemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace tf_lstm_ops {
namespace gemm {

#define TF_LSTM_DECLARE_ISA(ISA)                                                                 \
  namespace ISA {                                                                                \
  template <typename A>                                                                          \
  void Block(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const A* a,            \
             int64_t lda, const A* b, int64_t ldb, bool accumulate, A* c, int64_t ldc,           \
             bool long_sum);                                                                     \
  template <typename A>                                                                          \
  void PackedBlock(int64_t m, int64_t n, int64_t k, const A* a, int64_t lda, const A* packed,    \
                   bool accumulate, A* c, int64_t ldc);                                          \
  void FloatToBf16(const float* src, uint16_t* dst, int64_t n);                                  \
  void Bf16ToFloat(const uint16_t* src, float* dst, int64_t n);                                  \
  double FmaPeakGflops(double seconds);                                                          \
  template <typename A>                                                                          \
  void Transpose(int64_t rows, int64_t cols, const A* src, int64_t ld_src, A* dst,               \
                 int64_t ld_dst);                                                                \
  }
#if defined(__x86_64__)
namespace avx512_bf16 {
bool PackPanelPairsBf16(bool trans_b, int64_t k, const uint16_t* b, int64_t ldb,
                        uint16_t* panel);
void PackedBlockBf16(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                     const uint16_t* packed, bool accumulate, float* c, int64_t ldc);
}
TF_LSTM_DECLARE_ISA(avx512)
TF_LSTM_DECLARE_ISA(avx2)
TF_LSTM_DECLARE_ISA(avx)
#else
TF_LSTM_DECLARE_ISA(generic)
#endif
#undef TF_LSTM_DECLARE_ISA

namespace {

enum class Isa { kAvx512Bf16, kAvx512, kAvx2, kAvx, kGeneric };

Isa Detect() {
#if defined(__x86_64__)
  // TF_LSTM_OPS_CPU_ISA=avx512|avx2|avx caps the choice, so that the tests run every build's
  // code on one machine (it never raises it above what the CPU has).
  const char* cap_env = std::getenv("TF_LSTM_OPS_CPU_ISA");
  const std::string cap = cap_env == nullptr ? "" : cap_env;
  __builtin_cpu_init();
  if (cap != "avx2" && cap != "avx" && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl")) {
    if (cap != "avx512" && __builtin_cpu_supports("avx512bf16")) return Isa::kAvx512Bf16;
    return Isa::kAvx512;
  }
  if (cap != "avx" && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return Isa::kAvx2;
  }
  return Isa::kAvx;
#else
  return Isa::kGeneric;
#endif
}

Isa Selected() {
  static const Isa isa = Detect();
  return isa;
}

}  // namespace

// `return ISA::call;` for the ISA build Selected() picks (the bf16-dot CPU runs the avx512 build).
#if defined(__x86_64__)
#define TF_LSTM_ON_SELECTED_ISA(call)   \
  switch (Selected()) {                 \
    case Isa::kAvx512Bf16:              \
    case Isa::kAvx512:                  \
      return avx512::call;              \
    case Isa::kAvx2:                    \
      return avx2::call;                \
    default:                            \
      return avx::call;                 \
  }
#else
#define TF_LSTM_ON_SELECTED_ISA(call) return generic::call;
#endif

template <typename A>
void Block(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const A* a, int64_t lda,
           const A* b, int64_t ldb, bool accumulate, A* c, int64_t ldc, Sum sum) {
  TF_LSTM_ON_SELECTED_ISA(
      Block(trans_a, trans_b, m, n, k, a, lda, b, ldb, accumulate, c, ldc, sum == Sum::kLong))
}

template <typename A>
void PackedBlock(int64_t m, int64_t n, int64_t k, const A* a, int64_t lda, const A* packed,
                 bool accumulate, A* c, int64_t ldc) {
  TF_LSTM_ON_SELECTED_ISA(PackedBlock(m, n, k, a, lda, packed, accumulate, c, ldc))
}

template <typename A>
void PackPanels(bool trans_b, int64_t k, int64_t n, const A* b, int64_t ldb, A* packed) {
  for (int64_t c0 = 0; c0 < n; c0 += kPanelWidth) {
    A* panel = packed + c0 * k;
    const int64_t cols = std::min<int64_t>(kPanelWidth, n - c0);
    if (!trans_b) {  // panel rows are pieces of B's rows
      for (int64_t p = 0; p < k; ++p) {
        A* row = panel + p * kPanelWidth;
        std::copy_n(b + p * ldb + c0, cols, row);
        std::fill(row + cols, row + kPanelWidth, A(0));
      }
      continue;
    }
    // B's columns are contiguous: the panel is the transpose of B's rows c0 .. c0 + cols, through
    // the ISA builds' register blocks (a scalar transpose of 16 x 16 tiles through L1 made
    // CudnnRNNV3's forward at (50, 32, 128, 256) 10 % slower), its padding columns zero.
    if (cols < kPanelWidth) std::fill(panel, panel + k * kPanelWidth, A(0));
    Transpose(cols, k, b + c0 * ldb, ldb, panel, int64_t{kPanelWidth});
  }
}

#define TF_LSTM_INSTANTIATE_PACKED(A)                                                         \
  template void PackedBlock<A>(int64_t, int64_t, int64_t, const A*, int64_t, const A*, bool, A*, \
                               int64_t);                                                       \
  template void PackPanels<A>(bool, int64_t, int64_t, const A*, int64_t, A*);
TF_LSTM_INSTANTIATE_PACKED(float)
TF_LSTM_INSTANTIATE_PACKED(double)
#undef TF_LSTM_INSTANTIATE_PACKED

template void Block<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t,
                           const float*, int64_t, bool, float*, int64_t, Sum);
template void Block<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t,
                            const double*, int64_t, bool, double*, int64_t, Sum);

bool HasBf16Dot() { return Selected() == Isa::kAvx512Bf16; }

void FloatToBf16(const float* src, uint16_t* dst, int64_t n) {
  TF_LSTM_ON_SELECTED_ISA(FloatToBf16(src, dst, n))
}

void Bf16ToFloat(const uint16_t* src, float* dst, int64_t n) {
  TF_LSTM_ON_SELECTED_ISA(Bf16ToFloat(src, dst, n))
}

double FmaPeakGflops(double seconds) { TF_LSTM_ON_SELECTED_ISA(FmaPeakGflops(seconds)) }

template <typename A>
void Transpose(int64_t rows, int64_t cols, const A* src, int64_t ld_src, A* dst,
               int64_t ld_dst) {
  if constexpr (std::is_same_v<A, uint16_t>) {  // (16-bit values: a plain loop is enough)
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) dst[j * ld_dst + i] = src[i * ld_src + j];
    }
  } else {
    TF_LSTM_ON_SELECTED_ISA(Transpose(rows, cols, src, ld_src, dst, ld_dst))
  }
}
template void Transpose<float>(int64_t, int64_t, const float*, int64_t, float*, int64_t);
template void Transpose<double>(int64_t, int64_t, const double*, int64_t, double*, int64_t);
template void Transpose<uint16_t>(int64_t, int64_t, const uint16_t*, int64_t, uint16_t*, int64_t);
#undef TF_LSTM_ON_SELECTED_ISA

namespace {
// A whole panel's complete pairs with AVX-512 (bf16_isa.cc); false where it cannot (no bf16 dot
// product here, or gather offsets beyond an int32) and the portable loops must.
bool PackedPairsFast(bool trans_b, int64_t k, const uint16_t* b, int64_t ldb, uint16_t* panel) {
#if defined(__x86_64__)
  return HasBf16Dot() && avx512_bf16::PackPanelPairsBf16(trans_b, k, b, ldb, panel);
#else
  return false;
#endif
}

// The same in straight copies, no padding and no per-element branches.
void PackPanelPairsPortable(bool trans_b, int64_t k, const uint16_t* b, int64_t ldb,
                            uint16_t* panel) {
  const int64_t pairs = k / 2;
  if (!trans_b) {
    for (int64_t q = 0; q < pairs; ++q) {
      const uint16_t* even = b + 2 * q * ldb;
      const uint16_t* odd = even + ldb;
      uint16_t* row = panel + q * 2 * kPanelWidth;
      for (int j = 0; j < kPanelWidth; ++j) {
        row[2 * j] = even[j];
        row[2 * j + 1] = odd[j];
      }
    }
    return;
  }
  for (int j = 0; j < kPanelWidth; ++j) {
    const uint16_t* column = b + j * ldb;  // op(B)'s column j, contiguous
    for (int64_t q = 0; q < pairs; ++q) {
      panel[q * 2 * kPanelWidth + 2 * j] = column[2 * q];
      panel[q * 2 * kPanelWidth + 2 * j + 1] = column[2 * q + 1];
    }
  }
}

}  // namespace

void PackPanelsBf16(bool trans_b, int64_t k, int64_t n, const uint16_t* b, int64_t ldb,
                    uint16_t* packed) {
  const int64_t pairs = (k + 1) / 2;
  for (int64_t c0 = 0; c0 < n; c0 += kPanelWidth) {
    uint16_t* panel = packed + c0 * pairs * 2;
    const int64_t cols = std::min<int64_t>(kPanelWidth, n - c0);
    int64_t q0 = 0;  // the pairs before q0 are packed by the whole-panel loops below
    if (cols == kPanelWidth) {
      // A whole panel's complete pairs: with AVX-512 where the CPU has it (packing is per call,
      // and at small batches it costs as much as the products), else portably.
      q0 = k / 2;
      const uint16_t* panel_b = b + c0 * (trans_b ? ldb : 1);
      if (!PackedPairsFast(trans_b, k, panel_b, ldb, panel)) {
        PackPanelPairsPortable(trans_b, k, panel_b, ldb, panel);
      }
    }
    for (int64_t q = q0; q < pairs; ++q) {
      uint16_t* row = panel + q * 2 * kPanelWidth;  // [kPanelWidth][2]
      std::fill(row, row + 2 * kPanelWidth, uint16_t{0});
      for (int64_t half = 0; half < 2 && 2 * q + half < k; ++half) {
        const int64_t p = 2 * q + half;
        for (int64_t j = 0; j < cols; ++j) {
          row[2 * j + half] = trans_b ? b[(c0 + j) * ldb + p] : b[p * ldb + c0 + j];
        }
      }
    }
  }
}

namespace {
float Bf16ToFloat(uint16_t bits) {
  const uint32_t wide = uint32_t{bits} << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}
}  // namespace

void PackedBlockBf16(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                     const uint16_t* packed, bool accumulate, float* c, int64_t ldc) {
#if defined(__x86_64__)
  if (HasBf16Dot()) {
    return avx512_bf16::PackedBlockBf16(m, n, k, a, lda, packed, accumulate, c, ldc);
  }
#endif
  // Portable loops (the kernels only call this with HasBf16Dot(); kept correct regardless).
  const int64_t pairs = (k + 1) / 2;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const uint16_t* col = packed + j / kPanelWidth * pairs * 2 * kPanelWidth +
                            j % kPanelWidth * 2;
      float sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        sum += Bf16ToFloat(a[i * lda + p]) * Bf16ToFloat(col[p / 2 * 2 * kPanelWidth + p % 2]);
      }
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + sum : sum;
    }
  }
}

bool HasRegisterTiles() {
  return Selected() == Isa::kAvx512Bf16 || Selected() == Isa::kAvx512 || Selected() == Isa::kAvx2;
}

bool IsAvx512() { return Selected() == Isa::kAvx512Bf16 || Selected() == Isa::kAvx512; }

const char* IsaName() {
  switch (Selected()) {
    case Isa::kAvx512Bf16:
      return "avx512_bf16";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx:
      return "avx";
    default:
      return "generic";
  }
}

}  // namespace gemm
}  // namespace tf_lstm_ops

// For tests and the benchmark (through ctypes): which build of the blocks runs here.
extern "C" __attribute__((visibility("default"))) const char* tf_lstm_ops_cpu_isa() {
  return tf_lstm_ops::gemm::IsaName();
}

// For the tests (through ctypes): one gemm::Block product in float (element_bytes 4) or double
// (8), summed as gemm::Sum::kLong when long_sum, so that every path of every ISA build (register
// tiles, slab copies, the long sums, Eigen) is checked directly against NumPy on awkward shapes
// and strides. Returns false for another element size.
extern "C" __attribute__((visibility("default"))) bool tf_lstm_ops_gemm_block(
    int element_bytes, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
    const void* a, int64_t lda, const void* b, int64_t ldb, bool accumulate, void* c,
    int64_t ldc, bool long_sum) {
  auto run = [&](auto* typed_c) {
    using A = std::remove_pointer_t<decltype(typed_c)>;
    tf_lstm_ops::gemm::Block<A>(trans_a, trans_b, m, n, k, static_cast<const A*>(a), lda,
                                static_cast<const A*>(b), ldb, accumulate, typed_c, ldc,
                                long_sum ? tf_lstm_ops::gemm::Sum::kLong
                                         : tf_lstm_ops::gemm::Sum::kPlain);
    return true;
  };
  if (element_bytes == 4) return run(static_cast<float*>(c));
  if (element_bytes == 8) return run(static_cast<double*>(c));
  return false;
}

// For the tests (through ctypes): op(B) packed into panels (gemm::PackPanels) and one
// gemm::PackedBlock product by them, the recurrent steps' kernel, in float or double as above.
extern "C" __attribute__((visibility("default"))) bool tf_lstm_ops_gemm_packed_block(
    int element_bytes, bool trans_b, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda,
    const void* b, int64_t ldb, bool accumulate, void* c, int64_t ldc) {
  auto run = [&](auto* typed_c) {
    using A = std::remove_pointer_t<decltype(typed_c)>;
    std::vector<A> packed(static_cast<size_t>(k * tf_lstm_ops::gemm::PaddedCols(n)));
    tf_lstm_ops::gemm::PackPanels<A>(trans_b, k, n, static_cast<const A*>(b), ldb,
                                     packed.data());
    tf_lstm_ops::gemm::PackedBlock<A>(m, n, k, static_cast<const A*>(a), lda, packed.data(),
                                      accumulate, typed_c, ldc);
    return true;
  };
  if (element_bytes == 4) return run(static_cast<float*>(c));
  if (element_bytes == 8) return run(static_cast<double*>(c));
  return false;
}

// For the benchmark (through ctypes): the float FMA rate of one core, in GFLOP/s, with the ISA
// build that runs here, measured for about `seconds` (call it from several threads at once for
// the machine's peak).
extern "C" __attribute__((visibility("default"))) double tf_lstm_ops_fma_peak_gflops(
    double seconds) {
  return tf_lstm_ops::gemm::FmaPeakGflops(seconds);
}

// For the tests (through ctypes): gemm::FloatToBf16 (to_bf16) or gemm::Bf16ToFloat over n values,
// bf16 as its bits.
extern "C" __attribute__((visibility("default"))) void tf_lstm_ops_bf16_convert(
    bool to_bf16, const void* src, void* dst, int64_t n) {
  if (to_bf16) {
    tf_lstm_ops::gemm::FloatToBf16(static_cast<const float*>(src), static_cast<uint16_t*>(dst), n);
  } else {
    tf_lstm_ops::gemm::Bf16ToFloat(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n);
  }
}
