// GradientsMatchOracle: dQ, dK, dV of an implementation's backward pass
// against the oracle's, element by element, within the gradient tolerances
// of grad_tolerance.cpp.

#include <algorithm>
#include <cmath>
#include <exception>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "properties/case_context.h"

namespace attncheck {
namespace {

// An integer in [-n, n] shrinking towards 0 through 1, -1, 2, -2, ...
double zigzag(int n) {
  const int k = *rc::gen::inRange(0, 2 * n + 1);
  return k % 2 ? (k + 1) / 2 : -(k / 2);
}

// dO for p: small integers in [-3, 3] or dyadics on a 2^-4 grid in [-1, 1],
// exactly representable in every format, shrinking towards 0 (a dO of
// zeros has zero gradients, the simplest case).
std::vector<double> draw_dout(const Problem& p) {
  const bool dyadic = *rc::gen::arbitrary<bool>();
  std::vector<double> x(static_cast<size_t>(p.total_q() * p.heads * p.dv));
  for (double& e : x) e = round_to(p.dtype, dyadic ? std::ldexp(zigzag(16), -4) : zigzag(3));
  return x;
}

// Calls backward: an exception or a reported error fails the case (the
// generated problems have no empty rows), unsupported discards it, and
// gradients of the wrong size fail it.
BackwardResult call_backward(CaseContext& ctx, const Problem& p) {
  ctx.require_declared(p);
  ctx.exercise(p, true);
  BackwardResult r;
  try {
    r = ctx.impl().backward(p);
  } catch (const ImplementationDied& e) {
    ctx.fail(e.what(), true, e.signal());
  } catch (const std::exception& e) {
    ctx.fail(fmt::format("the implementation's backward threw: {}", e.what()));
  } catch (...) {
    ctx.fail("the implementation's backward threw a non-standard exception");
  }
  if (r.status == Status::unsupported) ctx.refused(p, true);
  if (r.status == Status::error) {
    ctx.fail("backward reported an error on a problem without empty rows: " + r.error);
  }
  for (ArrayKind kind : kBackwardKinds) {
    const size_t got = array_of(r, kind).size();
    if (got != static_cast<size_t>(array_size(kind, p))) {
      ctx.fail(fmt::format("{} has {} elements, expected {}", array_name(kind), got,
                           array_size(kind, p)));
    }
  }
  return r;
}

// The case's problem carries its dO. Sinks, packed sequences and
// descales where declared (SPEC 1.1; paged K/V has no backward).
Case draw_gradients(CaseContext& ctx) {
  gen::GenSpec spec = gen::with_serving_parts(ctx.spec());
  spec.serving &= ~ATTNCHECK_FEATURE_PAGED_KV;
  Problem p = *gen::problem(spec);
  p.dout = draw_dout(p);
  return {p};
}

// A bound on every magnitude a backward pass forms before the final scale:
// |dA| <= dv max|dO| max|v|, and dQ, dK, dV sum at most max(tk, tq heads)
// terms of |dA| (or |a dO|) times the largest input. Past a sixteenth of the
// accumulation format's range an intermediate may overflow while the exact
// gradient fits (or the exact gradient itself may not): beyond the range
// the first-order analysis covers, so the case is discarded, never judged.
bool beyond_range(const Problem& p, DType accum) {
  const auto max_abs = [](const Tensor& t) {
    double m = 0;
    for (double x : t.data)
      if (!std::isnan(x)) m = std::max(m, std::fabs(x));
    return m;
  };
  double max_dout = 0;
  for (double x : p.dout) max_dout = std::max(max_dout, std::fabs(x));
  const double inputs = std::max({max_abs(p.q), max_abs(p.k), max_abs(p.v), max_dout, 1.0});
  const double terms = static_cast<double>(std::max(p.tk, p.tq * p.heads)) *
                       static_cast<double>(std::max({p.dk, p.dv, int64_t{1}}));
  const double bound = 2 * terms * inputs * inputs * inputs;
  return !(bound < max_finite(accum) / 16);
}

void judge_gradients(CaseContext& ctx, const Case& cs) {
  const Problem& p = cs.problem;
  if (beyond_range(p, ctx.info().precision.accum)) ctx.discard("gradients beyond the format's range");
  const BackwardResult r = call_backward(ctx, p);
  const OracleResult o = oracle(p);
  if (!o.uncertified.empty()) ctx.discard("oracle uncertified");
  const GradTolerances t = grad_tolerances(p, o, ctx.info().precision);
  if (t.ill_conditioned_rows > 0) ctx.discard(kBeyondPrecision);
  Comparison c;
  compare_kinds(c, kBackwardKinds, p, o, r, t, CompareMode::tolerance);
  if (!o.dsink.empty()) {
    // d sink_h (SPEC 1.1), a sum over every row of every sequence; a head
    // with a row beyond the first-order analysis is not judged (+inf).
    if (r.dsink.size() != o.dsink.size()) {
      ctx.fail(fmt::format("dsink has {} elements, expected heads = {}", r.dsink.size(),
                           o.dsink.size()));
    }
    std::vector<uint8_t> skip(o.dsink.size(), 0);
    for (size_t h = 0; h < skip.size(); ++h) skip[h] = std::isinf(t.dsink[h]) ? 1 : 0;
    c.add("dsink", {static_cast<int64_t>(o.dsink.size())}, r.dsink, o.dsink, t.dsink, skip);
  }
  ctx.expect(c, "gradients differ from the oracle's");
}

// Backward declared; and Q not quantized to q8_0 by the declaration or a
// path: SPEC 4.1's q8_0 term bounds the forward's scores, while the
// gradients' analysis (grad_tolerance.cpp) charges Q's rounding as a
// relative unit roundoff, which a block format has not (a small element
// beside its block's largest may lose every bit). Such a backward is
// skipped with the reason, never judged by a bound that does not hold.
std::optional<std::string> gradients_skip(const ImplInfo& info, DType dtype) {
  static const SkipFn backward =
      needs_features(ATTNCHECK_FEATURE_BACKWARD, "FEATURE_BACKWARD (no backward pass)");
  if (auto why = backward(info, dtype)) return why;
  const auto block_q = [](const PrecisionTraits& t) {
    return t.q_cast && is_block_format(*t.q_cast);
  };
  bool any = block_q(info.precision);
  for (const ImplPath& path : info.paths) any = any || block_q(path.precision);
  if (any) {
    return std::string("q_cast q8_0: the gradients' tolerance has no term for Q quantized in "
                       "blocks (SPEC 4.1 bounds the forward's scores only)");
  }
  return std::nullopt;
}

}  // namespace

PropertyDef gradients_property() {
  return case_property(
      "GradientsMatchOracle",
      "dQ, dK, dV within their tolerance of the oracle's (implementations with backward)", 100,
      gradients_skip, draw_gradients, judge_gradients);
}

ATTNCHECK_REGISTER_PROPERTY(190, gradients_property);

}  // namespace attncheck
