// Scratch memory of the CPU engines: one caller-owned block, carved into aligned buffers.
//
// Every engine call comes in two parts (as the GPU launchers in cc/<family>/gpu_launchers.h): a
// size query and a run on caller-owned memory. Both walk the same code with a Scratch, the query in
// counting mode (no memory: Take returns nullptr and only adds up), so the two cannot disagree. The
// engine computes nothing while counting.
#ifndef TF_LSTM_OPS_CC_CPU_SCRATCH_H_
#define TF_LSTM_OPS_CC_CPU_SCRATCH_H_

#include <cstddef>
#include <cstdint>

namespace tf_lstm_ops {
namespace cpu {

class Scratch {
 public:
  // Every buffer starts on a cache line (and a 512-bit vector).
  static constexpr size_t kAlign = 64;

  // Counting mode: hands out nothing, adds up what a run would take.
  static Scratch Counter() {
    Scratch counter(nullptr, 0);
    counter.counting_ = true;
    return counter;
  }
  // Carving mode over [base, base + bytes), which the caller owns for the whole call.
  Scratch(void* base, size_t bytes) : base_(static_cast<char*>(base)), capacity_(bytes) {}

  bool counting() const { return counting_; }

  // n elements of A, aligned; nullptr when counting or when the block is exhausted (see ok()).
  template <typename A>
  A* Take(int64_t n) {
    const size_t bytes = (static_cast<size_t>(n) * sizeof(A) + kAlign - 1) / kAlign * kAlign;
    if (counting()) {
      used_ += bytes;
      return nullptr;
    }
    const uintptr_t start = reinterpret_cast<uintptr_t>(base_);
    const uintptr_t at = (start + used_ + kAlign - 1) / kAlign * kAlign;
    const size_t end = at - start + bytes;
    if (base_ == nullptr || end > capacity_) {
      exhausted_ = true;
      return nullptr;
    }
    used_ = end;
    return reinterpret_cast<A*>(at);
  }

  // What the walk took; when counting, the block size a run needs (with room to align any base).
  size_t bytes() const { return counting() ? used_ + kAlign : used_; }
  // False once a Take did not fit: the caller passed less than the query asked for.
  bool ok() const { return !exhausted_; }

 private:
  char* base_;
  size_t capacity_;
  size_t used_ = 0;
  bool counting_ = false;
  bool exhausted_ = false;
};

}  // namespace cpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CPU_SCRATCH_H_
