// The CPU engine of the LSTM block ops (cpu_engine.h): Eigen's ThreadPoolDevice, the GEMM blocks
// of cc/cpu and the cell math of cc/core; no framework.
//
// Structure (the same one the GPU path follows): the input projection x·Wx of a chunk of steps
// is one GEMM (per gate block when it goes into the i, f, ci, o outputs); each step does only the
// recurrent GEMM h·Wh and one fused element-wise pass (bias, activations, state update, saved
// activations). Backward does one element-wise pass and one dgates·Whᵀ GEMM per step, then dx,
// dW, db and the peephole gradients as GEMMs/reductions over the sweep's dgates: the whole
// sequence's when they are kept in place, else each chunk's. half/bfloat16 compute in float
// (GEMMs accumulate in float).
//
// Memory: the forward and backward keep no sequence-sized scratch in float and double (the
// backward's gradient does: below). The forward writes the input
// projection straight into the i, f, ci, o outputs; the backward, when TensorFlow lets it take
// over the saved i, f, ci, o (ReusableGates: the caller's decision), stores each gate's gradient
// in place of the gate and uses the not-yet-written x_grad and w_grad outputs as the sweep's
// scratch.
// Otherwise it keeps dgates for one chunk of steps at a time. The backward's gradient
// (LstmBackwardGrad) keeps every step's dgates, their cotangents and the total dh, dcs in the
// compute type (10·T·B·H values), and for half/bfloat16 compute-type copies of its sequence
// inputs and results as well.
#include "cc/block_lstm/cpu_engine.h"

#include <algorithm>
#include <atomic>
#include <type_traits>
#include <utility>
#include <vector>

#include "cc/core/lstm_cell.h"
#include "cc/core/precision.h"
#include "cc/cpu/elementwise.h"
#include "cc/cpu/linalg.h"

namespace tf_lstm_ops {
namespace cpu {
namespace {

// Whether a T = bfloat16 op multiplies the stored bf16 values with the CPU's bf16 dot product
// (AVX512-BF16), and those values' bits.
template <typename T>
bool UsesBf16Dot() {
  if constexpr (std::is_same_v<T, Eigen::bfloat16>) return gemm::HasBf16Dot();
  return false;
}
template <typename T>
const uint16_t* Bf16Bits(const T* p) {
  return reinterpret_cast<const uint16_t*>(p);
}

// Backward runs that kept dgates in place (ReusableGates); read by the tests through
// tf_lstm_ops_in_place_backward_runs().
std::atomic<int64_t> in_place_backward_runs{0};

// Per-row values of the four gates, block k (W's column block k, in the layout's order) of row
// r at gate[k][r·ld + j], j < H: either one interleaved [rows, 4H] matrix (a scratch chunk, the
// cell op's dicfo) or four [rows, H] buffers (the i, f, ci, o tensors themselves).
template <typename P>
struct GateMatrix {
  P gate[4];
  int64_t ld;

  static GateMatrix Interleaved(P base, int64_t cell) {
    return {{base, base + cell, base + 2 * cell, base + 3 * cell}, 4 * cell};
  }
  // The i, f, ci, o tensors of a set, in their blocks.
  template <typename S>
  static GateMatrix Of(const LstmActivations<S>& set, GateBlocks blk, int64_t cell) {
    GateMatrix m;
    m.gate[blk.i] = set.i;
    m.gate[blk.c] = set.ci;
    m.gate[blk.f] = set.f;
    m.gate[blk.o] = set.o;
    m.ld = cell;
    return m;
  }
  GateMatrix Row(int64_t r) const {
    return {{gate[0] + r * ld, gate[1] + r * ld, gate[2] + r * ld, gate[3] + r * ld}, ld};
  }
  operator GateMatrix<const std::remove_pointer_t<P>*>() const {  // NOLINT: as for pointers
    return {{gate[0], gate[1], gate[2], gate[3]}, ld};
  }
};

// Runs fn(columns, col0, width) over a product's gate blocks: once over the whole interleaved
// matrix (col0 0, width 4H), or once per buffer (col0 k·H, width H); the rows are m.ld apart.
// (Only Interleaved makes ld 4H: four buffers have ld H.)
template <typename P, typename Fn>
void ForGateBlocks(const GateMatrix<P>& m, int64_t cell, Fn fn) {
  if (m.ld == 4 * cell) return fn(m.gate[0], int64_t{0}, 4 * cell);
  for (int k = 0; k < 4; ++k) fn(m.gate[k], k * cell, cell);
}

template <typename A, typename T>
CellParams<A> MakeCellParams(const LstmAttrs& attrs) {
  // The clamp bound is the attr rounded to T first (half: a tiny clip rounds to 0 and clamps all).
  return CellParams<A>{static_cast<A>(attrs.forget_bias),
                       static_cast<A>(static_cast<T>(attrs.cell_clip)), attrs.cell_clip > 0,
                       attrs.use_peephole};
}

// Peephole weights in A (nullptr without use_peephole: never read then).
template <typename T, typename A>
struct Peepholes {
  const A *wci = nullptr, *wcf = nullptr, *wco = nullptr;

