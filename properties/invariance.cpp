// Metamorphic invariances: PermutationEquivariance, KeyTranslationInvariance,
// LayoutInvariance, Determinism.

#include <cmath>
#include <numeric>

#include "properties/harness.h"

namespace attncheck {
namespace {

std::vector<int64_t> out_shape(const Problem& p) { return {p.batch, p.heads, p.tq, p.dv}; }

// Query i of the result is query qp[i] of p; key j is key kp[j].
Problem permuted(const Problem& p, const std::vector<int64_t>& qp, const std::vector<int64_t>& kp) {
  Problem c = p.contiguous();
  const Problem src = c;
  const auto Q = [&](int64_t i) { return qp.at(static_cast<size_t>(i)); };
  const auto K = [&](int64_t j) { return kp.at(static_cast<size_t>(j)); };
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t d = 0; d < p.dk; ++d) c.q.at(b, h, i, d) = src.q.at(b, h, Q(i), d);
    for (int64_t g = 0; g < p.kv_heads; ++g)
      for (int64_t j = 0; j < p.tk; ++j) {
        for (int64_t d = 0; d < p.dk; ++d) c.k.at(b, g, j, d) = src.k.at(b, g, K(j), d);
        for (int64_t d = 0; d < p.dv; ++d) c.v.at(b, g, j, d) = src.v.at(b, g, K(j), d);
      }
    if (!p.key_valid.empty())
      for (int64_t j = 0; j < p.tk; ++j)
        c.key_valid[static_cast<size_t>(b * p.tk + j)] =
            src.key_valid[static_cast<size_t>(b * p.tk + K(j))];
  }
  auto permute_scores = [&](auto& m, const auto& s) {
    for (int64_t b = 0; b < m.batch; ++b)
      for (int64_t h = 0; h < m.heads; ++h)
        for (int64_t i = 0; i < p.tq; ++i)
          for (int64_t j = 0; j < p.tk; ++j)
            m.at(b, h, i, j, p.tq, p.tk) = s.at(b, h, Q(i), K(j), p.tq, p.tk);
  };
  if (p.mask) permute_scores(*c.mask, *src.mask);
  if (p.bias) permute_scores(*c.bias, *src.bias);
  return c;
}

Case draw_permutation(CaseContext& ctx) {
  gen::GenSpec spec = ctx.spec();
  spec.features &= ~(ATTNCHECK_FEATURE_CAUSAL | ATTNCHECK_FEATURE_WINDOW);  // positions
  const Problem p = *gen::problem(spec);
  return {p, {{"query_permutation", gen::permutation(p.tq)}, {"key_permutation", gen::permutation(p.tk)}}};
}

void judge_permutation(CaseContext& ctx, const Case& c) {
  const Problem& p = c.problem;
  const auto qp = c.args.at("query_permutation").get<std::vector<int64_t>>();
  const auto kp = c.args.at("key_permutation").get<std::vector<int64_t>>();
  const ForwardResult r = ctx.call_ok(p);
  const ForwardResult rp = ctx.call_ok(permuted(p, qp, kp));
  const auto [o, t] = ctx.reference(p);
  // Row i of the permuted answer must equal row qp[i] of the original.
  std::vector<double> expected(r.out.size()), tol(r.out.size());
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t d = 0; d < p.dv; ++d) {
          const size_t src = out_index(p, b, h, qp[static_cast<size_t>(i)], d);
          expected[out_index(p, b, h, i, d)] = r.out[src];
          tol[out_index(p, b, h, i, d)] = t.out[src];
        }
  Comparison cmp;
  add_pairwise(cmp, "out (permuted problem)", p, expected, rp.out, tol);
  ctx.expect(cmp, "outputs are not permutation equivariant");
}

Case draw_translation(CaseContext& ctx) {
  gen::GenSpec spec = ctx.spec();
  spec.features &= ~ATTNCHECK_FEATURE_SOFTCAP;  // tanh is not shift invariant
  const Problem p = *gen::problem(spec);
  // w_t = +-2^e, e up to 8: q.w passes the exp-overflow point of f64 for
  // larger q, so a missing max subtraction shows. Shrinks towards w = +1.
  std::vector<double> w(static_cast<size_t>(p.dk));
  for (int64_t t = 0; t < p.dk; ++t) {
    int e = *rc::gen::inRange(0, 9);
    const double sign = *rc::gen::arbitrary<bool>() ? -1.0 : 1.0;
    // The largest e <= the drawn one for which every k_jt + w_t is exact.
    for (; e >= 0; --e) {
      bool exact = true;
      for (int64_t b = 0; b < p.batch && exact; ++b)
        for (int64_t g = 0; g < p.kv_heads && exact; ++g)
          for (int64_t j = 0; j < p.tk && exact; ++j)
            exact = representable(p.dtype, p.k.at(b, g, j, t) + sign * std::ldexp(1.0, e));
      if (exact) break;
    }
    w[static_cast<size_t>(t)] = e >= 0 ? sign * std::ldexp(1.0, e) : 0.0;
  }
  return {p, {{"w", w}}};
}

