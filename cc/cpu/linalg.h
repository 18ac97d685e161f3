// CPU building blocks shared by the LSTM and CudnnRNN engines: the caller's intra-op thread pool
// (Eigen's ThreadPoolDevice), dtype conversion, row-major GEMM over the pool's threads (the
// ISA-dispatched blocks of cc/cpu/gemm.h), the time loops' packed weights and spinning team, and
// a deterministic column reduction. half/bfloat16 compute in float ("Acc"), double in double.
// Eigen and the standard library only: no framework.
#ifndef TF_LSTM_OPS_CC_CPU_LINALG_H_
#define TF_LSTM_OPS_CC_CPU_LINALG_H_

#include <algorithm>
#include <atomic>
#include <functional>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "cc/cpu/device.h"
#include "cc/cpu/gemm.h"
#include "cc/cpu/scratch.h"

namespace tf_lstm_ops {
namespace cpu {

// Runs fn(phase, unit) for every unit in [0, units) of every phase in [0, phases), in phase
// order: all units of phase p finish before any unit of phase p + 1 starts, and what a unit
// wrote is visible to the units of later phases. For the time loops of the RNN kernels, where a
// step is tens of microseconds: a fork/join through the pool per step (threads that sleep and
// are woken) costs about as much as the step, so the team's threads spin between phases instead.
// A thread prefers unit (its index mod units), so a unit's slice of the weights tends to stay in
// one core's cache. Deadlock-free and safe under a busy pool: the calling thread can do every
// unit alone; a pool thread that starts late helps with what is left or finds nothing and exits
// without touching `fn` (the shared state outlives this call).
template <typename Fn>
void RunPhases(const CPUDevice& d, int64_t phases, int units, Fn fn) {
  if (phases <= 0 || units <= 0) return;
  struct State {
    explicit State(int units) : claimed(units) {
      for (auto& c : claimed) c.store(-1, std::memory_order_relaxed);
    }
    std::atomic<int64_t> completed{0};          // units finished, over all phases
    std::vector<std::atomic<int64_t>> claimed;  // per unit: the last phase it was claimed for
    const std::function<void(int64_t, int)>* fn = nullptr;
  };
  const std::function<void(int64_t, int)> call = [&fn](int64_t p, int u) { fn(p, u); };
  auto state = std::make_shared<State>(units);
  state->fn = &call;
  const int64_t total = phases * units;
  auto work = [state, units, total](int preferred) {
    int spins = 0;
    for (;;) {
      const int64_t done = state->completed.load(std::memory_order_acquire);
      if (done >= total) return;
      const int64_t phase = done / units;  // every unit of the earlier phases has finished
      bool worked = false;
      for (int k = 0; k < units; ++k) {
        const int u = (preferred + k) % units;
        int64_t expected = phase - 1;
        if (state->claimed[u].load(std::memory_order_relaxed) == expected &&
            state->claimed[u].compare_exchange_strong(expected, phase,
                                                      std::memory_order_acq_rel)) {
          (*state->fn)(phase, u);  // a successful claim means the call has not returned
          state->completed.fetch_add(1, std::memory_order_acq_rel);
          worked = true;
        }
      }
      if (worked) {
        spins = 0;
      } else if (++spins < 4000) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
      } else {
        std::this_thread::yield();  // the thread we wait for may have lost its core
      }
    }
  };
  const int helpers = std::min(units, std::max(1, d.numThreads())) - 1;
  for (int k = 1; k <= helpers; ++k) d.enqueue([work, k] { work(k); });
  work(0);
}

// Runs fn(begin, end) over [0, n) on the op's intra-op pool, in as many shards as Eigen's cost
// model finds worth a thread (`bytes` moved and `cycles` spent per index). The shards are
// claimed through RunPhases, not handed out: a pool thread that is slow to wake (an idle vCPU
// can take milliseconds) never holds up the caller, which then runs its shards itself.
template <typename Fn>
void ParallelFor(const CPUDevice& d, int64_t n, double bytes, double cycles, Fn fn) {
  if (n <= 0) return;
  const int threads = Eigen::TensorCostModel<CPUDevice>::numThreads(
      static_cast<double>(n), Eigen::TensorOpCost(bytes, bytes, cycles), d.numThreads());
  const int shards = static_cast<int>(std::min<int64_t>(n, std::max(1, threads)));
  if (shards == 1) return fn(int64_t{0}, n);
  RunPhases(d, 1, shards, [&](int64_t, int s) { fn(n * s / shards, n * (s + 1) / shards); });
}

// dst[k] = To(src[k]) for k < n.
template <typename From, typename To>
void Convert(const CPUDevice& d, const From* src, To* dst, int64_t n) {
  ParallelFor(d, n, sizeof(From) + sizeof(To), 2, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) dst[k] = static_cast<To>(static_cast<float>(src[k]));
  });
}
template <typename From>
void Convert(const CPUDevice& d, const From* src, double* dst, int64_t n) {
  ParallelFor(d, n, sizeof(From) + 8, 2, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) dst[k] = static_cast<double>(src[k]);
  });
}