  void Init(const CPUDevice& d, Scratch& scratch, const LstmAttrs& attrs, const LstmInputs<T>& in,
            int64_t h) {
    if (!attrs.use_peephole) return;
    wci = AsAcc<A>(d, scratch, in.wci, h);
    wcf = AsAcc<A>(d, scratch, in.wcf, h);
    wco = AsAcc<A>(d, scratch, in.wco, h);
  }
};

// The fused forward pass of one step for the units [j0, j1) of batch rows [b0, b1): bias,
// activations, state update and the seven saved outputs. `xw` is the step's input projection
// (it may be the i, f, ci, o outputs themselves: each element is read before it is written);
// `rec` is this unit range's recurrent block h·Wh, [B, 4·rec_gate] with the gates in blk order,
// each in a block of rec_gate >= j1 - j0 columns. h_acc (if not null) gets h as stored, in A.
// kPeephole and kClip are compile-time so the per-unit loop has no branches and vectorises.
template <typename T, typename A, typename Math, bool kPeephole, bool kClip>
void ForwardUnits(int64_t b0, int64_t b1, int64_t j0, int64_t j1, int64_t H, GateBlocks blk,
                  A forget_bias, A cell_clip, const GateMatrix<const A*>& xw, const A* rec,
                  int64_t rec_gate, const A* bias,
                  const T* cs_prev, const Peepholes<T, A>& peep, const LstmActivations<T*>& out,
                  A* h_acc) {
  const CellParams<A> params{forget_bias, cell_clip, kClip, kPeephole};
  for (int64_t b = b0; b < b1; ++b) {
    const GateMatrix<const A*> gx = xw.Row(b);
    const A* gr = rec + b * 4 * rec_gate - j0;
    // Each gate's three addends as plain pointers (see BackwardUnits).
    struct Addends {
      const A *x, *r, *b;
    };
    auto addends = [&](int block) {
      return Addends{gx.gate[block], gr + block * rec_gate, bias + block * H};
    };
    const Addends in_i = addends(blk.i), in_c = addends(blk.c), in_f = addends(blk.f),
                  in_o = addends(blk.o);
    auto gate = [](const Addends& in, int64_t j) { return (in.x[j] + in.r[j]) + in.b[j]; };
#pragma GCC ivdep  // xw may be out's own i, f, ci, o, but only element k aliases element k
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t k = b * H + j;
      const CellActivations<A> a = CellForward<A, Math>(
          params, gate(in_i, j), gate(in_c, j), gate(in_f, j), gate(in_o, j), A(cs_prev[k]),
          kPeephole ? peep.wci[j] : A(0), kPeephole ? peep.wcf[j] : A(0),
          kPeephole ? peep.wco[j] : A(0));
      out.i[k] = T(a.i);
      out.cs[k] = T(a.cs);
      out.f[k] = T(a.f);
      out.o[k] = T(a.o);
      out.ci[k] = T(a.ci);
      out.co[k] = T(a.co);
      out.h[k] = T(a.h);
      if constexpr (!std::is_same_v<T, A>) {
        if (h_acc != nullptr) h_acc[k] = A(out.h[k]);  // the state, as stored (loop-invariant)
      }
    }
  }
}

// The fused backward pass of one step for the units [j0, j1) of batch rows [b0, b1): dgates
// (the step's rows of `dgates`, which may be act's own i, f, ci, o: each element is read before
// it is written; with kStage also into `stage` [B, 4H]) and the cell state gradient for the
// previous step (dc_out may alias dc_carry: element-wise). `out_grads` are this step's gradients
// w.r.t. the outputs; kDirect says whether i/f/o/ci/co are present (BlockLSTMFullGrad) or zero
// (the TF grad ops).
template <typename T, typename A, bool kPeephole, bool kDirect, bool kStage>
void BackwardUnits(int64_t b0, int64_t b1, int64_t j0, int64_t j1, int64_t H, GateBlocks blk,
                   const Peepholes<T, A>& peep, const LstmActivations<const T*>& act,
                   const T* cs_prev, const LstmActivations<const T*>& out_grads,
                   const A* dc_carry, const A* dh_carry, const GateMatrix<A*>& dgates, A* stage,
                   A* dc_out) {
  for (int64_t b = b0; b < b1; ++b) {
    // The row's destinations as plain pointers: indexed by the runtime blk inside the loop,
    // the gate arrays stay in memory, are reloaded after every store, and the loop does not
    // vectorise.
    const GateMatrix<A*> dg = dgates.Row(b);
    A* const dg_i = dg.gate[blk.i];
    A* const dg_c = dg.gate[blk.c];
    A* const dg_f = dg.gate[blk.f];
    A* const dg_o = dg.gate[blk.o];
    A* const st = kStage ? stage + b * 4 * H : nullptr;
    A* const st_i = kStage ? st + blk.i * H : nullptr;
    A* const st_c = kStage ? st + blk.c * H : nullptr;
    A* const st_f = kStage ? st + blk.f * H : nullptr;
    A* const st_o = kStage ? st + blk.o * H : nullptr;
#pragma GCC ivdep  // dgates may be act's own i, f, ci, o, but only element k aliases element k
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t k = b * H + j;
      const CellActivations<A> a{A(act.i[k]),  A(act.cs[k]), A(act.f[k]), A(act.o[k]),
                                 A(act.ci[k]), A(act.co[k]), A(0)};
      auto direct = [k](const T* p) { return kDirect ? A(p[k]) : A(0); };
      const CellGradients<A> g = CellBackward<A>(
          kPeephole, a, A(cs_prev[k]), kPeephole ? peep.wci[j] : A(0),
          kPeephole ? peep.wcf[j] : A(0), kPeephole ? peep.wco[j] : A(0),
          A(out_grads.cs[k]) + dc_carry[k], A(out_grads.h[k]) + dh_carry[k],
          {direct(out_grads.i), direct(out_grads.f), direct(out_grads.o), direct(out_grads.ci),
           direct(out_grads.co)});
      dg_i[j] = g.d_i;
      dg_c[j] = g.d_c;
      dg_f[j] = g.d_f;
      dg_o[j] = g.d_o;
      if constexpr (kStage) {
        st_i[j] = g.d_i;
        st_c[j] = g.d_c;
        st_f[j] = g.d_f;
        st_o[j] = g.d_o;
      }
      dc_out[k] = g.cs_prev_grad;
    }
  }
}

// BackwardUnits with the runtime flags as template arguments.
template <typename T, typename A>
void BackwardUnitsFor(const LstmAttrs& attrs, bool direct, int64_t b0, int64_t b1, int64_t j0,
                      int64_t j1, int64_t H, const Peepholes<T, A>& peep,
                      const LstmActivations<const T*>& act, const T* cs_prev,
                      const LstmActivations<const T*>& out_grads, const A* dc_carry,
                      const A* dh_carry, const GateMatrix<A*>& dgates, A* stage, A* dc_out) {
  const GateBlocks blk = BlocksOf(attrs.layout);
  auto run = [&](auto peephole, auto direct_c, auto staged) {
    BackwardUnits<T, A, decltype(peephole)::value, decltype(direct_c)::value,
                  decltype(staged)::value>(b0, b1, j0, j1, H, blk, peep, act, cs_prev, out_grads,
                                           dc_carry, dh_carry, dgates, stage, dc_out);
  };
  Elementwise([&] {
    if constexpr (std::is_same_v<T, A>) {
      WithFlags(attrs.use_peephole, direct, stage != nullptr, run);
    } else {  // only the in-place backward stages, and it needs T == A
      WithFlags(attrs.use_peephole, direct, [&](auto peephole, auto direct_c) {
        run(peephole, direct_c, std::false_type{});
      });
    }
  });
}

// Peephole gradients of a chunk of `rows` dgates rows, added to acc[0..3H) (wci, wcf, wco):
// Σ δi ⊙ cs_prev, Σ δf ⊙ cs_prev, Σ δo ⊙ cs; cs_prev_of(r) and cs_of(r) give dgates row r's
// rows.
template <typename T, typename A, typename CsPrevRow, typename CsRow>
void AddPeepholeGrads(const CPUDevice& d, const LstmAttrs& attrs, int64_t rows, int64_t cell,
                      const GateMatrix<const A*>& dgates, CsPrevRow cs_prev_of, CsRow cs_of,
                      A* acc) {
  const GateBlocks blk = BlocksOf(attrs.layout);
  ReduceRows<A>(d, rows, 3 * cell, [&](int64_t r, int64_t q) {
    const int64_t which = q / cell, j = q - which * cell;
    const int block = which == 0 ? blk.i : (which == 1 ? blk.f : blk.o);
    const T* state = which == 2 ? cs_of(r) : cs_prev_of(r);
    return dgates.gate[block][r * dgates.ld + j] * A(state[j]);
  }, acc, /*accumulate=*/true);
}

// The forward's two products: the input projection x·Wx and each slice's recurrent h·Wh_u.
// Computed in A (x and W converted once: no copies for float and double), or for bfloat16 on a
// CPU with a bf16 dot product (AVX512-BF16) on the stored bf16 values themselves, at twice the
// rate: bf16 products are exact in fp32, so both give the same sums up to their order. Either
// way the recurrence multiplies h as stored (rounded to T), as TF does.
template <typename T, typename A>
class ForwardProducts {
 public:
  // Takes (and, unless counting, fills) the products' scratch.
  void Init(const CPUDevice& d, Scratch& scratch, const LstmDims& dims, int64_t L,
            const LstmInputs<T>& in, const LstmActivations<T*>& out, const SlicePacking& packing) {
    dims_ = dims;
    in_ = in;
    out_ = out;
    packing_ = &packing;
    const int64_t I = dims.input, H = dims.cell, G = 4 * H, step = dims.batch * H;
    bf16_dot_ = UsesBf16Dot<T>();
    if (bf16_dot_) {
      const uint16_t* w = Bf16Bits(in.w);
      wx_bits_ = scratch.Take<uint16_t>(gemm::PackedSizeBf16(I, G));
      wh_bits_ = scratch.Take<uint16_t>(packing.size<uint16_t>());
      if (wx_bits_ == nullptr || wh_bits_ == nullptr) return;  // counting, or out of scratch
      PackBf16(d, false, I, G, w, G, wx_bits_);
      packing.Pack(d, H, w + I * G, G, int64_t{1}, wh_bits_);
      return;
    }
    const A* w = AsAcc<A>(d, scratch, in.w, (I + H) * G);
    x_ = AsAcc<A>(d, scratch, in.x, L * dims.batch * I);
    h_prev_ = AsAcc<A>(d, scratch, in.h_prev, step);
    w_x_ = w;
    wh_packed_ = scratch.Take<A>(packing.size());
    if constexpr (!std::is_same_v<T, A>) {
      // The stored h in A for the next step's product; two of them, since a slice still reading
      // step t-1's state must not see another slice's step t already.
      h_acc_ = scratch.Take<A>(2 * step);
    }
    if (w != nullptr && wh_packed_ != nullptr) {
      packing.Pack(d, H, w + I * G, G, int64_t{1}, wh_packed_);
    }
  }

