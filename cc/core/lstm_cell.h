// The math of one LSTM cell for one (batch row, unit) element: forward (docs/block_lstm.md §4) and
// backward (docs/block_lstm.md §6.1). The single home of the LSTM cell equations: the CPU engines
// and the CUDA kernels of both families call these functions.
//
// `Acc` is the compute type (cc/core/precision.h). Inputs are converted to Acc before the call
// and results rounded to the storage type once, after it.
#ifndef TF_LSTM_OPS_CC_CORE_LSTM_CELL_H_
#define TF_LSTM_OPS_CC_CORE_LSTM_CELL_H_

#include <cmath>
#include <type_traits>

#include "cc/core/block_lstm_types.h"
#include "cc/core/gate_layout.h"
#include "cc/core/host_device.h"
#include "cc/core/precision.h"

namespace tf_lstm_ops {

// Per-cell constants, already converted to Acc.
template <typename Acc>
struct CellParams {
  Acc forget_bias;  // added inside the forget sigmoid (0 for V2)
  Acc cell_clip;    // clamp bound; only used when clip_active
  bool clip_active; // cell_clip attr > 0 (a NaN or non-positive attr means no clipping)
  bool use_peephole;
};

// Saved activations of one element, in the order the ops output them.
template <typename Acc>
struct CellActivations {
  Acc i, cs, f, o, ci, co, h;
};

// Forward step. g_* are the pre-activations (x·Wx + h·Wh + b) of each gate; wc* are the peephole
// weights (ignored, never read into the result, when !use_peephole: NaN there has no effect).
template <typename Acc, typename Math = ExactMath>
TF_LSTM_HOST_DEVICE inline CellActivations<Acc> CellForward(const CellParams<Acc>& p, Acc g_i,
                                                            Acc g_c, Acc g_f, Acc g_o,
                                                            Acc cs_prev, Acc wci, Acc wcf,
                                                            Acc wco) {
  // Selects, not branches: with the flags known at compile time (the CPU kernels instantiate each
  // combination) they fold away and loops over elements vectorise. An unused peephole term is
  // exactly 0 (x + 0 == x), whatever NaN or Inf the unused weights hold.
  const bool peep = p.use_peephole;
  CellActivations<Acc> a;
  a.i = Math::Sigmoid(g_i + (peep ? cs_prev * wci : Acc(0)));
  a.ci = Math::Tanh(g_c);
  a.f = Math::Sigmoid((g_f + p.forget_bias) + (peep ? cs_prev * wcf : Acc(0)));
  const Acc c = a.i * a.ci + a.f * cs_prev;
  const Acc clipped = c < -p.cell_clip ? -p.cell_clip : (c > p.cell_clip ? p.cell_clip : c);
  a.cs = p.clip_active ? clipped : c;
  a.co = Math::Tanh(a.cs);  // tanh of the clipped state
  a.o = Math::Sigmoid(g_o + (peep ? a.cs * wco : Acc(0)));  // output peephole sees the new state
  a.h = a.o * a.co;
  return a;
}

// Gradients w.r.t. the four pre-activations, and the cell state carried to the previous step.
template <typename Acc>
struct CellGradients {
  Acc d_i, d_c, d_f, d_o;  // dgates (w.r.t. pre-activations)
  Acc cs_prev_grad;        // dL/dcs_prev
};

// Gradients arriving directly at the saved activations i, f, o, ci, co of this step (zero unless
// a loss uses them; TF drops these, we propagate them). cs and h gradients are passed separately.
template <typename Acc>
struct ActivationGradients {
  Acc i, f, o, ci, co;
};

// Backward step (docs/block_lstm.md §6.1, §6.2, §6.5), in TF's evaluation order; the direct
// activation gradients `ext` are added last, so with ext = 0 the result is bit-identical to TF's
// formula. Clipping is straight-through: the gradient is not masked where the clamp was active
// (TF's defined behaviour). dcs = total dL/dcs (carried + external), dh = total dL/dh.
template <typename Acc>
TF_LSTM_HOST_DEVICE inline CellGradients<Acc> CellBackward(bool use_peephole,
                                                           const CellActivations<Acc>& a,
                                                           Acc cs_prev, Acc wci, Acc wcf, Acc wco,
                                                           Acc dcs, Acc dh,
                                                           const ActivationGradients<Acc>& ext) {
  const Acc o_slope = a.o * (Acc(1) - a.o), co_slope = Acc(1) - a.co * a.co;
  const Acc ci_slope = Acc(1) - a.ci * a.ci, f_slope = a.f * (Acc(1) - a.f);
  const Acc i_slope = a.i * (Acc(1) - a.i);
  CellGradients<Acc> g;
  g.d_o = (o_slope * dh) * a.co + o_slope * ext.o;
  Acc d_cs = ((co_slope * dh) * a.o) + dcs + co_slope * ext.co;
  d_cs = use_peephole ? d_cs + g.d_o * wco : d_cs;  // selects, not branches: see CellForward
  g.d_c = (ci_slope * d_cs) * a.i + ci_slope * ext.ci;
  g.d_f = (f_slope * d_cs) * cs_prev + f_slope * ext.f;
  g.d_i = (i_slope * d_cs) * a.ci + i_slope * ext.i;
  g.cs_prev_grad = d_cs * a.f;
  g.cs_prev_grad = use_peephole ? (g.cs_prev_grad + g.d_i * wci) + g.d_f * wcf : g.cs_prev_grad;
  return g;
}

// The adjoint of CellBackward (docs/block_lstm.md §7.2): CellBackward is linear in (dcs, dh,
// ext) and polynomial in the saved activations, so the gradient of a backward sweep w.r.t. its
// inputs runs these transposed steps forward in time. `cot` holds the cotangents of the step's
// results: of its four dgates (with every share from outside the cell already added: the
// products dgates·Wᵀ, the weight and bias sums) and of cs_prev_grad. wc*_sum are the cotangents
// of the peephole gradient sums (Σ δi·cs_prev, Σ δf·cs_prev, Σ δo·cs), whose terms live here.
template <typename Acc>
struct CellBackwardCotangents {
  Acc i, f, o, ci, co;        // of the saved activations
  Acc cs, cs_prev;            // of this step's cs and the state it started from
  Acc dcs, dh;                // of the step's total state gradients (dcs = carried + external)
  ActivationGradients<Acc> ext;
  Acc wci, wcf, wco;          // of the peephole weights (this element's share)
};

template <typename Acc>
TF_LSTM_HOST_DEVICE inline CellBackwardCotangents<Acc> CellBackwardAdjoint(
    bool use_peephole, const CellActivations<Acc>& a, Acc cs_prev, Acc wci, Acc wcf, Acc wco,
    Acc dcs, Acc dh, const ActivationGradients<Acc>& ext, CellGradients<Acc> cot, Acc wci_sum,
    Acc wcf_sum, Acc wco_sum) {
  const Acc one(1), two(2);
  const Acc o_slope = a.o * (one - a.o), co_slope = one - a.co * a.co;
  const Acc ci_slope = one - a.ci * a.ci, f_slope = a.f * (one - a.f);
  const Acc i_slope = a.i * (one - a.i);
  const bool peep = use_peephole;
  // The forward quantities of CellBackward this needs again.
  const Acc s_o = dh * a.co + ext.o, d_o = o_slope * s_o;
  const Acc s_co = dh * a.o + ext.co;
  const Acc d_cs = co_slope * s_co + dcs + (peep ? d_o * wco : Acc(0));
  const Acc s_i = d_cs * a.ci + ext.i, s_f = d_cs * cs_prev + ext.f, s_c = d_cs * a.i + ext.ci;
  const Acc d_i = i_slope * s_i, d_f = f_slope * s_f;

  CellBackwardCotangents<Acc> r;
  // The peephole sums' terms, then cs_prev_grad = d_cs·f (+ δi·wci + δf·wcf).
  cot.d_i += peep ? wci_sum * cs_prev + cot.cs_prev_grad * wci : Acc(0);
  cot.d_f += peep ? wcf_sum * cs_prev + cot.cs_prev_grad * wcf : Acc(0);
  cot.d_o += peep ? wco_sum * a.cs : Acc(0);
  r.cs = peep ? wco_sum * d_o : Acc(0);
  r.cs_prev = peep ? wci_sum * d_i + wcf_sum * d_f : Acc(0);
  r.wci = peep ? cot.cs_prev_grad * d_i : Acc(0);
  r.wcf = peep ? cot.cs_prev_grad * d_f : Acc(0);
  Acc cot_d_cs = cot.cs_prev_grad * a.f;
  r.f = cot.cs_prev_grad * d_cs;
  // δi = i'·(d_cs·ci + ext.i), δf = f'·(d_cs·cs_prev + ext.f), δci = ci'·(d_cs·i + ext.ci)
  Acc u = cot.d_i * i_slope;
  r.i = cot.d_i * s_i * (one - two * a.i);
  r.ext.i = u;
  cot_d_cs += u * a.ci;
  r.ci = u * d_cs;
  u = cot.d_f * f_slope;
  r.f += cot.d_f * s_f * (one - two * a.f);
  r.ext.f = u;
  cot_d_cs += u * cs_prev;
  r.cs_prev += u * d_cs;
  u = cot.d_c * ci_slope;
  r.ci += cot.d_c * s_c * (-two * a.ci);
  r.ext.ci = u;
  cot_d_cs += u * a.i;
  r.i += u * d_cs;
  // d_cs = co'·(dh·o + ext.co) + dcs (+ δo·wco)
  cot.d_o += peep ? cot_d_cs * wco : Acc(0);
  r.wco = peep ? cot_d_cs * d_o : Acc(0);
  u = cot_d_cs * co_slope;
  r.co = cot_d_cs * s_co * (-two * a.co);
  r.ext.co = u;
  r.dh = u * a.o;
  r.o = u * dh;
  r.dcs = cot_d_cs;
  // δo = o'·(dh·co + ext.o)
  u = cot.d_o * o_slope;
  r.o += cot.d_o * s_o * (one - two * a.o);
  r.ext.o = u;
  r.dh += u * a.co;
  r.co += u * dh;
  return r;
}

// Element k of a step's saved activations and direct output gradients ([B, H] slices of the
// sequences, in the compute type) as the functions above take them, and where the adjoint's
// cotangents of them go: what the CPU and GPU walks of BlockLSTMFullGradGrad share.
template <typename Acc>
TF_LSTM_HOST_DEVICE inline CellActivations<Acc> ActivationsAt(
    const LstmActivations<const Acc*>& act, int64_t k) {
  return {act.i[k], act.cs[k], act.f[k], act.o[k], act.ci[k], act.co[k], Acc(0)};
}
template <typename Acc>
TF_LSTM_HOST_DEVICE inline ActivationGradients<Acc> DirectGradientsAt(
    const LstmActivations<const Acc*>& og, int64_t k) {
  return {og.i[k], og.f[k], og.o[k], og.ci[k], og.co[k]};
}
// cs's cotangent accumulates (the next step adds its cs_prev share); the output gradients' cs and
// h share dcs's and dh's: each is one addend of that total.
template <typename Acc>
TF_LSTM_HOST_DEVICE inline void StoreCotangentsAt(const CellBackwardCotangents<Acc>& r,
                                                  const LstmActivations<Acc*>& r_act,
                                                  const LstmActivations<Acc*>& r_og, int64_t k) {
  r_act.i[k] = r.i;
  r_act.f[k] = r.f;
  r_act.o[k] = r.o;
  r_act.ci[k] = r.ci;
  r_act.co[k] = r.co;
  r_act.cs[k] += r.cs;
  r_og.i[k] = r.ext.i;
  r_og.f[k] = r.ext.f;
  r_og.o[k] = r.ext.o;
  r_og.ci[k] = r.ext.ci;
  r_og.co[k] = r.ext.co;
  r_og.cs[k] = r.dcs;
  r_og.h[k] = r.dh;
}

// Calls fn(std::bool_constant<a>{}, std::bool_constant<b>{}, ...) and returns its result: runtime
// flags become template arguments, so loops specialised on them carry no branches and vectorise.
template <typename Fn>
auto WithFlags(bool a, Fn fn) {
  return a ? fn(std::true_type{}) : fn(std::false_type{});
}
template <typename Fn>
auto WithFlags(bool a, bool b, Fn fn) {
  using Yes = std::true_type;
  using No = std::false_type;
  if (a) return b ? fn(Yes{}, Yes{}) : fn(Yes{}, No{});
  return b ? fn(No{}, Yes{}) : fn(No{}, No{});
}
template <typename Fn>
auto WithFlags(bool a, bool b, bool c, Fn fn) {
  return WithFlags(a, b, [&](auto a_c, auto b_c) {
    return c ? fn(a_c, b_c, std::true_type{}) : fn(a_c, b_c, std::false_type{});
  });
}

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CORE_LSTM_CELL_H_