// float <-> bfloat16 through the ISA builds' vectorised conversions (the same values as Eigen's).
inline void Convert(const CPUDevice& d, const float* src, Eigen::bfloat16* dst, int64_t n) {
  ParallelFor(d, n, 6, 1, [&](int64_t begin, int64_t end) {
    gemm::FloatToBf16(src + begin, reinterpret_cast<uint16_t*>(dst) + begin, end - begin);
  });
}
inline void Convert(const CPUDevice& d, const Eigen::bfloat16* src, float* dst, int64_t n) {
  ParallelFor(d, n, 6, 1, [&](int64_t begin, int64_t end) {
    gemm::Bf16ToFloat(reinterpret_cast<const uint16_t*>(src) + begin, dst + begin, end - begin);
  });
}

// `n` values of T seen as A: the buffer itself when T == A, otherwise a converted copy in
// scratch (only counted, not converted, while the scratch is counting).
template <typename A, typename T>
const A* AsAcc(const CPUDevice& d, Scratch& scratch, const T* src, int64_t n) {
  if constexpr (std::is_same_v<T, A>) {
    return src;
  } else {
    A* dst = scratch.Take<A>(n);
    if (dst != nullptr) Convert(d, src, dst, n);
    return dst;
  }
}

// Whether all n values are zero (either sign).
template <typename A>
bool AllZero(const A* p, int64_t n) {
  return std::all_of(p, p + n, [](A v) { return v == A(0); });
}

// Where an engine computing in A writes a result of storage type T (AsAcc's counterpart): the
// result itself when T == A, otherwise a scratch buffer that Finish() converts into it.
template <typename T, typename A>
class ResultsInAcc {
 public:
  explicit ResultsInAcc(Scratch& scratch) : scratch_(scratch) {}
  A* operator()(T* result, int64_t n) {
    if constexpr (std::is_same_v<T, A>) {
      return result;
    } else {
      A* acc = scratch_.Take<A>(n);
      if (acc != nullptr) pending_.push_back({acc, result, n});
      return acc;
    }
  }
  void Finish(const CPUDevice& d) const {
    for (const Pending& p : pending_) Convert(d, p.acc, p.result, p.n);
  }

 private:
  struct Pending {
    A* acc;
    T* result;
    int64_t n;
  };
  Scratch& scratch_;
  std::vector<Pending> pending_;
};

template <typename T>
void Fill(const CPUDevice& d, T* dst, int64_t n, T value) {
  ParallelFor(d, n, sizeof(T), 1, [&](int64_t begin, int64_t end) {
    std::fill(dst + begin, dst + end, value);
  });
}

// run(begin, end) over [0, units) in `shards` contiguous shards of (almost) equal size, claimed
// by a RunPhases team; a single shard runs on the calling thread.
template <typename Run>
void RunInShards(const CPUDevice& d, int64_t units, int64_t shards, Run run) {
  auto shard = [&](int64_t s) { run(units * s / shards, units * (s + 1) / shards); };
  if (shards == 1) return shard(0);
  RunPhases(d, 1, static_cast<int>(shards), [&](int64_t, int s) { shard(s); });
}