  // xw = x·Wx for the `steps` steps from t0 (steps·B rows; interleaved for bf16 dot).
  void Project(const CPUDevice& d, int64_t t0, int64_t steps, const GateMatrix<A*>& xw) const {
    const int64_t B = dims_.batch, I = dims_.input, H = dims_.cell, G = 4 * H;
    if (bf16_dot_) {
      if constexpr (std::is_same_v<A, float>) {
        GemmBf16(d, steps * B, G, I, Bf16Bits(in_.x) + t0 * B * I, I, wx_bits_, xw.gate[0]);
      }
      return;
    }
    ForGateBlocks(xw, H, [&](A* c, int64_t col0, int64_t width) {
      Gemm(d, false, false, steps * B, width, I, x_ + t0 * B * I, I, w_x_ + col0, G, false, c,
           xw.ld);
    });
  }

  // Rows [b0, b1) of rec_u = h_{t-1}·Wh_u for slice u ([B, 4·gate_cols(u)]).
  void Recur(int u, int64_t t, int64_t b0, int64_t b1, A* rec_u) const {
    const int64_t B = dims_.batch, H = dims_.cell, G = 4 * H, cols = 4 * packing_->gate_cols(u);
    if (bf16_dot_) {
      if constexpr (std::is_same_v<A, float>) {
        const uint16_t* h = t == 0 ? Bf16Bits(in_.h_prev) : Bf16Bits(out_.h) + (t - 1) * B * H;
        gemm::PackedBlockBf16(b1 - b0, cols, H, h + b0 * H, H, packing_->slice(wh_bits_, u),
                              false, rec_u + b0 * cols, cols);
      }
      return;
    }
    const A* h = h_prev_;
    if (t > 0) {
      if constexpr (std::is_same_v<T, A>) {
        h = out_.h + (t - 1) * B * H;
      } else {
        h = h_acc_ + (t - 1) % 2 * B * H;
      }
    }
    packing_->Product(u, b1 - b0, h + b0 * H, H, wh_packed_, H, w_x_ + dims_.input * G, G,
                      int64_t{1}, rec_u + b0 * cols, cols);
  }

  // Where step t's element-wise pass stores h in A for Recur (nullptr: Recur reads out.h).
  A* StateOut(int64_t t) const {
    return h_acc_ == nullptr ? nullptr : h_acc_ + t % 2 * dims_.batch * dims_.cell;
  }

 private:
  LstmDims dims_;
  LstmInputs<T> in_;
  LstmActivations<T*> out_;
  const SlicePacking* packing_ = nullptr;
  bool bf16_dot_ = false;
  const A *x_ = nullptr, *w_x_ = nullptr, *h_prev_ = nullptr;
  A *wh_packed_ = nullptr, *h_acc_ = nullptr;
  uint16_t *wx_bits_ = nullptr, *wh_bits_ = nullptr;
};

// The backward's whole-chunk products dx = dgates·Wxᵀ and dW (+)= [x; h_{t-1}]ᵀ·dgates for
// bfloat16 on a CPU with a bf16 dot product (AVX512-BF16): at twice the fp32 rate, on dgates
// rounded to bfloat16 once and on x, the states and Wx as stored (no float copies of them), with
// float sums, as mixed-precision training does. The recurrent dh, db and the peephole sums keep
// float dgates, so the gradient carried through time is not rounded.
class Bf16ChunkProducts {
 public:
  void Init(const CPUDevice& d, Scratch& scratch, const LstmDims& dims, int64_t chunk_rows,
            const uint16_t* w) {
    const int64_t I = dims.input, H = dims.cell, G = 4 * H;
    dims_ = dims;
    // Wxᵀ [G, I] as the packed operand of dx; a chunk's dgates in bf16, row-major (dx's A) and
    // packed (dW's B); [x; h_{t-1}]ᵀ [I + H, rows] (dW's A).
    wx_t_ = scratch.Take<uint16_t>(gemm::PackedSizeBf16(G, I));
    dgates_ = scratch.Take<uint16_t>(chunk_rows * G);
    dgates_packed_ = scratch.Take<uint16_t>(gemm::PackedSizeBf16(chunk_rows, G));
    xh_t_ = scratch.Take<uint16_t>((I + H) * chunk_rows);
    if (wx_t_ != nullptr) PackBf16(d, true, G, I, w, G, wx_t_);
  }

  // The chunk of `rows` dgates rows (float, [rows, 4H]) from step t0: dx [rows, I] and
  // dw [I + H, 4H] (added to unless `first`). x and h_prev/h (the stored bf16 bits) are the
  // op's x, h_prev and h inputs.
  void Run(const CPUDevice& d, int64_t t0, int64_t rows, const float* dgates, const uint16_t* x,
           const uint16_t* h_prev, const uint16_t* h, bool first, float* dx, float* dw) const {
    const int64_t B = dims_.batch, I = dims_.input, H = dims_.cell, G = 4 * H;
    Convert(d, dgates, reinterpret_cast<Eigen::bfloat16*>(dgates_), rows * G);
    PackBf16(d, false, rows, G, dgates_, G, dgates_packed_);
    // [x; h_{t-1}]ᵀ: the chunk's x rows, and the states its steps started from, h[t0-1].. or
    // for the chunk at step 0, h_prev and then h_0.. (contiguous either way).
    CopyStrided(I, rows, x + t0 * B * I, 1, I, xh_t_, rows);
    uint16_t* h_t = xh_t_ + I * rows;
    if (t0 > 0) {
      CopyStrided(H, rows, h + (t0 - 1) * B * H, 1, H, h_t, rows);
    } else {
      CopyStrided(H, B, h_prev, 1, H, h_t, rows);
      CopyStrided(H, rows - B, h, 1, H, h_t + B, rows);
    }
    GemmBf16(d, rows, I, G, dgates_, G, wx_t_, dx);
    GemmBf16(d, I + H, G, rows, xh_t_, rows, dgates_packed_, dw, /*accumulate=*/!first);
  }

