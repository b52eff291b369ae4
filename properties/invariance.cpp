// Metamorphic invariances: PermutationEquivariance, KeyTranslationInvariance,
// LayoutInvariance, Determinism.

#include <cmath>
#include <numeric>

#include "attncheck/dtype.h"
#include "properties/case_context.h"

namespace attncheck {
namespace {

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
  // A sink is per head: no permutation moves it.
  gen::GenSpec spec = gen::with_sinks(ctx.spec());
  spec.features &= ~(ATTNCHECK_FEATURE_CAUSAL | ATTNCHECK_FEATURE_WINDOW);  // positions
  const Problem p = *gen::problem(spec);
  return {p, {{"query_permutation", gen::permutation(p.tq)}, {"key_permutation", gen::permutation(p.tk)}}};
}

void validate_permutation(const Fixture& f) {
  const ArgsCheck a(f.args, f.problem, {"key_permutation", "query_permutation"});
  a.required({"key_permutation", "query_permutation"});
  a.permutation("key_permutation", f.problem.tk, "tk");
  a.permutation("query_permutation", f.problem.tq, "tq");
}

void judge_permutation(CaseContext& ctx, const Case& c) {
  const Problem& p = c.problem;
  const auto qp = c.args.at("query_permutation").get<std::vector<int64_t>>();
  const auto kp = c.args.at("key_permutation").get<std::vector<int64_t>>();
  ctx.screen(p);
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
  compare_array(cmp, ArrayKind::out, p, expected, rp.out, tol, CompareMode::pairwise,
                "permuted problem");
  ctx.expect(cmp, "outputs are not permutation equivariant");
}

// p with w added to every stored key some sequence reads.
Problem translated(const Problem& p, const std::vector<double>& w) {
  Problem shifted = p;
  for_each_read_key(p, [&](int64_t b, int64_t g, int64_t j) {
    for (int64_t t = 0; t < p.dk; ++t)
      shifted.k.data[p.kv_offset(p.k, b, g, j, t)] += w.at(static_cast<size_t>(t));
  });
  return shifted;
}

// The translation of K in a block format (SPEC 1.2). k + w is a block only
// where every key row's block c holds w's 32 values on its own scale, which
// drawn keys (each row its own scales) almost never do. So K is first
// re-quantized to one f16 scale S_c per block column shared by every key
// row, its integers within half the format's range (q8_0: |n| <= 63; q4_0:
// |n| <= 3), a deterministic function of the drawn problem, so shrinking
// and replay see the same keys; then w_t = m_t S_c with |m_t| up to the
// other half (64; 4) keeps every k + w = S_c (n + m_t) a block. |w| is at
// most about the largest |k| of its column: huge keys (scales near f16's
// range) still pass the exp-overflow point. Shrinks towards w = 0.
std::vector<double> block_translation(Problem& p, DType kv) {
  const int levels = block_int_max(kv) / 2;
  const int room = block_int_max(kv) - levels;
  const std::vector<double> scales = share_block_scales(p, false, levels);
  std::vector<double> w(static_cast<size_t>(p.dk));
  for (int64_t t = 0; t < p.dk; ++t) {
    const int m = *rc::gen::inRange(0, room + 1);
    const double sign = *rc::gen::arbitrary<bool>() ? -1.0 : 1.0;
    w[static_cast<size_t>(t)] = sign * m * scales[static_cast<size_t>(t / kBlockValues)];
  }
  return w;
}

Case draw_translation(CaseContext& ctx) {
  // Packed and paged problems, descales and mixed formats in half the
  // cases (SPEC 2: not a sink, which no key translation moves): their
  // short sequences and exact fp8 arithmetic seldom move a rounding, so
  // problems without serving parts keep the other half (and are what shrinking tends
  // to). On small problems only: at real sizes a packed or paged problem's
  // reference would be the certified oracle.
  const bool serving = !ctx.spec().size && *rc::gen::arbitrary<bool>();
  gen::GenSpec spec = serving ? gen::with_serving_parts(ctx.spec()) : ctx.spec();
  spec.serving &= ~ATTNCHECK_FEATURE_SINK;
  spec.features &= ~ATTNCHECK_FEATURE_SOFTCAP;  // tanh is not shift invariant
  Problem p = *gen::problem(spec);
  const DType kv = p.kv_dtype.value_or(p.dtype);
  if (is_block_format(kv)) {
    std::vector<double> w = block_translation(p, kv);
    return {p, {{"w", w}}};
  }
  // w_t = +-2^e, e up to 8: q.w passes the exp-overflow point of f64 for
  // larger q, so a missing max subtraction shows. Shrinks towards w = +1.
  // (With a k descale the logical keys move by w k_descale: a translation
  // too.)
  //
  // Scores stored or accumulated in a 16-bit format (spec.score_storage)
  // have a first-order range of a few units (SPEC 4: u |s| <= 0.01), which
  // the generator's keys fill to a quarter at most (gen/dense.cpp: the huge
  // regime). There |w_t| is at most twice the largest |k|, so |k + w| <= 3
  // max |k| and translated scores stay within three quarters of the range:
  // judgeable rather than discarded as ill-conditioned (torch_sdpa_bf16
  // discarded most cases before).
  int e_cap = 8;
  if (spec.score_storage) {
    double k_max = 0;
    for_each_read_key(p, [&](int64_t b, int64_t g, int64_t j) {
      for (int64_t t = 0; t < p.dk; ++t) k_max = std::max(k_max, std::fabs(p.k_at(b, g, j, t)));
    });
    if (k_max > 0) e_cap = std::min(e_cap, std::ilogb(k_max) + 1);
  }
  const int e_low = std::min(0, e_cap - 8);
  std::vector<double> w(static_cast<size_t>(p.dk));
  for (int64_t t = 0; t < p.dk; ++t) {
    int e = std::min(*rc::gen::inRange(0, 9), e_cap);
    const double sign = *rc::gen::arbitrary<bool>() ? -1.0 : 1.0;
    // The largest e <= the drawn one for which every stored k_jt + w_t is
    // exact in the key format.
    for (; e >= e_low; --e) {
      bool exact = true;
      for_each_read_key(p, [&](int64_t b, int64_t g, int64_t j) {
        exact = exact && representable(kv, p.k_at(b, g, j, t) + sign * std::ldexp(1.0, e));
      });
      if (exact) break;
    }
    w[static_cast<size_t>(t)] = e >= e_low ? sign * std::ldexp(1.0, e) : 0.0;
  }
  return {p, {{"w", w}}};
}

void judge_translation(CaseContext& ctx, const Case& c) {
  const Problem& p = c.problem;
  ctx.screen(p);
  const auto w = c.args.at("w").get<std::vector<double>>();
  const Problem shifted = translated(p, w);
  // K in a block format (SPEC 1.2): the draw keeps k + w blocks
  // (block_translation); a fixture that does not is refused at load, and
  // rounding it back would make it no translation.
  if (!kv_blocks_exact(shifted)) ctx.discard("k + w is no block of the key format");
  const ForwardResult r = ctx.call_ok(p);
  const ForwardResult rs = ctx.call_ok(shifted);
  const auto [o, t] = ctx.reference(p);
  const auto [os, ts] = ctx.reference(shifted);
  // Both answers approximate the same exact values (the shift adds q_i.w to
  // every score of row i, which moves lse), each within its own problem's
  // tolerance.
  Comparison cmp;
  for (ArrayKind kind : returned_kinds(ctx.info(), {ArrayKind::out, ArrayKind::weights})) {
    if (array_of(r, kind).empty()) continue;  // no weights for packed queries
    compare_array(cmp, kind, p, array_of(r, kind), array_of(rs, kind),
                  pairwise_tolerance(array_of(t, kind), array_of(ts, kind)),
                  CompareMode::tolerance, "keys translated by w");
  }
  ctx.expect(cmp, "adding one vector to every key changes the result");
}

Case draw_layout(CaseContext& ctx) {
  const Problem p = *gen::problem(gen::with_sinks(ctx.spec()));
  const int layout = *rc::gen::inRange(0, 3);
  return {p, {{"layout", layout == 0 ? "contiguous" : layout == 1 ? "bthd" : "padded"}}};
}

void judge_layout(CaseContext& ctx, const Case& c) {
  const Problem& p = c.problem;
  const std::string name = c.args.at("layout");
  const gen::Layout layout = name == "bthd"     ? gen::Layout::bthd
                             : name == "padded" ? gen::Layout::padded
                                                : gen::Layout::contiguous;
  ctx.screen(p);
  const ForwardResult r = ctx.call_ok(p);
  const ForwardResult rl = ctx.call_ok(gen::with_layout(p, layout));
  const auto [o, t] = ctx.reference(p);
  Comparison cmp;
  compare_array(cmp, ArrayKind::out, p, r.out, rl.out, t.out, CompareMode::pairwise,
                "q, k, v laid out " + name);
  ctx.expect(cmp, "the memory layout changes the result");
}

void judge_determinism(CaseContext& ctx, const Case& c) {
  const Problem& p = c.problem;
  const ForwardResult r1 = ctx.call_ok(p);
  const ForwardResult r2 = ctx.call_ok(p);
  Comparison cmp;
  if (ctx.calls_may_differ()) {
    const auto [o, t] = ctx.reference(p);
    compare_array(cmp, ArrayKind::out, p, r1.out, r2.out, t.out, CompareMode::pairwise,
                  "second call");
  } else {
    // Whatever the first call returned, declared or not, must come back.
    for (ArrayKind kind : kForwardKinds) {
      if (array_of(r1, kind).empty()) continue;
      compare_array(cmp, kind, p, array_of(r1, kind), array_of(r2, kind), {},
                    CompareMode::bitwise, "second call");
    }
  }
  ctx.expect(cmp, "the same call twice gives different results");
}

}  // namespace