// run(begin, end) over [0, units) split into shards across the op's intra-op threads: at most
// one per thread and one per `min_flops` of the `flops` in all (below that a thread hand-off
// costs more than it saves); a single shard runs on the calling thread.
template <typename Run>
void RunShards(const CPUDevice& d, int64_t units, double flops, double min_flops, Run run) {
  const int64_t shards = std::max<int64_t>(
      1, std::min<int64_t>({static_cast<int64_t>(d.numThreads()), units,
                            static_cast<int64_t>(flops / min_flops)}));
  RunInShards(d, units, shards, run);
}

// C[m,n] = op(A)·op(B) (+ C when accumulate), row-major with leading dimensions lda, ldb, ldc.
// op(A) is [m,k]: A is stored [m,k], or [k,m] when trans_a; likewise op(B) is [k,n], stored
// [n,k] when trans_b. Runs the ISA-dispatched GEMM blocks of cc/cpu/gemm.h, split into row or
// 16-column shards across the op's intra-op threads (small products run on the calling thread).
// gemm::Sum::kLong for the sums over time x batch rows (weight gradients): see gemm.h.
template <typename A>
void Gemm(const CPUDevice& d, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          const A* a, int64_t lda, const A* b, int64_t ldb, bool accumulate, A* c, int64_t ldc,
          gemm::Sum sum = gemm::Sum::kPlain) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) {
      ParallelFor(d, m, n * sizeof(A), n, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) std::fill(c + r * ldc, c + r * ldc + n, A(0));
      });
    }
    return;
  }
  const bool by_rows = m >= n;
  const int64_t units = by_rows ? m : (n + 15) / 16;  // rows, or 16-column blocks
  RunShards(d, units, 2.0 * m * n * k, 2e6, [&](int64_t begin, int64_t end) {
    if (by_rows) {
      gemm::Block(trans_a, trans_b, end - begin, n, k, a + begin * (trans_a ? 1 : lda), lda, b,
                  ldb, accumulate, c + begin * ldc, ldc, sum);
    } else {
      const int64_t n0 = begin * 16, n1 = std::min(n, end * 16);
      gemm::Block(trans_a, trans_b, m, n1 - n0, k, a, lda, b + n0 * (trans_b ? ldb : 1), ldb,
                  accumulate, c + n0, ldc, sum);
    }
  });
}

// The same with every operand contiguous.
template <typename A>
void Gemm(const CPUDevice& d, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          const A* a, const A* b, bool accumulate, A* c, gemm::Sum sum = gemm::Sum::kPlain) {
  Gemm(d, trans_a, trans_b, m, n, k, a, trans_a ? m : k, b, trans_b ? k : n, accumulate, c, n,
       sum);
}

// out[j] = Σ_r term(r, j) (+ out[j] when accumulate) for j < width, parallel over j and
// deterministic: rows are summed in A in blocks of kRowBlock, in increasing r, and the blocks'
// sums in double (a bias gradient sums T·B rows: one long float sum lost ~50 ulp of accuracy).
template <typename A, typename T, typename Term>
void ReduceRows(const CPUDevice& d, int64_t rows, int64_t width, Term term, T* out,
                bool accumulate = false) {
  constexpr int64_t kChunk = 64, kRowBlock = 16;
  const int64_t chunks = (width + kChunk - 1) / kChunk;
  ParallelFor(d, chunks, rows * kChunk * sizeof(A), rows * kChunk * 2.0,
              [&](int64_t begin, int64_t end) {
                A acc[kChunk];
                double total[kChunk];
                for (int64_t c = begin; c < end; ++c) {
                  const int64_t j0 = c * kChunk, j1 = std::min(width, j0 + kChunk);
                  for (int64_t j = j0; j < j1; ++j) {
                    total[j - j0] = accumulate ? static_cast<double>(A(out[j])) : 0.0;
                  }
                  for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
                    std::fill(acc, acc + kChunk, A(0));
                    for (int64_t r = r0; r < std::min(rows, r0 + kRowBlock); ++r) {
                      for (int64_t j = j0; j < j1; ++j) acc[j - j0] += term(r, j);
                    }
                    for (int64_t j = j0; j < j1; ++j) total[j - j0] += acc[j - j0];
                  }
                  for (int64_t j = j0; j < j1; ++j) out[j] = static_cast<T>(A(total[j - j0]));
                }
              });
}

