// PermutationEquivariance: without positions (no causal mask, no window),
// permuting queries permutes outputs, and permuting keys with their values,
// padding, mask and bias columns changes nothing.

#include <numeric>

#include "properties/harness.h"

namespace attncheck {
namespace {

// A random permutation of [0, n) that shrinks to the identity: position i
// swaps with i + r, r shrinking to 0.
std::vector<int64_t> permutation(int64_t n) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = 0; i + 1 < n; ++i) {
    const int64_t r = *rc::gen::inRange<int64_t>(0, n - i);
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(i + r)]);
  }
  return perm;
}

// Query i of the result is query qp[i] of p; key j is key kp[j].
Problem permuted(const Problem& p, const std::vector<int64_t>& qp,
                 const std::vector<int64_t>& kp) {
  Problem c = p.contiguous();
  const Problem src = c;
  const auto Q = [&](int64_t i) { return qp[static_cast<size_t>(i)]; };
  const auto K = [&](int64_t j) { return kp[static_cast<size_t>(j)]; };
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
        c.key_valid[static_cast<size_t>(b * p.tk + j)] = src.key_valid[static_cast<size_t>(b * p.tk + K(j))];
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

void permutation_equivariance(CaseContext& ctx) {
  gen::GenSpec spec = ctx.spec();
  spec.features &= ~(ATTNCHECK_FEATURE_CAUSAL | ATTNCHECK_FEATURE_WINDOW);
  const Problem p = *gen::problem(spec);
  const auto qp = permutation(p.tq);
  const auto kp = permutation(p.tk);
  const Problem pp = permuted(p, qp, kp);
  const ForwardResult r = ctx.call_ok(p);
  const ForwardResult rp = ctx.call_ok(pp);
  const auto [o, t] = ctx.reference(p);
  Comparison c;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t d = 0; d < p.dv; ++d) {
          const size_t src = out_index(p, b, h, qp[static_cast<size_t>(i)], d);
          ElementCheck e;
          e.array = "out (permuted problem)";
          e.index = {b, h, i, d};
          e.expected = r.out[src];
          e.got = rp.out[out_index(p, b, h, i, d)];
          // Both answers are within tolerance of the same oracle value.
          e.tolerance = 2 * t.out[src];
          c.add_element(e);
        }
  ctx.expect(p, c, "outputs are not permutation equivariant",
             {{"query_permutation", qp}, {"key_permutation", kp}});
}

}  // namespace

PropertyDef permutation_property() {
  PropertyDef d{"PermutationEquivariance",
                "without causal mask or window: permuting queries permutes outputs; "
                "permuting keys and values together leaves them unchanged",
                100, [](const ImplInfo&, DType) { return std::optional<std::string>(); }, {}};
  d.run = [d](const Implementation& impl, DType dtype, const RunConfig& config) {
    return run_cases(d, impl, dtype, config, permutation_equivariance);
  };
  return d;
}

}  // namespace attncheck
