#include "properties/gen/problem.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "properties/gen/coverage.h"
#include "properties/gen/dense.h"
#include "properties/gen/draws.h"
#include "properties/gen/empty_rows.h"
#include "properties/gen/real_size_draw.h"
#include "properties/gen/serving_plans.h"

namespace attncheck::gen {
namespace detail {

Problem draw_problem(const GenSpec& spec) {
  // One format for q, K/V and the output unless the property takes the
  // declared mixed combinations, or the implementation declares no
  // combination with q = kv = out: then every problem is in one of its
  // combinations (SPEC 5.1: the harness never hands it another). A
  // property that takes mixed combinations draws them even where the
  // implementation declares no serving part (serving = 0): a kernel of
  // f32 and bf16 K/V alone was checked in f32 only.
  const DTypeCombo uniform{spec.dtype, spec.dtype, spec.dtype};
  const bool uniform_ok = spec.combos.empty() ||
                          std::find(spec.combos.begin(), spec.combos.end(), uniform) != spec.combos.end();
  const bool mixed = std::any_of(spec.combos.begin(), spec.combos.end(),
                                 [&](const DTypeCombo& c) { return c != uniform; });
  const bool any_combo =
      !spec.combos.empty() && (spec.serving != 0 || !uniform_ok || (spec.mixed_formats && mixed));
  if (!spec.size && spec.serving == 0 && uniform_ok && !any_combo) {
    return draw_dense(spec, uniform, spec.max_bh);
  }
  const ServingPlan plan = spec.size ? size_plan(spec, any_combo) : draw_plan(spec, any_combo);
  const DTypeCombo formats = any_combo ? spec.combos[plan.combo] : uniform;
  GenSpec dense = varlen(plan) ? without_varlen_exclusions(spec) : spec;
  if (spec.size && varlen(plan)) dense.size = as_sequences(*spec.size);
  Problem d = draw_dense(dense, formats, varlen(plan) ? spec.max_sequences : spec.max_bh);
  // Descales and sinks are drawn whether used or not, so that shrinking the
  // plan (dropping a sink, a descale) keeps every later draw in place.
  const Descales descales = draw_descales();
  if (plan.descale) d.descale = descales;
  const std::vector<double> sinks = draw_sinks(d, plan.sink);
  // Rows whose keys are all disallowed: with a sink they hold only it.
  const bool empty_batch = part([] {
    return *rc::gen::resize(100, rc::gen::weightedElement<bool>({{3, false}, {1, true}}));
  });
  if (plan.sink) {
    d.sink = sinks;
    if (empty_batch && !d.key_valid.empty()) std::fill_n(d.key_valid.begin(), d.tk, uint8_t{0});
  }
  if (counting()) {
    if (plan.sink) count("serving sink");
    if (plan.descale) count("serving descale");
    if (plan.packed_q) count(plan.packed_k ? "serving packed" : "serving packed queries");
    if (plan.paged) count("serving paged");
    if (formats.q != spec.dtype || formats.kv != spec.dtype) count("serving mixed formats");
  }
  if (!varlen(plan)) return d;
  // The real-size phase judges one case, which RapidCheck draws at size
  // 0: its lengths, page shuffle and junk are drawn at full size.
  Problem p = spec.size ? *rc::gen::resize(100, rc::gen::exec([&d, plan] {
    return make_varlen(d, plan, plan.sink, true);
  }))
                        : make_varlen(d, plan, plan.sink);
  unbind_empty_rows(p);
  return p;
}

}  // namespace detail

rc::Gen<Problem> problem(const GenSpec& spec) {
  return rc::gen::exec([spec] { return detail::draw_problem(spec); });
}

// Position i swaps with i + r, r shrinking to 0.
std::vector<int64_t> permutation(int64_t n) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = 0; i + 1 < n; ++i) {
    const int64_t r = *rc::gen::inRange<int64_t>(0, n - i);
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(i + r)]);
  }
  return perm;
}

}  // namespace attncheck::gen