// dst[a·ld_dst + b] = src[a·sa + b·sb] for a < na, b < nb: row copies when sb == 1, else through
// 32x32 tiles kept in L1 (a transpose when sa == 1).
template <typename A>
void CopyStrided(int64_t na, int64_t nb, const A* src, int64_t sa, int64_t sb, A* dst,
                 int64_t ld_dst) {
  if (sb == 1) {
    for (int64_t a = 0; a < na; ++a) std::copy_n(src + a * sa, nb, dst + a * ld_dst);
    return;
  }
  constexpr int64_t kTile = 32;  // (16 is slower: power-of-two strides thrash L1 sets)
  A tile[kTile][kTile];
  for (int64_t a0 = 0; a0 < na; a0 += kTile) {
    const int64_t a1 = std::min(na, a0 + kTile);
    for (int64_t b0 = 0; b0 < nb; b0 += kTile) {
      const int64_t b1 = std::min(nb, b0 + kTile);
      for (int64_t b = b0; b < b1; ++b) {
        for (int64_t a = a0; a < a1; ++a) tile[a - a0][b - b0] = src[a * sa + b * sb];
      }
      for (int64_t a = a0; a < a1; ++a) std::copy_n(tile[a - a0], b1 - b0, dst + a * ld_dst + b0);
    }
  }
}

// Whether Gemm runs an m x n x k product on the register tiles here (about gemm::kTiledMaxMacs
// per thread at most, on a build that has them), not on Eigen.
inline bool OnRegisterTiles(const CPUDevice& d, int64_t m, int64_t n, int64_t k) {
  return gemm::HasRegisterTiles() &&
         static_cast<double>(m) * n * k <= gemm::kTiledMaxMacs * d.numThreads();
}

// Whether whole-sequence products C [rows, n] = A·Wᵀ (k deep each; the backward's dx =
// dgates·Wxᵀ) should read a copy of W transposed once per call (TransposeInto) instead of W
// itself: on the register tiles each product transposes its slabs of W once per
// gemm::kSlabBlockRows rows of every thread's share. Measured: from 384 rows on the one copy
// saves time; below it did not (a backward at (20, 1, 256, 256) took 25 % longer with it).
// Eigen, for larger products or without the tiles, packs W either way.
inline bool TransposeOnceFor(const CPUDevice& d, int64_t rows, int64_t n, int64_t k) {
  return rows >= gemm::kSlabBlockRows && OnRegisterTiles(d, rows, n, k);
}

// dst[j·ld_dst + i] = src[i·ld_src + j] for i < rows, j < cols (dst = srcᵀ): gemm::Transpose over
// bands of src's rows across the op's intra-op threads.
template <typename A>
void TransposeInto(const CPUDevice& d, int64_t rows, int64_t cols, const A* src, int64_t ld_src,
                   A* dst, int64_t ld_dst) {
  constexpr int64_t kBand = 32;
  const double band_bytes = 2.0 * sizeof(A) * kBand * cols;
  ParallelFor(d, (rows + kBand - 1) / kBand, band_bytes, band_bytes / 8,
              [&](int64_t begin, int64_t end) {
                const int64_t r0 = begin * kBand, r1 = std::min(rows, end * kBand);
                gemm::Transpose(r1 - r0, cols, src + r0 * ld_src, ld_src, dst + r0, ld_dst);
              });
}

// How many slices UnitSlices makes.
inline int64_t UnitSliceCount(int64_t width, int64_t max_slices) {
  return std::max<int64_t>(1, std::min<int64_t>(max_slices, width / 16));
}

