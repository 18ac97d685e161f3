// What the RNN engines' GPU runs read and write alike, for any run description with `time`,
// `batch`, `time_major`, `seq_lengths` (and, for zoneout, `zoneout_h` / `zoneout_c`,
// cc/core/cudnn_rnn_types.h): the GPU side of cc/cpu/rnn_inputs.h. Time-major views of sequence
// tensors in the compute type, zoneout's weights and the lengths on the device, and the reserve
// space's header (RnnReserveHeader), which a forward writes and a backward compares on the device.
#ifndef TF_LSTM_OPS_CC_GPU_RNN_INPUTS_H_
#define TF_LSTM_OPS_CC_GPU_RNN_INPUTS_H_

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "cc/core/cudnn_rnn_types.h"
#include "cc/gpu/common.h"

namespace tf_lstm_ops {
namespace gpu {

// ---- sequence layouts ----------------------------------------------------------------------

// A sequence between batch-major [B,T,n] and time-major [T,B,n], converted from From to To:
// kToTimeMajor, dst time-major from a batch-major src; else the reverse. i indexes the
// time-major side.
template <typename From, typename To, bool kToTimeMajor>
struct SequenceLayoutFn {
  const From* src;
  To* dst;
  int64_t time, batch, n;
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t k = i % n, tb = i / n, t = tb / batch, b = tb % batch;
    const int64_t batch_major = (b * time + t) * n + k;
    if constexpr (kToTimeMajor) {
      dst[i] = Cast<To>(src[batch_major]);
    } else {
      dst[batch_major] = Cast<To>(src[i]);
    }
  }
};

// A [T,B,n] time-major compute-type view of an input in the run's layout: the input itself, or
// a copy in `staging` (T·B·n elements, carved by the caller).
template <typename Backend, typename Run, typename T, typename A>
cudaError_t ToTimeMajor(const Backend& be, const Run& run, int64_t n, const T* src, A* staging,
                        const A** out) {
  if (run.time_major) return AsAcc(be, src, run.time * run.batch * n, staging, out);
  *out = staging;
  return be.ForEach(run.time * run.batch * n,
                    SequenceLayoutFn<T, A, true>{src, staging, run.time, run.batch, n});
}

// Writes a time-major [T,B,n] compute-type buffer to dst in the run's layout and dtype.
template <typename Backend, typename Run, typename A, typename T>
cudaError_t FromTimeMajor(const Backend& be, const Run& run, int64_t n, const A* src, T* dst) {
  if (run.time_major) return Convert(be, src, dst, run.time * run.batch * n);
  return be.ForEach(run.time * run.batch * n,
                    SequenceLayoutFn<A, T, false>{src, dst, run.time, run.batch, n});
}

// ---- zoneout (docs/cudnn_rnn.md §4.9) ----------------------------------------------------------
// Each zoned state's weights in the compute type, converted once a call as the inputs are: per
// element to time-major [T·B, H] (ToTimeMajor), or the one value; in place where T == A allows.

template <typename A>
struct ZoneoutStaging {
  A *h, *c;  // the weights of h and c in A, where converted
};

template <typename T, typename A, typename Run>
A* TakeZoneoutState(ScratchCarver* s, const Run& run, const RnnZoneout& z, int64_t H) {
  constexpr bool kSame = std::is_same_v<T, A>;
  const bool staged = z.active() && !(kSame && (run.time_major || !z.per_element));
  return s->template Take<A>(!staged ? 0 : z.per_element ? run.time * run.batch * H : 1);
}

template <typename T, typename A, typename Run>
ZoneoutStaging<A> TakeZoneout(ScratchCarver* s, const Run& run, int64_t H) {
  return {TakeZoneoutState<T, A>(s, run, run.zoneout_h, H),
          TakeZoneoutState<T, A>(s, run, run.zoneout_c, H)};
}

template <typename T, typename Backend, typename Run, typename A>
cudaError_t ConvertZoneoutState(const Backend& be, const Run& run, int64_t H, const RnnZoneout& z,
                                A* staging, ZoneoutWeights<A>* out) {
  *out = {};
  if (!z.active()) return cudaSuccess;
  out->per_element = z.per_element;
  const T* keep = static_cast<const T*>(z.keep);
  return z.per_element ? ToTimeMajor(be, run, H, keep, staging, &out->keep)
                       : AsAcc(be, keep, 1, staging, &out->keep);
}

template <typename T, typename Backend, typename Run, typename A>
cudaError_t ConvertZoneout(const Backend& be, const Run& run, int64_t H,
                           const ZoneoutStaging<A>& staging, Zoneout<A>* out) {
  TF_LSTM_GPU_RETURN_IF_ERROR(
      ConvertZoneoutState<T>(be, run, H, run.zoneout_h, staging.h, &out->h));
  return ConvertZoneoutState<T>(be, run, H, run.zoneout_c, staging.c, &out->c);
}

// ---- lengths and the reserve header --------------------------------------------------------

// The run's lengths (host memory) on the device: every one T without them.
template <typename Backend, typename Run>
cudaError_t UploadLengths(const Backend& be, const Run& run, int32_t* len) {
  if (run.seq_lengths != nullptr) return Upload(be, run.seq_lengths, len, run.batch);
  return Fill(be, len, run.batch, static_cast<int32_t>(run.time));
}

// A forward's header in front of its workspace (kernel arguments: no host buffer, no
// synchronisation).
template <typename Backend>
cudaError_t WriteReserveHeader(const Backend& be, const RnnReserveHeader& header,
                               uint8_t* workspace) {
  uint64_t words[sizeof(RnnReserveHeader) / sizeof(uint64_t)];
  std::memcpy(words, &header, sizeof(header));
  return Upload(be, words, reinterpret_cast<uint64_t*>(workspace),
                static_cast<int64_t>(sizeof(words) / sizeof(words[0])));
}

// The reserve header against the expected one: flag = 1 on any difference.
struct HeaderCheckFn {
  const uint64_t* header;
  uint64_t expected[4];  // magic, config_hash, bytes, dropout
  int32_t* flag;
  TF_LSTM_HOST_DEVICE void operator()(int64_t) const {
    bool bad = false;
    for (int k = 0; k < 4; ++k) bad = bad || header[k] != expected[k];
    flag[0] = bad ? 1 : 0;
  }
};

// A backward compares the header on the device: the host would need a synchronisation to read
// it (the binding has checked the reserve space's size). flag: one int32 of scratch, which
// NanIfFlagged then reads.
template <typename Backend>
cudaError_t CheckReserveHeader(const Backend& be, const RnnReserveHeader& expected,
                               const uint8_t* reserve, int32_t* flag) {
  return be.ForEach(1, HeaderCheckFn{reinterpret_cast<const uint64_t*>(reserve),
                                     {expected.magic, expected.config_hash,
                                      static_cast<uint64_t>(expected.bytes), expected.dropout},
                                     flag});
}

template <typename T>
struct NanIfFlagFn {
  const int32_t* flag;
  T* out;
  T nan;
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    if (flag[0] != 0) out[i] = nan;
  }
};

// After a backward: every element of out NaN when CheckReserveHeader found another header.
template <typename Backend, typename T>
cudaError_t NanIfFlagged(const Backend& be, const int32_t* flag, T* out, int64_t n) {
  using A = Acc<T>;
  return be.ForEach(n, NanIfFlagFn<T>{flag, out, Cast<T>(std::numeric_limits<A>::quiet_NaN())});
}

}  // namespace gpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_GPU_RNN_INPUTS_H_