 private:
  LstmDims dims_;
  uint16_t *wx_t_ = nullptr, *dgates_ = nullptr, *dgates_packed_ = nullptr, *xh_t_ = nullptr;
};

// Steps per chunk of the time loops: where they need per-step scratch (the input projection in
// half/bfloat16 forward, dgates in a backward that cannot keep them in place) it is kept for one
// chunk of about kChunkRows batch rows, not the whole sequence, while the chunk's GEMMs (x·Wx,
// dx, dW) still have hundreds of rows; the float forward chunks its projection for locality.
int64_t StepsPerChunk(int64_t batch, int64_t steps) {
  constexpr int64_t kChunkRows = 512;
  return std::max<int64_t>(1, std::min(steps, kChunkRows / std::max<int64_t>(1, batch)));
}

// How a forward or backward time loop of L steps shares its team (SplitLoop): each step
// multiplies by all of Wh (h·Wh forward, dgates·Whᵀ backward), 4H x H packed as 4H x
// PaddedCols(H), 8·B·H² FLOP.
template <typename A>
LoopSplit SplitTimeLoop(const CPUDevice& d, int64_t B, int64_t H, int64_t L) {
  return SplitLoop(d, B, UnitSliceCount(H, d.numThreads()),
                   4 * H * gemm::PaddedCols(H) * int64_t{sizeof(A)}, 8.0 * L * B * H * H);
}

// Each engine call below is one walk over its code with a Scratch: counting for the size query
// (then it returns before computing anything), carving for the run. False: out of scratch.

template <typename T>
bool ForwardWalk(const CPUDevice& d, Scratch& scratch, const LstmDims& dims,
                 const LstmAttrs& attrs, int64_t seq_len_max, const LstmInputs<T>& in,
                 const LstmActivations<T*>& out) {
  using A = AccFor<T>;
  const int64_t B = dims.batch, H = dims.cell, G = 4 * H, L = seq_len_max;
  const int64_t step = B * H;

  // Steps past seq_len_max are zero in every output (TF leaves i, f, o, ci, co uninitialised).
  if (!scratch.counting()) {
    for (T* p : {out.i, out.cs, out.f, out.o, out.ci, out.co, out.h}) {
      Fill(d, p + L * step, (dims.time - L) * step, T(0));
    }
  }
  if (L == 0 || step == 0) return true;

  const A* bias = AsAcc<A>(d, scratch, in.b, G);
  Peepholes<T, A> peep;
  peep.Init(d, scratch, attrs, in, H);

  // The time loop: one phase per step; each unit slice multiplies the state by its own
  // columns of Wh (packed once unless B is a few rows, kept hot in one core's cache) and runs
  // the fused element-wise pass of its units. A step's units need the whole previous h, hence
  // the phase order. Or split by batch rows (SplitLoop), one slice of all units.
  const LoopSplit split = SplitTimeLoop<A>(d, B, H, L);
  const SlicePacking packing(UnitSlices(H, split.max_slices(d)), H, 4,
                             PackFor(B, L, /*transposed_source=*/false, kPackForwardMinSteps) ||
                                 UsesBf16Dot<T>());  // (the bf16 dot needs packing)
  const std::vector<int64_t>& bounds = packing.bounds();
  ForwardProducts<T, A> products;
  products.Init(d, scratch, dims, L, in, out, packing);

  // Input projection of a chunk of steps at once, straight into the i, f, ci, o outputs
  // (the step's element-wise pass replaces each value by its activation), except in half and
  // bfloat16, where it stays in float in a chunk's scratch. rec holds every slice's h·Wh of a
  // step.
  const GateBlocks blk = BlocksOf(attrs.layout);
  const int64_t chunk = StepsPerChunk(B, L);
  GateMatrix<A*> xw_scratch{};
  if constexpr (!std::is_same_v<T, A>) {
    xw_scratch = GateMatrix<A*>::Interleaved(scratch.Take<A>(chunk * B * G), H);
  }
  A* rec = scratch.Take<A>(B * packing.total_cols());
  if (scratch.counting() || !scratch.ok()) return scratch.ok();
  const CellParams<A> params = MakeCellParams<A, T>(attrs);
  WithFlags(params.use_peephole, params.clip_active, [&](auto peephole, auto clip) {
    for (int64_t t0 = 0; t0 < L; t0 += chunk) {
      const int64_t steps = std::min(chunk, L - t0);
      GateMatrix<A*> xw = xw_scratch;
      if constexpr (std::is_same_v<T, A>) xw = GateMatrix<A*>::Of(out, blk, H).Row(t0 * B);
      products.Project(d, t0, steps, xw);
      RunLoop(d, split, steps, packing.slices(), [&](int64_t s, int u, int64_t b0, int64_t b1) {
        const int64_t t = t0 + s;
        const int64_t j0 = bounds[u], n = bounds[u + 1] - j0;
        A* rec_u = rec + B * packing.col0(u);
        products.Recur(u, t, b0, b1, rec_u);
        const T* cs_prev = t == 0 ? in.cs_prev : out.cs + (t - 1) * step;
        Elementwise([&] {
          ForwardUnits<T, A, MathFor<T>, decltype(peephole)::value, decltype(clip)::value>(
              b0, b1, j0, j0 + n, H, blk, params.forget_bias, params.cell_clip, xw.Row(s * B),
              rec_u, packing.gate_cols(u), bias, cs_prev, peep, AtStep(out, t, step),
              products.StateOut(t));
        });
      });
    }
  });
  return true;
}

template <typename T>
bool BackwardWalk(const CPUDevice& d, Scratch& scratch, const LstmDims& dims,
                  const LstmAttrs& attrs, int64_t seq_len_max, const LstmInputs<T>& in,
                  const LstmActivations<const T*>& act,
                  const LstmActivations<const T*>& out_grads, const LstmInputGrads<T>& grads,
                  const ReusableGates<T>* reuse) {
  using A = AccFor<T>;
  const int64_t B = dims.batch, I = dims.input, H = dims.cell, G = 4 * H, L = seq_len_max;
  const int64_t step = B * H;
  const bool nothing_ran = L == 0 || step == 0;

  if (!scratch.counting()) {
    // Steps at or past seq_len_max do not influence the outputs: their x_grad is zero.
    Fill(d, grads.x + L * B * I, (dims.time - L) * B * I, T(0));
    if (nothing_ran || !attrs.use_peephole) {  // no peepholes, or no steps: zero gradients
      for (T* p : {grads.wci, grads.wcf, grads.wco}) Fill(d, p, H, T(0));
    }
    if (nothing_ran) {
      // Nothing ran (or nothing has size): every remaining gradient is zero.
      Fill(d, grads.x, L * B * I, T(0));
      for (T* p : {grads.cs_prev, grads.h_prev}) Fill(d, p, step, T(0));
      Fill(d, grads.w, (I + H) * G, T(0));
      Fill(d, grads.b, G, T(0));
    }
  }
  if (nothing_ran) return true;

  // W in A (the buffer itself for float and double); the bf16 dot products read Wx as stored,
  // so then only Wh's rows are converted (for the recurrent dh, which stays in float).
  const bool bf16_dot = UsesBf16Dot<T>();
  const int64_t w_row0 = bf16_dot ? I : 0;
  const A* w = AsAcc<A>(d, scratch, in.w + w_row0 * G, (I + H - w_row0) * G);
  Peepholes<T, A> peep;
  peep.Init(d, scratch, attrs, in, H);
  const A* w_x = bf16_dot ? nullptr : w;
  const A* w_h = w == nullptr ? nullptr : w + (I - w_row0) * G;

  // x, h_prev and the h sequence in A (the buffers themselves for float and double; not
  // needed by the bf16 dot products).
  const A *x = nullptr, *h_prev = nullptr, *h_seq = nullptr;
  if (!bf16_dot) {
    x = AsAcc<A>(d, scratch, in.x, L * B * I);
    h_prev = AsAcc<A>(d, scratch, in.h_prev, step);
    h_seq = AsAcc<A>(d, scratch, act.h, (L - 1) * step);
  }

  // Where the sweep keeps dgates: in place of i, f, ci, o for the whole sequence (float and
  // double, when the caller hands them over as ReusableGates), or in scratch for one chunk of
  // steps at a time, with dW, db and the peephole sums accumulating over the chunks.
  const GateBlocks blk = BlocksOf(attrs.layout);
  GateMatrix<A*> in_place{};
  bool whole = false;
  if constexpr (std::is_same_v<T, A>) {
    if (reuse != nullptr) {
      whole = true;
      in_place.gate[blk.i] = reuse->i;
      in_place.gate[blk.c] = reuse->ci;
      in_place.gate[blk.f] = reuse->f;
      in_place.gate[blk.o] = reuse->o;
      in_place.ld = H;
    }
  }
  const int64_t chunk = whole ? L : StepsPerChunk(B, L);
  A *dgates_chunk = nullptr, *dx, *dw;
  if (!whole) dgates_chunk = scratch.Take<A>(chunk * B * G);
  A* dc = scratch.Take<A>(step);
  A* dh = scratch.Take<A>(step);
  A* sums = scratch.Take<A>(G + 3 * H);  // db [G] and the peephole sums [3H]
  if constexpr (std::is_same_v<T, A>) {
    dx = grads.x;
    dw = grads.w;
  } else {
    dx = scratch.Take<A>(chunk * B * I);
    dw = scratch.Take<A>((I + H) * G);
  }
  Bf16ChunkProducts bf16_products;
  if (bf16_dot) bf16_products.Init(d, scratch, dims, chunk * B, Bf16Bits(in.w));
  // dx = dgates·Wxᵀ from Wxᵀ [G, I], transposed once where the products reading Wx [I, G]
  // transposed would transpose it several times (TransposeOnceFor; the same sums). One product
  // per chunk, k = H per gate in place (then the products are four times smaller).
  A* w_x_t = nullptr;
  if (!bf16_dot && TransposeOnceFor(d, chunk * B, I, whole ? H : G)) {
    w_x_t = scratch.Take<A>(G * I);
  }

  // The per-step product dh = dgates_{t+1}·Whᵀ wants step t+1's dgates as one [B, 4H] block:
  // the chunk's own rows, or in place, where the gates are four buffers, one of two
  // alternating staging blocks. After a whole-sequence sweep the products overwrite all of
  // w_grad and x_grad's first L·B·I values (its rest is already zero), so until then those
  // can hold the packed Whᵀ and the staging blocks, where they fit.
  A* staging = nullptr;
  if (whole) staging = L * I >= 2 * G ? dx : scratch.Take<A>(2 * B * G);
  auto step_dgates = [&](int64_t t, int64_t t0) {
    return whole ? staging + t % 2 * B * G : dgates_chunk + (t - t0) * B * G;
  };
  // Slice u's operand of the per-step dh product: its rows of Wh, as Whᵀ [G, n], packed once
  // (or read in place at batches of a few rows: PackFor). Or split by batch rows (SplitLoop).
  const LoopSplit split = SplitTimeLoop<A>(d, B, H, L);
  const SlicePacking packing(UnitSlices(H, split.max_slices(d)), G, 1,
                             PackFor(B, L, /*transposed_source=*/true, kPackBackwardMinSteps));
  const std::vector<int64_t>& bounds = packing.bounds();
  A* wt_packed = dw;
  if (!whole || packing.size() > (I + H) * G) wt_packed = scratch.Take<A>(packing.size());
  if (scratch.counting() || !scratch.ok()) return scratch.ok();

  A* db = sums;
  A* peep_sums = sums + G;  // [3H]: wci, wcf, wco
  Fill(d, sums, G + 3 * H, A(0));
  A* dw_h = dw + I * G;
  packing.Pack(d, H, w_h, 1, G, wt_packed);
  if (w_x_t != nullptr) TransposeInto(d, I, G, w_x, G, w_x_t, I);
  if (whole) in_place_backward_runs.fetch_add(1, std::memory_order_relaxed);

  // Reverse sweep, one phase per step: each unit slice first completes its columns of
  // dh = dgates_{t+1}·Whᵀ (its rows of Wh), then the fused element-wise pass of its units,
  // which reads only its own columns of dh and dc. Nothing is carried into the last step;
  // a last phase per chunk completes the dh carried into the next chunk. After each chunk
  // its whole-chunk products: dx = dgates·Wxᵀ, dWx += xᵀ·dgates, dWh += h_{t-1}ᵀ·dgates,
  // db += Σ dgates.
  Fill(d, dc, step, A(0));
  Fill(d, dh, step, A(0));
  const bool direct = out_grads.i != nullptr;
  for (int64_t t1 = L; t1 > 0;) {
    const int64_t t0 = std::max<int64_t>(0, t1 - chunk), steps = t1 - t0, rows = steps * B;
    const bool first = t1 == L;  // the first chunk of the sweep writes dW instead of adding
    const GateMatrix<A*> dgates =
        whole ? in_place.Row(t0 * B) : GateMatrix<A*>::Interleaved(dgates_chunk, H);
    // (Phase `steps` only completes dh, which is carried into step t0 - 1.)
    RunLoop(d, split, steps + 1, packing.slices(), [&](int64_t phase, int u, int64_t b0,
                                                       int64_t b1) {
      const int64_t t = t1 - 1 - phase, j0 = bounds[u], j1 = bounds[u + 1];
      if (phase > 0) {
        packing.Product(u, b1 - b0, step_dgates(t + 1, t0) + b0 * G, G, wt_packed, H, w_h,
                        int64_t{1}, G, dh + b0 * H + j0, H);
      }
      if (phase == steps) return;
      const T* cs_prev = t == 0 ? in.cs_prev : act.cs + (t - 1) * step;
      BackwardUnitsFor<T, A>(attrs, direct, b0, b1, j0, j1, H, peep, AtStep(act, t, step),
                             cs_prev, AtStep(out_grads, t, step), dc, dh,
                             dgates.Row((t - t0) * B), whole ? step_dgates(t, t0) : nullptr,
                             dc);
    });
    A* dx_rows = std::is_same_v<T, A> ? dx + t0 * B * I : dx;
    if (bf16_dot) {
      if constexpr (std::is_same_v<A, float>) {
        bf16_products.Run(d, t0, rows, dgates_chunk, Bf16Bits(in.x), Bf16Bits(in.h_prev),
                          Bf16Bits(act.h), first, dx_rows, dw);
      }
    } else {
      ForGateBlocks(dgates, H, [&](const A* dk, int64_t col0, int64_t width) {
        const int64_t ld = dgates.ld;
        const bool w_x_in_place = w_x_t == nullptr;  // (then read transposed)
        Gemm(d, false, w_x_in_place, rows, I, width, dk, ld,
             w_x_in_place ? w_x + col0 : w_x_t + col0 * I, w_x_in_place ? G : I, col0 > 0,
             dx_rows, I);
        Gemm(d, true, false, I, width, rows, x + t0 * B * I, I, dk, ld, !first, dw + col0, G,
             gemm::Sum::kLong);
        // The states the chunk's steps started from: h_{t0-1}.. (contiguous), or for the
        // chunk that starts at step 0, h_prev and then h_0..
        if (t0 > 0) {
          Gemm(d, true, false, H, width, rows, h_seq + (t0 - 1) * step, H, dk, ld, !first,
               dw_h + col0, G, gemm::Sum::kLong);
        } else {
          Gemm(d, true, false, H, width, B, h_prev, H, dk, ld, !first, dw_h + col0, G);
          Gemm(d, true, false, H, width, rows - B, h_seq, H, dk + B * ld, ld, true,
               dw_h + col0, G, gemm::Sum::kLong);
        }
      });
    }
    if constexpr (!std::is_same_v<T, A>) Convert(d, dx, grads.x + t0 * B * I, rows * I);
    ForGateBlocks(dgates, H, [&](const A* dk, int64_t col0, int64_t width) {
      ReduceRows<A>(d, rows, width, [&](int64_t r, int64_t j) { return dk[r * dgates.ld + j]; },
                    db + col0, /*accumulate=*/true);
    });
    if (attrs.use_peephole) {
      // dgates row r is step t0 + r / B, whose cs_prev is (t == 0 ? cs_prev : cs[t-1]).
      auto cs_prev_of = [&](int64_t r) {
        const int64_t k = t0 * B + r;
        return k < B ? in.cs_prev + k * H : act.cs + (k - B) * H;
      };
      auto cs_of = [&](int64_t r) { return act.cs + (t0 * B + r) * H; };
      AddPeepholeGrads<T, A>(d, attrs, rows, H, dgates, cs_prev_of, cs_of, peep_sums);
    }
    t1 = t0;
  }
  Convert(d, dc, grads.cs_prev, step);
  Convert(d, dh, grads.h_prev, step);
  if constexpr (!std::is_same_v<T, A>) Convert(d, dw, grads.w, (I + H) * G);
  Convert(d, db, grads.b, G);
  if (attrs.use_peephole) {
    Convert(d, peep_sums, grads.wci, H);
    Convert(d, peep_sums + H, grads.wcf, H);
    Convert(d, peep_sums + 2 * H, grads.wco, H);
  }
  return true;
}

template <typename T>
bool CellBackwardWalk(const CPUDevice& d, Scratch& scratch, const LstmDims& dims,
                      const LstmAttrs& attrs, const LstmInputs<T>& in,
                      const LstmActivations<const T*>& act,
                      const LstmActivations<const T*>& out_grads, T* cs_prev_grad, T* dgates_out,
                      T* wci_grad, T* wcf_grad, T* wco_grad) {
  using A = AccFor<T>;
  const int64_t B = dims.batch, H = dims.cell, step = B * H;
  if (step == 0) {
    if (attrs.use_peephole && !scratch.counting()) {
      for (T* p : {wci_grad, wcf_grad, wco_grad}) Fill(d, p, H, T(0));
    }
    return true;
  }
  Peepholes<T, A> peep;
  peep.Init(d, scratch, attrs, in, H);
  A* dgates = scratch.Take<A>(4 * step);
  A* dc = scratch.Take<A>(step);
  A* zeros = scratch.Take<A>(step);
  A* sums = attrs.use_peephole ? scratch.Take<A>(3 * H) : nullptr;  // [3H]: wci, wcf, wco
  if (scratch.counting() || !scratch.ok()) return scratch.ok();
  Fill(d, zeros, step, A(0));
  ParallelFor(d, B, H * 10 * sizeof(T), H * 20.0, [&](int64_t begin, int64_t end) {
    BackwardUnitsFor<T, A>(attrs, out_grads.i != nullptr, begin, end, 0, H, H, peep, act,
                           in.cs_prev, out_grads, zeros, zeros,
                           GateMatrix<A*>::Interleaved(dgates, H), nullptr, dc);
  });
  Convert(d, dgates, dgates_out, 4 * step);
  Convert(d, dc, cs_prev_grad, step);
  if (attrs.use_peephole) {
    Fill(d, sums, 3 * H, A(0));
    auto cs_prev_of = [&](int64_t r) { return in.cs_prev + r * H; };
    auto cs_of = [&](int64_t r) { return act.cs + r * H; };
    AddPeepholeGrads<T, A>(d, attrs, B, H, GateMatrix<const A*>::Interleaved(dgates, H),
                           cs_prev_of, cs_of, sums);
    Convert(d, sums, wci_grad, H);
    Convert(d, sums + H, wcf_grad, H);
    Convert(d, sums + 2 * H, wco_grad, H);
  }
  return true;
}

template <typename T>
bool BackwardGradWalk(const CPUDevice& d, Scratch& scratch, const LstmDims& dims,
                      const LstmAttrs& attrs, int64_t seq_len_max, const LstmInputs<T>& in,
                      const LstmActivations<const T*>& act,
                      const LstmActivations<const T*>& out_grads,
                      const LstmInputGrads<const T>& cot, const LstmBackwardGrads<T>& grads) {
  using A = AccFor<T>;
  const int64_t B = dims.batch, I = dims.input, H = dims.cell, G = 4 * H, L = seq_len_max;
  const int64_t step = B * H, seq = L * step;
  const bool nothing_ran = L == 0 || step == 0;
  auto sequences = [](const auto& set) {  // a set's seven pointers, in order
    return std::vector{set.i, set.cs, set.f, set.o, set.ci, set.co, set.h};
  };

  if (!scratch.counting()) {
    // Steps at or past seq_len_max take part in nothing: their results are zero; so is b's.
    Fill(d, grads.inputs.x + L * B * I, (dims.time - L) * B * I, T(0));
    for (const auto* set : {&grads.act, &grads.out_grads}) {
      for (T* p : sequences(*set)) Fill(d, p + seq, (dims.time - L) * step, T(0));
    }
    Fill(d, grads.inputs.b, G, T(0));
    if (nothing_ran) {
      const LstmInputGrads<T>& g = grads.inputs;
      Fill(d, g.x, L * B * I, T(0));
      for (T* p : {g.cs_prev, g.h_prev}) Fill(d, p, step, T(0));
      Fill(d, g.w, (I + H) * G, T(0));
      for (T* p : {g.wci, g.wcf, g.wco}) Fill(d, p, H, T(0));
      for (const auto* set : {&grads.act, &grads.out_grads}) {
        for (T* p : sequences(*set)) Fill(d, p, seq, T(0));
      }
    }
  }
  if (nothing_ran) return true;

  // Every input in A (the buffers themselves for float and double).
  auto acc = [&](const T* p, int64_t n) { return AsAcc<A>(d, scratch, p, n); };
  const A *x = acc(in.x, L * B * I), *cs_prev = acc(in.cs_prev, step);
  const A *h_prev = acc(in.h_prev, step), *w = acc(in.w, (I + H) * G);
  const A* w_h = w == nullptr ? nullptr : w + I * G;
  Peepholes<T, A> peep;
  peep.Init(d, scratch, attrs, in, H);
  LstmActivations<const A*> a{}, og{};
  const A** a_seq[7] = {&a.i, &a.cs, &a.f, &a.o, &a.ci, &a.co, &a.h};
  const A** og_seq[7] = {&og.i, &og.cs, &og.f, &og.o, &og.ci, &og.co, &og.h};
  const std::vector<const T*> act_in = sequences(act), og_in = sequences(out_grads);
  for (int k = 0; k < 7; ++k) {
    *a_seq[k] = acc(act_in[k], seq);
    *og_seq[k] = acc(og_in[k], seq);
  }
  const A *cot_x = acc(cot.x, L * B * I), *cot_cs_prev = acc(cot.cs_prev, step);
  const A *cot_h_prev = acc(cot.h_prev, step), *cot_w = acc(cot.w, (I + H) * G);
  const A* cot_b = acc(cot.b, G);
  const A *cot_wci = nullptr, *cot_wcf = nullptr, *cot_wco = nullptr;
  if (attrs.use_peephole) {
    cot_wci = acc(cot.wci, H);
    cot_wcf = acc(cot.wcf, H);
    cot_wco = acc(cot.wco, H);
  }

  // The results in A.
  ResultsInAcc<T, A> result(scratch);
  A *r_x = result(grads.inputs.x, L * B * I), *r_cs_prev = result(grads.inputs.cs_prev, step);
  A *r_h_prev = result(grads.inputs.h_prev, step), *r_w = result(grads.inputs.w, (I + H) * G);
  LstmActivations<A*> r_act{}, r_og{};
  A** r_act_seq[7] = {&r_act.i, &r_act.cs, &r_act.f, &r_act.o, &r_act.ci, &r_act.co, &r_act.h};
  A** r_og_seq[7] = {&r_og.i, &r_og.cs, &r_og.f, &r_og.o, &r_og.ci, &r_og.co, &r_og.h};
  const std::vector<T*> act_out = sequences(grads.act), og_out = sequences(grads.out_grads);
  for (int k = 0; k < 7; ++k) {
    *r_act_seq[k] = result(act_out[k], seq);
    *r_og_seq[k] = result(og_out[k], seq);
  }

  // The backward's dgates and total state gradients of every step, the cotangents of dgates,
  // the carried state gradients and their cotangent, the peephole weights' sums.
  A* dgates = scratch.Take<A>(L * B * G);
  A* dgates_cot = scratch.Take<A>(L * B * G);
  A* dh_seq = scratch.Take<A>(seq);
  A* dcs_seq = scratch.Take<A>(seq);
  A* carry_c = scratch.Take<A>(step);
  A* carry_h = scratch.Take<A>(step);
  A* cs_prev_grad_cot = scratch.Take<A>(step);
  A* peep_sums = scratch.Take<A>(3 * H);  // wci, wcf, wco
  if (scratch.counting() || !scratch.ok()) return scratch.ok();

  const GateBlocks blk = BlocksOf(attrs.layout);
  const bool use_peephole = attrs.use_peephole;
  // A set's pointers at step t, batch row b: the per-unit loops below index plain local
  // pointers, so they vectorise.
  auto row_of = [&](const auto& set, int64_t t, int64_t b) {
    return AtStep(AtStep(set, t, step), b, H);
  };
  auto state_before = [&](int64_t t) { return t == 0 ? cs_prev : a.cs + (t - 1) * step; };
  // Element-wise passes run over unit ranges [j0, j1) of every batch row, so each unit's
  // peephole sums have one writer.
  auto for_units = [&](double cycles_per_row, auto fn) {
    ParallelFor(d, H, B * 40.0 * sizeof(A), B * cycles_per_row, [&](int64_t j0, int64_t j1) {
      for (int64_t b = 0; b < B; ++b) fn(b, j0, j1);
    });
  };

  // 1. The backward again, keeping every step's dgates and total dh, dcs (docs/block_lstm.md §6).
  Fill(d, carry_c, step, A(0));
  Fill(d, carry_h, step, A(0));
  WithFlags(use_peephole, [&](auto peephole) {
    constexpr bool kPeephole = decltype(peephole)::value;
    for (int64_t t = L - 1; t >= 0; --t) {
      A* dg = dgates + t * B * G;
      const A* cs_before = state_before(t);
      for_units(60.0, [&](int64_t b, int64_t j0, int64_t j1) {
        const int64_t e0 = t * step + b * H;
        const LstmActivations<const A*> act_r = row_of(a, t, b), og_r = row_of(og, t, b);
        const A* csb = cs_before + b * H;
        A *c_carry = carry_c + b * H, *h_carry = carry_h + b * H;
        A *dh_r = dh_seq + e0, *dcs_r = dcs_seq + e0;
        A *d_i = dg + b * G + blk.i * H, *d_c = dg + b * G + blk.c * H;
        A *d_f = dg + b * G + blk.f * H, *d_o = dg + b * G + blk.o * H;
#pragma GCC ivdep
        for (int64_t j = j0; j < j1; ++j) {
          const A dh = h_carry[j] + og_r.h[j], dcs = c_carry[j] + og_r.cs[j];
          dh_r[j] = dh;
          dcs_r[j] = dcs;
          const CellGradients<A> g = CellBackward<A>(
              kPeephole, ActivationsAt(act_r, j), csb[j], kPeephole ? peep.wci[j] : A(0),
              kPeephole ? peep.wcf[j] : A(0), kPeephole ? peep.wco[j] : A(0), dcs, dh,
              DirectGradientsAt(og_r, j));
          d_i[j] = g.d_i;
          d_c[j] = g.d_c;
          d_f[j] = g.d_f;
          d_o[j] = g.d_o;
          c_carry[j] = g.cs_prev_grad;
        }
      });
      if (t > 0) Gemm(d, false, true, B, H, G, dg, G, w_h, G, false, carry_h, H);
    }
  });

  // 2. The adjoint sweep, forward in time. dgates_t's cotangent has shares from the products
  // x_grad_t = dgates_t·Wxᵀ and h carried = dgates_t·Whᵀ (cot_x_t·Wx, cotangent of the carry·Wh),
  // from w_grad = Σ [x_t; h_{t-1}]ᵀ·dgates_t ([x_t; h_{t-1}]·cot_w) and from b_grad (cot_b).
  // All but the carried one are whole-sequence products.
  // A zero cotangent is common (an HVP w.r.t. the weights leaves x_grad's zero, a gradient
  // penalty on x w_grad's): its products are skipped, found by one read.
  const int64_t rows = L * B;
  const bool cot_x_zero = AllZero(cot_x, rows * I), cot_w_zero = AllZero(cot_w, (I + H) * G);
  if (!cot_x_zero) Gemm(d, false, false, rows, G, I, cot_x, I, w, G, false, dgates_cot, G);
  if (!cot_w_zero) {
    Gemm(d, false, false, rows, G, I, x, I, cot_w, G, !cot_x_zero, dgates_cot, G);
    Gemm(d, false, false, B, G, H, h_prev, H, cot_w + I * G, G, true, dgates_cot, G);
    Gemm(d, false, false, rows - B, G, H, a.h, H, cot_w + I * G, G, true, dgates_cot + B * G,
         G);
  } else if (cot_x_zero) {
    Fill(d, dgates_cot, rows * G, A(0));
  }
  Fill(d, r_act.cs, seq, A(0));
  Fill(d, peep_sums, 3 * H, A(0));
  std::copy_n(cot_cs_prev, step, cs_prev_grad_cot);
  WithFlags(use_peephole, [&](auto peephole) {
    constexpr bool kPeephole = decltype(peephole)::value;
    for (int64_t t = 0; t < L; ++t) {
      // The cotangent of the h gradient carried into step t: the op's h_prev_grad's at t = 0,
      // else step t-1's (the cotangent of its total dh, just written as r_og.h).
      const A* carry_h_cot = t == 0 ? cot_h_prev : r_og.h + (t - 1) * step;
      A* dg_cot = dgates_cot + t * B * G;
      Gemm(d, false, false, B, G, H, carry_h_cot, H, w_h, G, true, dg_cot, G);
      const A* cs_before = state_before(t);
      A* cs_before_cot = t == 0 ? r_cs_prev : r_act.cs + (t - 1) * step;
      for_units(120.0, [&](int64_t b, int64_t j0, int64_t j1) {
        const int64_t e0 = t * step + b * H;
        const LstmActivations<const A*> act_r = row_of(a, t, b), og_r = row_of(og, t, b);
        const LstmActivations<A*> r_act_r = row_of(r_act, t, b), r_og_r = row_of(r_og, t, b);
        const A *dh_r = dh_seq + e0, *dcs_r = dcs_seq + e0, *csb = cs_before + b * H;
        A *csb_cot = cs_before_cot + b * H, *c_cot = cs_prev_grad_cot + b * H;
        const A *g_i = dg_cot + b * G + blk.i * H, *b_i = cot_b + blk.i * H;
        const A *g_c = dg_cot + b * G + blk.c * H, *b_c = cot_b + blk.c * H;
        const A *g_f = dg_cot + b * G + blk.f * H, *b_f = cot_b + blk.f * H;
        const A *g_o = dg_cot + b * G + blk.o * H, *b_o = cot_b + blk.o * H;
        A *sum_ci = peep_sums, *sum_cf = peep_sums + H, *sum_co = peep_sums + 2 * H;
#pragma GCC ivdep
        for (int64_t j = j0; j < j1; ++j) {
          const CellBackwardCotangents<A> r = CellBackwardAdjoint<A>(
              kPeephole, ActivationsAt(act_r, j), csb[j], kPeephole ? peep.wci[j] : A(0),
              kPeephole ? peep.wcf[j] : A(0), kPeephole ? peep.wco[j] : A(0), dcs_r[j],
              dh_r[j], DirectGradientsAt(og_r, j),
              {g_i[j] + b_i[j], g_c[j] + b_c[j], g_f[j] + b_f[j], g_o[j] + b_o[j], c_cot[j]},
              kPeephole ? cot_wci[j] : A(0), kPeephole ? cot_wcf[j] : A(0),
              kPeephole ? cot_wco[j] : A(0));
          StoreCotangentsAt(r, r_act_r, r_og_r, j);
          csb_cot[j] = t == 0 ? r.cs_prev : csb_cot[j] + r.cs_prev;
          c_cot[j] = r.dcs;
          if constexpr (kPeephole) {
            sum_ci[j] += r.wci;
            sum_cf[j] += r.wcf;
            sum_co[j] += r.wco;
          }
        }
      });
    }
  });

  // 3. The products' other shares: w from x_grad and the carried h (w_grad's transposes), x and
  // h from w_grad.
  if (cot_x_zero) {
    Fill(d, r_w, I * G, A(0));
  } else {
    Gemm(d, true, false, I, G, rows, cot_x, I, dgates, G, false, r_w, G, gemm::Sum::kLong);
  }
  A* r_w_h = r_w + I * G;
  Gemm(d, true, false, H, G, B, cot_h_prev, H, dgates, G, false, r_w_h, G);
  Gemm(d, true, false, H, G, rows - B, r_og.h, H, dgates + B * G, G, true, r_w_h, G,
       gemm::Sum::kLong);
  if (cot_w_zero) {
    Fill(d, r_x, rows * I, A(0));
    Fill(d, r_h_prev, step, A(0));
    Fill(d, r_act.h, seq - step, A(0));
  } else {
    Gemm(d, false, true, rows, I, G, dgates, G, cot_w, G, false, r_x, I);
    Gemm(d, false, true, B, H, G, dgates, G, cot_w + I * G, G, false, r_h_prev, H);
    Gemm(d, false, true, rows - B, H, G, dgates + B * G, G, cot_w + I * G, G, false, r_act.h, H);
  }
  Fill(d, r_act.h + seq - step, step, A(0));  // the last step's h feeds no product
  result.Finish(d);
  const LstmInputGrads<T>& g = grads.inputs;
  if (use_peephole) {
    Convert(d, peep_sums, g.wci, H);
    Convert(d, peep_sums + H, g.wcf, H);
    Convert(d, peep_sums + 2 * H, g.wco, H);
  } else {
    for (T* p : {g.wci, g.wcf, g.wco}) Fill(d, p, H, T(0));
  }
  return true;
}

}  // namespace