// How a time loop splits `width` units (cells, or projection outputs) across a RunPhases team:
// at most `max_slices` slices, each at least 16 units wide (a whole AVX-512 vector), boundaries
// on multiples of 16 where possible. Slice u is [bounds[u], bounds[u+1]); never empty unless
// width is 0 (then one empty slice).
inline std::vector<int64_t> UnitSlices(int64_t width, int64_t max_slices) {
  const int64_t slices = UnitSliceCount(width, max_slices);
  std::vector<int64_t> bounds(slices + 1);
  for (int64_t u = 0; u <= slices; ++u) {
    bounds[u] = std::min(width, (width * u / slices + 8) / 16 * 16);
  }
  bounds[slices] = width;
  return bounds;
}

// How a time loop shares its steps among a RunPhases team. By unit slices (UnitSlices): every
// thread owns some units of all batch rows and keeps only their slice of the recurrent weights
// in its cache, but a step needs all units of the previous one, so every phase ends at a barrier
// and the state crosses between cores at every step. By batch rows: rows never interact inside a
// time loop, so a thread that owns whole rows runs all its steps without waiting for anyone (no
// barrier, no state shared between cores), while keeping all the recurrent weights in its own
// cache. At (200, 16, 64, 128) the backward loop took 6.8 ms split by units on 2 threads and
// 3.9 ms on one. Rows where there are at least as many row blocks of kMinLoopRows (one tall
// register tile: their products run as fast as a whole batch's) as the unit split has units
// (`unit_team`: rows never run on fewer threads), and the weights a step multiplies take at
// most half a core's L2 cache, or, where every block has kStreamLoopRows, at most four L2s: then
// each weight read serves 16 rows, 8 bytes per cycle at two AVX-512 FMAs a cycle, which a core's
// L3 delivers. (2-core Zen 5 VM, 1 MiB L2, alternated in one process, split by rows against by
// units: block forward at (50, 32, 128, 256), 1 MiB of weights, 3.31 vs 3.45 ms, backward 6.68
// vs 6.79, and through the ops fwd+bwd 10-12 % faster; at H = 384, 2.4 MiB, 8.08 vs 8.68 and
// 16.3 vs 17.0; at (100, 64, 512, 512), 4 MiB, equal in the engine and 5 % faster through the
// ops; at H = 1024, 16 MiB, 11.7 vs 9.5: slower.) Units otherwise.
// Not split at all where the loop's recurrent products total under kMinTeamLoopFlop: there a
// helper's hand-off and the per-step joins cost more than its half of the work saves (a
// streaming step, (1, 1, 256, 256): 42 us forward on one thread, 49 on two with the pool's
// threads spinning; through a tf.function, whose pool threads sleep between calls, 20 us a call).
struct LoopSplit {
  static constexpr int64_t kMinLoopRows = 8, kStreamLoopRows = 16;
  static constexpr double kMinTeamLoopFlop = 1.5e6;
  int64_t row_blocks = 1;  // > 1: by batch rows, in RunInShards' blocks
  int64_t batch = 0;
  bool small = false;      // too little work to share: one slice (of each direction)

  bool by_rows() const { return row_blocks > 1; }
  // The unit slices' count (for UnitSlices) where a direction may use `share` threads: one when
  // split by rows or small.
  int64_t slices_of(int64_t share) const { return by_rows() || small ? 1 : share; }
  int64_t max_slices(const CPUDevice& d) const { return slices_of(d.numThreads()); }
};

// The L2 cache of one core, in bytes, as Linux describes CPU 0's caches in sysfs (1 MiB where it
// does not).
inline int64_t CoreL2Bytes() {
  static const int64_t bytes = [] {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index";
    for (int index = 0; index < 8; ++index) {
      int level = 0;
      std::string size;
      std::ifstream(dir + std::to_string(index) + "/level") >> level;
      std::ifstream(dir + std::to_string(index) + "/size") >> size;  // "2048K"
      if (level != 2 || size.empty()) continue;
      const int64_t unit = size.back() == 'K' ? 1 << 10 : size.back() == 'M' ? 1 << 20 : 1;
      const int64_t value = std::atoll(size.c_str()) * unit;
      if (value > 0) return value;
    }
    return int64_t{1} << 20;
  }();
  return bytes;
}