PropertyDef permutation_property() {
  return case_property("PermutationEquivariance",
                       "without causal mask or window: permuting queries permutes outputs; "
                       "permuting keys and values together leaves them unchanged",
                       100, always_applies, draw_permutation, judge_permutation,
                       validate_permutation, AtSize::some);
}

PropertyDef key_translation_property() {
  return case_property("KeyTranslationInvariance",
                       "adding one vector w to every key (exact sums) changes neither a nor o",
                       100, always_applies, draw_translation, judge_translation,
                       [](const Fixture& f) {
                         const ArgsCheck a(f.args, f.problem, {"w"});
                         a.required({"w"});
                         a.finite_numbers("w", f.problem.dk);
                         // A case the property would have discarded is
                         // refused, as ValueLinearity's are.
                         if (!kv_blocks_exact(
                                 translated(f.problem, f.args.at("w").get<std::vector<double>>())))
                           a.error("w", "not a case of KeyTranslationInvariance: k + w is no "
                                        "block of the key format");
                       },
                       AtSize::some);
}

PropertyDef layout_property() {
  return case_property("LayoutInvariance",
                       "the same logical problem in another memory layout (BHTD, BTHD, padded "
                       "strides) gives the same output",
                       100, needs_features(ATTNCHECK_FEATURE_STRIDES, "FEATURE_STRIDES"),
                       draw_layout, judge_layout, [](const Fixture& f) {
                         const ArgsCheck a(f.args, f.problem, {"layout"});
                         a.required({"layout"});
                         a.one_of("layout", {"contiguous", "bthd", "padded"});
                       },
                       AtSize::some);
}

PropertyDef determinism_property() {
  return case_property("Determinism",
                       "the same call twice gives bitwise identical results (within tolerance "
                       "for NONDETERMINISTIC implementations)",
                       100, always_applies,
                       // Every declared serving part: packed and paged
                       // outputs are compared in their own layouts.
                       [](CaseContext& ctx) {
                         return Case{*gen::problem(gen::with_serving_parts(ctx.spec()))};
                       },
                       judge_determinism, {}, AtSize::some);
}

ATTNCHECK_REGISTER_PROPERTY(60, permutation_property);
ATTNCHECK_REGISTER_PROPERTY(70, key_translation_property);
ATTNCHECK_REGISTER_PROPERTY(170, layout_property);
ATTNCHECK_REGISTER_PROPERTY(180, determinism_property);

}  // namespace attncheck