template <typename T>
size_t LstmForwardScratchBytes(const CPUDevice& d, const LstmDims& dims, const LstmAttrs& attrs,
                               int64_t seq_len_max) {
  Scratch counter = Scratch::Counter();
  ForwardWalk<T>(d, counter, dims, attrs, seq_len_max, {}, {});
  return counter.bytes();
}

template <typename T>
bool LstmForward(const CPUDevice& d, const LstmDims& dims, const LstmAttrs& attrs,
                 int64_t seq_len_max, const LstmInputs<T>& in, const LstmActivations<T*>& out,
                 void* scratch, size_t scratch_bytes) {
  Scratch carver(scratch, scratch_bytes);
  return ForwardWalk<T>(d, carver, dims, attrs, seq_len_max, in, out);
}

template <typename T>
size_t LstmBackwardScratchBytes(const CPUDevice& d, const LstmDims& dims, const LstmAttrs& attrs,
                                int64_t seq_len_max, const ReusableGates<T>* reuse) {
  Scratch counter = Scratch::Counter();
  BackwardWalk<T>(d, counter, dims, attrs, seq_len_max, {}, {}, {}, {}, reuse);
  return counter.bytes();
}

template <typename T>
bool LstmBackward(const CPUDevice& d, const LstmDims& dims, const LstmAttrs& attrs,
                  int64_t seq_len_max, const LstmInputs<T>& in,
                  const LstmActivations<const T*>& act,
                  const LstmActivations<const T*>& out_grads, const LstmInputGrads<T>& grads,
                  const ReusableGates<T>* reuse, void* scratch, size_t scratch_bytes) {
  Scratch carver(scratch, scratch_bytes);
  return BackwardWalk<T>(d, carver, dims, attrs, seq_len_max, in, act, out_grads, grads, reuse);
}

