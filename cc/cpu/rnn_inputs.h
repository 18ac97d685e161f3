// What the RNN engines' CPU runs read alike, for any run description with `time`, `batch`,
// `time_major` (and, for zoneout, `zoneout_h` / `zoneout_c`, cc/core/cudnn_rnn_types.h): time-major
// views of sequence tensors in the compute type, and zoneout's weights.
#ifndef TF_LSTM_OPS_CC_CPU_RNN_INPUTS_H_
#define TF_LSTM_OPS_CC_CPU_RNN_INPUTS_H_

#include <cstdint>
#include <type_traits>

#include "cc/core/cudnn_rnn_types.h"
#include "cc/cpu/linalg.h"

namespace tf_lstm_ops {
namespace cpu {

// Whether a run's [T,B,n] / [B,T,n] tensors are already in time-major order: time-major, or
// batch-major with T or B of 1 (the same order).
template <typename Run>
bool InTimeMajorOrder(const Run& run) {
  return run.time_major || run.batch == 1 || run.time == 1;
}

// [T,B,n] (time-major) view of a [T,B,n] or [B,T,n] tensor, in the compute type (a copy in
// scratch unless it is both (InTimeMajorOrder); only counted while the scratch is counting).
template <typename A, typename T, typename Run>
const A* ToTimeMajor(const CPUDevice& d, Scratch& scratch, const Run& run, int64_t n,
                     const T* src) {
  if (InTimeMajorOrder(run)) return AsAcc<A>(d, scratch, src, run.time * run.batch * n);
  A* dst = scratch.Take<A>(run.time * run.batch * n);
  if (dst == nullptr) return nullptr;
  const int64_t time = run.time, B = run.batch;
  ParallelFor(d, time * B, n * 8.0, n * 2.0, [&](int64_t begin, int64_t end) {
    for (int64_t tb = begin; tb < end; ++tb) {
      const int64_t t = tb / B, b = tb % B;
      for (int64_t k = 0; k < n; ++k) dst[tb * n + k] = A(src[(b * time + t) * n + k]);
    }
  });
  return dst;
}

// Writes a time-major [T,B,n] compute-type buffer to dst in the run's layout and dtype.
template <typename T, typename A, typename Run>
void FromTimeMajor(const CPUDevice& d, const Run& run, int64_t n, const A* src, T* dst) {
  const int64_t T_ = run.time, B = run.batch;
  ParallelFor(d, T_ * B, n * 8.0, n * 2.0, [&](int64_t begin, int64_t end) {
    for (int64_t tb = begin; tb < end; ++tb) {
      const int64_t t = tb / B, b = tb % B;
      T* row = dst + (run.time_major ? tb : b * T_ + t) * n;
      for (int64_t k = 0; k < n; ++k) row[k] = static_cast<T>(src[tb * n + k]);
    }
  });
}

// A run's zoneout weights (docs/cudnn_rnn.md §4.9) in the compute type (ZoneoutWeights).
template <typename T, typename A, typename Run>
Zoneout<A> ConvertZoneout(const CPUDevice& d, Scratch& scratch, const Run& run, int64_t width) {
  auto convert = [&](const RnnZoneout& z) {
    ZoneoutWeights<A> w;
    if (!z.active()) return w;
    const T* keep = static_cast<const T*>(z.keep);
    w.keep = z.per_element ? ToTimeMajor<A>(d, scratch, run, width, keep)
                           : AsAcc<A>(d, scratch, keep, 1);
    w.per_element = z.per_element;
    return w;
  };
  return {convert(run.zoneout_h), convert(run.zoneout_c)};
}

// A row's zoneout weights read without a per-element branch or strided read, kZoned a
// constant: ZoneoutView's ToNew / ToPrevious with the same arithmetic (so the same bits), for
// loops that should vectorise. `keep`: the row's n weights (ZoneoutRow.Of).
template <typename A, bool kZoned>
struct ZoneoutRow {
  const A* keep = nullptr;
  // The n weights from element 0 of the view: its own where given per element, else `buffer`
  // filled with its one value.
  static ZoneoutRow Of(const ZoneoutView<A>& view, int64_t n, A* buffer) {
    if constexpr (!kZoned) {
      return {};
    } else {
      if (view.stride == 1) return {view.keep};
      for (int64_t j = 0; j < n; ++j) buffer[j] = view[0];
      return {buffer};
    }
  }
  A ToNew(int64_t j, A ds) const {
    if constexpr (kZoned) return keep[j] * ds;
    return ds;
  }
  A ToPrevious(int64_t j, A ds) const {
    if constexpr (kZoned) return (A(1) - keep[j]) * ds;
    return A(0);
  }
};

// f(std::bool_constant<a>, std::bool_constant<b>): two run-time flags as constants.
template <typename F>
void WithFlags(bool a, bool b, F&& f) {
  if (a) {
    b ? f(std::true_type{}, std::true_type{}) : f(std::true_type{}, std::false_type{});
  } else {
    b ? f(std::false_type{}, std::true_type{}) : f(std::false_type{}, std::false_type{});
  }
}

// s[j] = ZoneoutBlend(w[j], s[j], prev[j]) for j < n: the new state in, the carried one out.
template <typename A>
void ZoneRowForward(const ZoneoutView<A>& w, int64_t n, const A* prev, A* s) {
  if (!w.zoned()) return;
  for (int64_t j = 0; j < n; ++j) s[j] = ZoneoutBlend(w[j], s[j], prev[j]);
}

}  // namespace cpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CPU_RNN_INPUTS_H_