// Test-only switch (tests/test_cpu_time_loop_slices.py): TF_LSTM_OPS_SHARE_SMALL_LOOPS=1 shares
// every time loop however small, so that the tests' small shapes run the multi-slice and
// row-split paths.
inline bool ShareSmallLoops() {
  static const bool share = [] {
    const char* value = std::getenv("TF_LSTM_OPS_SHARE_SMALL_LOOPS");
    return value != nullptr && std::strcmp(value, "1") == 0;
  }();
  return share;
}

// (loop_flop: the FLOP of all the loop's recurrent products, every step and direction)
inline LoopSplit SplitLoop(const CPUDevice& d, int64_t batch, int64_t unit_team,
                           int64_t weight_bytes, double loop_flop) {
  LoopSplit split;
  split.batch = batch;
  if (loop_flop < LoopSplit::kMinTeamLoopFlop && !ShareSmallLoops()) {
    split.small = true;
    return split;
  }
  const int64_t blocks = std::min<int64_t>(d.numThreads(), batch / LoopSplit::kMinLoopRows);
  if (blocks <= 1 || blocks < unit_team) return split;
  const int64_t l2 = CoreL2Bytes();
  if (2 * weight_bytes <= l2 ||
      (batch / blocks >= LoopSplit::kStreamLoopRows && weight_bytes <= 4 * l2)) {
    split.row_blocks = blocks;
  }
  return split;
}

// Runs fn(phase, unit, row_begin, row_end) for every phase in [0, phases) and unit in
// [0, units), as RunPhases does, on the rows of the split: split by units, each call gets all
// rows; split by rows, each row block runs all phases and units in order on one thread.
template <typename Fn>
void RunLoop(const CPUDevice& d, const LoopSplit& split, int64_t phases, int units, Fn fn) {
  if (!split.by_rows()) {
    RunPhases(d, phases, units, [&](int64_t p, int u) { fn(p, u, int64_t{0}, split.batch); });
    return;
  }
  RunInShards(d, split.batch, split.row_blocks, [&](int64_t b0, int64_t b1) {
    for (int64_t p = 0; p < phases; ++p) {
      for (int u = 0; u < units; ++u) fn(p, u, b0, b1);
    }
  });
}

// Whether a time loop packs its recurrent weights (SlicePacking(..., PackFor(...))) for a
// product of `rows_per_step` rows (the batch) per step over `steps` steps. Above
// gemm::kDotMaxRows rows always (a product of more rows would copy a transposed operand itself,
// every step). At fewer rows each weight is used once or twice per step, and packing, a copy of
// all weights per call, is the main cost of a call at T = B = 1; how much a step gains from it
// depends on how Pack's source is stored:
// - transposed (rows contiguous: params' R in the forward, Wh read as Whᵀ in the backward): read
//   in place as dot products over contiguous rows, about as fast as from panels, while packing
//   transposes. Never packed at a few rows (at batch 1, H = 512, T = 100 packing made the block
//   backward 9 % slower).
// - row-major [k, n] (the block engine's Wh and Keras' recurrent_kernel in the forward, params'
//   R in the backward): read in place, every k of a step's product starts a new row, 4 KiB or
//   more apart in the forward, so each step waits on L2; packing is a plain copy. Packed from
//   `min_steps` steps: kPackForwardMinSteps (block forward at batch 1, H = 256: 31 % faster at
//   T = 20, 18 % at 12, 4 % at 8; at H = 128, whose weights stay in cache, no faster; since
//   the in-place products run 128-column tiles with AVX-512, docs/performance.md §3.2: even at
//   T = 16, 6 % faster at 20, 16 % at 32, 28 % at 64), kPackBackwardMinSteps (rows of R there are
//   Hr values apart and gain less: CudnnRNN's backward at batch 1, H = 256: 5 % slower at T = 20,
//   4 % faster at 40, 9-13 % at 100; with the wider in-place tiles, through the op, alternated:
//   AVX-512 packing 4-6 % slower at T = 32-40, even at 48, 6 % faster at 64-100; AVX2 7 % slower
//   at 20-28, 5-7 % faster at 32-48: one threshold for both, within this VM's noise).
constexpr int64_t kUnpackedMaxRows = gemm::kDotMaxRows;
constexpr int64_t kPackForwardMinSteps = 16, kPackBackwardMinSteps = 32;
inline bool PackFor(int64_t rows_per_step, int64_t steps, bool transposed_source,
                    int64_t min_steps) {
  return rows_per_step > kUnpackedMaxRows || (!transposed_source && steps >= min_steps);
}