template <typename T>
size_t LstmCellBackwardScratchBytes(const CPUDevice& d, const LstmDims& dims,
                                    const LstmAttrs& attrs) {
  Scratch counter = Scratch::Counter();
  CellBackwardWalk<T>(d, counter, dims, attrs, {}, {}, {}, nullptr, nullptr, nullptr, nullptr,
                      nullptr);
  return counter.bytes();
}

template <typename T>
bool LstmCellBackward(const CPUDevice& d, const LstmDims& dims, const LstmAttrs& attrs,
                      const LstmInputs<T>& in, const LstmActivations<const T*>& act,
                      const LstmActivations<const T*>& out_grads, T* cs_prev_grad, T* dgates,
                      T* wci_grad, T* wcf_grad, T* wco_grad, void* scratch,
                      size_t scratch_bytes) {
  Scratch carver(scratch, scratch_bytes);
  return CellBackwardWalk<T>(d, carver, dims, attrs, in, act, out_grads, cs_prev_grad, dgates,
                             wci_grad, wcf_grad, wco_grad);
}

template <typename T>
size_t LstmBackwardGradScratchBytes(const CPUDevice& d, const LstmDims& dims,
                                    const LstmAttrs& attrs, int64_t seq_len_max) {
  Scratch counter = Scratch::Counter();
  BackwardGradWalk<T>(d, counter, dims, attrs, seq_len_max, {}, {}, {}, {}, {});
  return counter.bytes();
}

