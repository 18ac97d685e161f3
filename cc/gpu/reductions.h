// Deterministic reductions on any Backend (common.h): sums across the threads of a block (the row
// statistics of a Backend::Blocks launch) and column sums of a [rows, width] matrix. Both add in
// an order fixed by the sizes alone, so the bits are the same on every run and every device, and
// accumulate in double where the CPU engines do (cc/core/layer_norm.h, cc/cpu/linalg.h's
// ReduceRows): no atomics.
#ifndef TF_LSTM_OPS_CC_GPU_REDUCTIONS_H_
#define TF_LSTM_OPS_CC_GPU_REDUCTIONS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cc/gpu/common.h"

namespace tf_lstm_ops {
namespace gpu {

// Sums across the threads of one block of a Backend::Blocks launch, in double: each thread's
// partial, then groups of kGroup partials in thread order (the first threads, one group each),
// then the groups in order (every thread, alike). A sum takes two block barriers and one of
// `slots` slots of the block's shared memory:
//   part p         Put(shared, slot, thread, v): the thread's partial v
//   part p + 1     Fold(shared, slot, thread)
//   parts >= p + 2 Total(shared, slot): the sum, for any thread, until the slot's next Fold
// Two-level rather than one thread summing them all: a GPU thread reads kGroup values twice per
// sum instead of `threads` once.
struct BlockSums {
  static constexpr int kGroup = 16;
  static constexpr int kMaxThreads = kGroup * kGroup;
  int threads;  // of the launch, at most kMaxThreads
  int slots;

  size_t SharedBytes() const {
    return sizeof(double) * static_cast<size_t>(slots) * (threads + kGroup);
  }
  TF_LSTM_HOST_DEVICE int Groups() const { return (threads + kGroup - 1) / kGroup; }
  // A slot: the threads' partials, then the groups' sums.
  TF_LSTM_HOST_DEVICE double* Slot(void* shared, int slot) const {
    return static_cast<double*>(shared) + slot * (threads + kGroup);
  }
  TF_LSTM_HOST_DEVICE void Put(void* shared, int slot, int thread, double v) const {
    Slot(shared, slot)[thread] = v;
  }
  TF_LSTM_HOST_DEVICE void Fold(void* shared, int slot, int thread) const {
    if (thread >= Groups()) return;
    double* s = Slot(shared, slot);
    const int end = (thread + 1) * kGroup < threads ? (thread + 1) * kGroup : threads;
    double sum = 0;
    for (int k = thread * kGroup; k < end; ++k) sum += s[k];
    s[threads + thread] = sum;
  }
  TF_LSTM_HOST_DEVICE double Total(void* shared, int slot) const {
    const double* groups = Slot(shared, slot) + threads;
    double sum = 0;
    for (int g = 0; g < Groups(); ++g) sum += groups[g];
    return sum;
  }
};

// The threads of a Blocks launch over rows `width` wide: about four elements per thread, whole
// warps, at most BlockSums::kMaxThreads.
inline int RowThreads(int64_t width) {
  const int64_t warps = (width + 4 * 32 - 1) / (4 * 32);
  return static_cast<int>(32 * std::min<int64_t>(std::max<int64_t>(warps, 1),
                                                 BlockSums::kMaxThreads / 32));
}

// Column sums out[j] = Σ_r term(r, j), j < width, in two passes as ReduceRows sums on the CPU:
// rows in chunks of rows_per_chunk added in the compute type in increasing r (one thread per
// (chunk, column)), then the chunks' sums in double in increasing order (one thread per
// column). A function of the sizes only, at most kMaxChunks chunks.
struct ColumnChunking {
  static constexpr int64_t kMinRows = 16, kMaxChunks = 256;
  int64_t rows_per_chunk, chunks;
  explicit ColumnChunking(int64_t rows) {
    rows_per_chunk = std::max(kMinRows, (rows + kMaxChunks - 1) / kMaxChunks);
    chunks = rows <= 0 ? 0 : (rows + rows_per_chunk - 1) / rows_per_chunk;
  }
  // The partial sums' elements for `width` columns.
  int64_t PartialSize(int64_t width) const { return chunks * width; }
};

// Term of the column sums of a [rows, width] matrix a, or of a ⊙ b (b non-null).
template <typename A>
struct ProductTerm {
  const A *a, *b;
  int64_t width;
  TF_LSTM_HOST_DEVICE A operator()(int64_t r, int64_t j) const {
    const int64_t k = r * width + j;
    return b == nullptr ? a[k] : a[k] * b[k];
  }
};

template <typename A, typename Term>
struct ColumnPartialFn {
  Term term;
  int64_t rows, width, rows_per_chunk;
  A* partial;  // [chunks, width]
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t c = i / width, j = i - c * width, r0 = c * rows_per_chunk;
    const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
    A sum = A(0);
    for (int64_t r = r0; r < r1; ++r) sum += term(r, j);
    partial[i] = sum;
  }
};

// The sums rounded to the compute type and then to Out, into up to kMaxOutputs outputs (several
// gradients can be one sum: a bias and a norm's β).
template <typename A, typename Out>
struct ColumnFinishFn {
  static constexpr int kMaxOutputs = 3;
  const A* partial;
  int64_t chunks, width;
  Out* out[kMaxOutputs];
  TF_LSTM_HOST_DEVICE void operator()(int64_t j) const {
    double sum = 0;
    for (int64_t c = 0; c < chunks; ++c) sum += partial[c * width + j];
    const Out value = Cast<Out>(static_cast<A>(sum));
    for (Out* o : out) {
      if (o != nullptr) o[j] = value;
    }
  }
};

// out_k[j] = Σ_r term(r, j) for every non-null out_k; partial: ColumnChunking(rows)
// .PartialSize(width) elements of scratch. Zero where rows == 0.
template <typename A, typename Backend, typename Term, typename Out>
cudaError_t ColumnSums(const Backend& be, int64_t rows, int64_t width, const Term& term,
                       A* partial, Out* out0, Out* out1 = nullptr, Out* out2 = nullptr) {
  const ColumnChunking chunking(rows);
  TF_LSTM_GPU_RETURN_IF_ERROR(be.ForEach(
      chunking.chunks * width,
      ColumnPartialFn<A, Term>{term, rows, width, chunking.rows_per_chunk, partial}));
  return be.ForEach(width,
                    ColumnFinishFn<A, Out>{partial, chunking.chunks, width, {out0, out1, out2}});
}

}  // namespace gpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_GPU_REDUCTIONS_H_