// A time loop's recurrent weights packed once per unit slice for gemm::PackedBlock (or, as bf16
// bits (uint16_t), for gemm::PackedBlockBf16), so that a slice's per-step product streams one
// pre-packed operand (Eigen would repack the weights on every step). The source matrix is
// [rows, gates·width] with element (k, g·width + j) at
// src[k·row_stride + (g·width + j)·col_stride]; one of the strides is 1. Slice u (units
// [j0, j0 + n) of `bounds`) gets the operand [rows, gates·gate_cols(u)]: for each gate in order,
// its n columns, zero-padded to gate_cols(u) = gemm::PaddedCols(n) (so a product's output row has
// the same padded gate blocks). Unless `packed` is false: then nothing is packed (size() is 0)
// and Product reads the source in place (fp32 and double only).
class SlicePacking {
 public:
  SlicePacking(std::vector<int64_t> bounds, int64_t rows, int gates, bool packed = true)
      : bounds_(std::move(bounds)), rows_(rows), gates_(gates), packed_(packed),
        col0_(bounds_.size(), 0) {
    for (size_t u = 0; u + 1 < bounds_.size(); ++u) col0_[u + 1] = col0_[u] + gates * gate_cols(u);
  }
  const std::vector<int64_t>& bounds() const { return bounds_; }
  int slices() const { return static_cast<int>(bounds_.size()) - 1; }
  int64_t gate_cols(size_t u) const { return gemm::PaddedCols(bounds_[u + 1] - bounds_[u]); }
  // Slice u's first column in the row of all slices' padded outputs, and that row's width.
  int64_t col0(size_t u) const { return col0_[u]; }
  int64_t total_cols() const { return col0_.back(); }
  // Values of S in the packed operands of all slices (S: float, double, or uint16_t for bf16).
  template <typename S = float>
  int64_t size() const {
    return packed_ ? packed_rows<S>() * total_cols() : 0;
  }
  template <typename S>
  const S* slice(const S* packed, size_t u) const {
    return packed + packed_rows<S>() * col0_[u];
  }