template <typename T>
bool LstmBackwardGrad(const CPUDevice& d, const LstmDims& dims, const LstmAttrs& attrs,
                      int64_t seq_len_max, const LstmInputs<T>& in,
                      const LstmActivations<const T*>& act,
                      const LstmActivations<const T*>& out_grads,
                      const LstmInputGrads<const T>& cot, const LstmBackwardGrads<T>& grads,
                      void* scratch, size_t scratch_bytes) {
  Scratch carver(scratch, scratch_bytes);
  return BackwardGradWalk<T>(d, carver, dims, attrs, seq_len_max, in, act, out_grads, cot, grads);
}

int64_t InPlaceBackwardRuns() { return in_place_backward_runs.load(std::memory_order_relaxed); }

#define TF_LSTM_OPS_INSTANTIATE(T)                                                              \
  template size_t LstmForwardScratchBytes<T>(const CPUDevice&, const LstmDims&,                \
                                             const LstmAttrs&, int64_t);                        \
  template bool LstmForward<T>(const CPUDevice&, const LstmDims&, const LstmAttrs&, int64_t,   \
                               const LstmInputs<T>&, const LstmActivations<T*>&, void*, size_t); \
  template size_t LstmBackwardScratchBytes<T>(const CPUDevice&, const LstmDims&,               \
                                              const LstmAttrs&, int64_t,                        \
                                              const ReusableGates<T>*);                          \
  template bool LstmBackward<T>(const CPUDevice&, const LstmDims&, const LstmAttrs&, int64_t,  \
                                const LstmInputs<T>&, const LstmActivations<const T*>&,         \
                                const LstmActivations<const T*>&, const LstmInputGrads<T>&,     \
                                const ReusableGates<T>*, void*, size_t);                         \
  template size_t LstmCellBackwardScratchBytes<T>(const CPUDevice&, const LstmDims&,           \
                                                  const LstmAttrs&);                            \
  template bool LstmCellBackward<T>(const CPUDevice&, const LstmDims&, const LstmAttrs&,       \
                                    const LstmInputs<T>&, const LstmActivations<const T*>&,     \
                                    const LstmActivations<const T*>&, T*, T*, T*, T*, T*, void*, \
                                    size_t);                                                    \
  template size_t LstmBackwardGradScratchBytes<T>(const CPUDevice&, const LstmDims&,           \
                                                  const LstmAttrs&, int64_t);                   \
  template bool LstmBackwardGrad<T>(const CPUDevice&, const LstmDims&, const LstmAttrs&,       \
                                    int64_t, const LstmInputs<T>&,                              \
                                    const LstmActivations<const T*>&,                           \
                                    const LstmActivations<const T*>&,                           \
                                    const LstmInputGrads<const T>&, const LstmBackwardGrads<T>&, \
                                    void*, size_t);
TF_LSTM_OPS_INSTANTIATE(Eigen::half)
TF_LSTM_OPS_INSTANTIATE(Eigen::bfloat16)
TF_LSTM_OPS_INSTANTIATE(float)
TF_LSTM_OPS_INSTANTIATE(double)
#undef TF_LSTM_OPS_INSTANTIATE

}  // namespace cpu
}  // namespace tf_lstm_ops