void judge_translation(CaseContext& ctx, const Case& c) {
  const Problem& p = c.problem;
  const auto w = c.args.at("w").get<std::vector<double>>();
  Problem shifted = p;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t g = 0; g < p.kv_heads; ++g)
      for (int64_t j = 0; j < p.tk; ++j)
        for (int64_t t = 0; t < p.dk; ++t) shifted.k.at(b, g, j, t) += w.at(static_cast<size_t>(t));
  const ForwardResult r = ctx.call_ok(p);
  const ForwardResult rs = ctx.call_ok(shifted);
  const auto [o, t] = ctx.reference(p);
  const auto [os, ts] = ctx.reference(shifted);
  // Both answers approximate the same exact values (the shift adds q_i.w to
  // every score of row i), each within its own problem's tolerance.
  std::vector<double> tol(t.out.size());
  for (size_t k = 0; k < tol.size(); ++k) tol[k] = t.out[k] + ts.out[k];
  Comparison cmp;
  cmp.add("out (keys translated by w)", out_shape(p), rs.out, r.out, tol);
  if (ctx.info().has(ATTNCHECK_FEATURE_WEIGHTS)) {
    std::vector<double> wt(t.weights.size());
    for (size_t k = 0; k < wt.size(); ++k) wt[k] = t.weights[k] + ts.weights[k];
    cmp.add("weights (keys translated by w)", {p.batch, p.heads, p.tq, p.tk}, rs.weights,
            r.weights, wt);
  }
  ctx.expect(cmp, "adding one vector to every key changes the result");
}

Case draw_layout(CaseContext& ctx) {
  const Problem p = *gen::problem(ctx.spec());
  const int layout = *rc::gen::inRange(0, 3);
  return {p, {{"layout", layout == 0 ? "contiguous" : layout == 1 ? "bthd" : "padded"}}};
}

void judge_layout(CaseContext& ctx, const Case& c) {
  const Problem& p = c.problem;
  const std::string name = c.args.at("layout");
  const gen::Layout layout = name == "bthd"     ? gen::Layout::bthd
                             : name == "padded" ? gen::Layout::padded
                                                : gen::Layout::contiguous;
  const ForwardResult r = ctx.call_ok(p);
  const ForwardResult rl = ctx.call_ok(gen::with_layout(p, layout));
  const auto [o, t] = ctx.reference(p);
  Comparison cmp;
  add_pairwise(cmp, "out (q, k, v laid out " + name + ")", p, r.out, rl.out, t.out);
  ctx.expect(cmp, "the memory layout changes the result");
}

void judge_determinism(CaseContext& ctx, const Case& c) {
  const Problem& p = c.problem;
  const ForwardResult r1 = ctx.call_ok(p);
  const ForwardResult r2 = ctx.call_ok(p);
  Comparison cmp;
  if (ctx.info().has(ATTNCHECK_FEATURE_NONDETERMINISTIC)) {
    const auto [o, t] = ctx.reference(p);
    add_pairwise(cmp, "out (second call)", p, r1.out, r2.out, t.out);
  } else {
    add_bitwise_rows(cmp, "out (second call)", p, r1.out, r2.out,
                     [](int64_t, int64_t, int64_t) { return true; });
    const std::vector<double> zeros_w(r1.weights.size(), 0.0), zeros_l(r1.lse.size(), 0.0);
    if (!r1.weights.empty()) {
      cmp.add("weights (second call)", {p.batch, p.heads, p.tq, p.tk}, r2.weights, r1.weights,
              zeros_w);
    }
    if (!r1.lse.empty()) cmp.add("lse (second call)", {p.batch, p.heads, p.tq}, r2.lse, r1.lse, zeros_l);
  }
  ctx.expect(cmp, "the same call twice gives different results");
}

}  // namespace

PropertyDef permutation_property() {
  return case_property("PermutationEquivariance",
                       "without causal mask or window: permuting queries permutes outputs; "
                       "permuting keys and values together leaves them unchanged",
                       100, always_applies, draw_permutation, judge_permutation);
}

PropertyDef key_translation_property() {
  return case_property("KeyTranslationInvariance",
                       "adding one vector w to every key (exact sums) changes neither a nor o",
                       100, always_applies, draw_translation, judge_translation);
}

PropertyDef layout_property() {
  return case_property("LayoutInvariance",
                       "the same logical problem in another memory layout (BHTD, BTHD, padded "
                       "strides) gives the same output",
                       100, needs_features(ATTNCHECK_FEATURE_STRIDES, "FEATURE_STRIDES"),
                       draw_layout, judge_layout);
}

PropertyDef determinism_property() {
  return case_property("Determinism",
                       "the same call twice gives bitwise identical results (within tolerance "
                       "for NONDETERMINISTIC implementations)",
                       100, always_applies,
                       [](CaseContext& ctx) { return Case{*gen::problem(ctx.spec())}; },
                       judge_determinism);
}

}  // namespace attncheck