  template <typename S>
  void Pack(const CPUDevice& d, int64_t width, const S* src, int64_t row_stride,
            int64_t col_stride, S* packed) const {
    if (!packed_) return;
    const bool trans = col_stride != 1;  // then row_stride == 1: columns are contiguous
    const int64_t ld = trans ? col_stride : row_stride;
    const int64_t tasks = slices() * int64_t{gates_};
    ParallelFor(d, tasks, rows_ * 16.0 * sizeof(S), rows_ * 16.0, [&](int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) {
        const int64_t u = task / gates_, g = task % gates_;
        const int64_t j0 = bounds_[u], n = bounds_[u + 1] - j0;
        if (n == 0) continue;
        const S* gate_src = src + (g * width + j0) * (trans ? ld : 1);
        S* dst = packed + packed_rows<S>() * (col0_[u] + g * gate_cols(u));
        if constexpr (std::is_same_v<S, uint16_t>) {
          gemm::PackPanelsBf16(trans, rows_, n, gate_src, ld, dst);
        } else {
          gemm::PackPanels(trans, rows_, n, gate_src, ld, dst);
        }
      }
    });
  }

  // C [m, gates·gate_cols(u)] (ldc) = A [m, rows] (lda) · slice u's operand, on the calling
  // thread: from `packed` (what Pack wrote), or, unpacked, from the source Pack would read (the
  // same width, src and strides), gate by gate; then a gate's padding columns in C are left
  // unwritten.
  template <typename A>
  void Product(int u, int64_t m, const A* a, int64_t lda, const A* packed, int64_t width,
               const A* src, int64_t row_stride, int64_t col_stride, A* c, int64_t ldc) const {
    const int64_t j0 = bounds_[u], n = bounds_[u + 1] - j0, cols = gate_cols(u);
    if (n == 0) return;
    if (packed_) {  // (one gate: just its n columns, C's neighbours may be another slice's)
      return gemm::PackedBlock(m, gates_ == 1 ? n : gates_ * cols, rows_, a, lda,
                               slice(packed, u), false, c, ldc);
    }
    for (int g = 0; g < gates_; ++g) {
      GateProduct(u, g, m, a, lda, packed, width, src, row_stride, col_stride, c, ldc);
    }
  }
  // Product's gate g alone, into C's gate-g block: for products whose left operand differs per
  // gate (Keras' recurrent dropout masks it per gate).
  template <typename A>
  void GateProduct(int u, int g, int64_t m, const A* a, int64_t lda, const A* packed,
                   int64_t width, const A* src, int64_t row_stride, int64_t col_stride, A* c,
                   int64_t ldc) const {
    const int64_t j0 = bounds_[u], n = bounds_[u + 1] - j0, cols = gate_cols(u);
    if (n == 0) return;
    if (packed_) {
      return gemm::PackedBlock(m, n, rows_, a, lda, slice(packed, u) + packed_rows<A>() * g * cols,
                               false, c + g * cols, ldc);
    }
    const bool trans = col_stride != 1;
    const A* gate_src = src + (g * width + j0) * (trans ? col_stride : 1);
    gemm::Block(false, trans, m, n, rows_, a, lda, gate_src, trans ? col_stride : row_stride,
                false, c + g * cols, ldc);
  }

 private:
  template <typename S>
  int64_t packed_rows() const {  // bf16 rows go in pairs
    return std::is_same_v<S, uint16_t> ? (rows_ + 1) / 2 * 2 : rows_;
  }

  std::vector<int64_t> bounds_;
  int64_t rows_;
  int gates_;
  bool packed_;
  std::vector<int64_t> col0_;
};

// bf16 products with AVX512-BF16 (gemm::HasBf16Dot()): op(B) [k, n] (B row-major [k, n] with
// leading dimension ldb, or [n, k] when trans_b) packed once across the pool, and
// C[m,n] (+)= A·op(B) (fp32, row-major, contiguous) for bf16 A [m,k] (lda), split into row shards.
inline void PackBf16(const CPUDevice& d, bool trans_b, int64_t k, int64_t n, const uint16_t* b,
                     int64_t ldb, uint16_t* packed) {
  const int64_t panels = gemm::PaddedCols(n) / gemm::kPanelWidth;
  const int64_t panel_size = gemm::PackedSizeBf16(k, gemm::kPanelWidth);
  ParallelFor(d, panels, k * 64.0, k * 16.0, [&](int64_t begin, int64_t end) {
    for (int64_t q = begin; q < end; ++q) {
      const int64_t c0 = q * gemm::kPanelWidth;
      gemm::PackPanelsBf16(trans_b, k, std::min<int64_t>(gemm::kPanelWidth, n - c0),
                           b + c0 * (trans_b ? ldb : 1), ldb, packed + q * panel_size);
    }
  });
}
inline void GemmBf16(const CPUDevice& d, int64_t m, int64_t n, int64_t k, const uint16_t* a,
                     int64_t lda, const uint16_t* packed, float* c, bool accumulate = false) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) Fill(d, c, m * n, 0.0f);
    return;
  }
  constexpr int64_t kRowsPerUnit = 6;  // the kernel's row tile
  const int64_t units = (m + kRowsPerUnit - 1) / kRowsPerUnit;
  RunShards(d, units, 2.0 * m * n * k, 4e6, [&](int64_t begin, int64_t end) {
    const int64_t r0 = std::min(m, begin * kRowsPerUnit), r1 = std::min(m, end * kRowsPerUnit);
    if (r1 > r0) {
      gemm::PackedBlockBf16(r1 - r0, n, k, a + r0 * lda, lda, packed, accumulate, c + r0 * n, n);
    }
  });
}

}  // namespace cpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CPU_LINALG_H_
