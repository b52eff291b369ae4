// What a query may depend on: CausalPrefixIndependence, WindowLocality,
// BatchHeadIndependence, GroupedQueryEquivalence.

#include <fmt/format.h>

#include "core/broadcast.h"
#include "core/transforms.h"
#include "properties/case_context.h"

namespace attncheck {
namespace {

// A different value of the same format for every input (1 - x != x but for
// x = 1/2, which the generators never draw). A block format's value is
// rounded with its block (change_key).
double changed_value(DType dtype, double x) {
  return is_block_format(dtype) ? 1.0 - x : round_to(dtype, 1.0 - x);
}

// Key j of K/V head g of sequence b changed to other values of its format.
// In a block format the changed rows are rounded back to blocks (1 - x of
// a block is seldom one); a key whose blocks round back to what they were
// is still a valid change for these properties, which only ask that other
// rows not move.
void change_key(Problem& p, int64_t b, int64_t g, int64_t j) {
  const DType kv = p.kv_dtype.value_or(p.dtype);
  change_key_row(p, b, g, j, [kv](double x) { return changed_value(kv, x); });
}

// A row with a query: of a packed problem, a sequence that has queries.
Case draw_with_row(CaseContext& ctx, gen::GenSpec spec) {
  const Problem p = *gen::problem(spec);
  int64_t b = *rc::gen::inRange<int64_t>(0, p.batch);
  while (p.seq_tq(b) == 0) b = (b + 1) % p.batch;
  const int64_t h = *rc::gen::inRange<int64_t>(0, p.heads);
  const int64_t i = *rc::gen::inRange<int64_t>(0, p.seq_tq(b));
  (void)ctx;
  return {p, {{"row", {b, h, i}}}};
}

std::array<int64_t, 3> row_of(const Case& c) {
  const auto row = c.args.at("row").get<std::vector<int64_t>>();
  return {row.at(0), row.at(1), row.at(2)};
}

void judge_causal(CaseContext& ctx, const Case& c) {
  const Problem& p = c.problem;
  // Plain variables, not a structured binding: the lambdas below capture
  // them, which clang before 16 refuses for bindings.
  const std::array<int64_t, 3> where = row_of(c);
  const int64_t b0 = where[0], h0 = where[1], i0 = where[2];
  const ForwardResult r = ctx.call_ok(p);
  // Keys of row i0's sequence after its last causally allowed key: a
  // packed or paged sequence is aligned by its own lengths (SPEC 1.1).
  const int64_t tq_b = p.seq_tq(b0), tk_b = p.seq_tk(b0);
  if (i0 >= tq_b) ctx.discard("the row is past its sequence's queries");
  // A paged cache shorter than the queries empties bottom-right rows; the
  // generator then unbinds the causal mask (without a sink).
  if (!p.causal) ctx.discard("no causal mask (a short sequence unbound it)");
  const int64_t position = p.position(b0, i0);
  std::vector<int64_t> keys;
  for (int64_t j = std::max<int64_t>(position + 1, 0); j < tk_b; ++j) keys.push_back(j);
  expect_unseen_keys_ignored(
      ctx, p, r, b0, p.kv_head(h0), keys,
      [&](Problem& q, int64_t j) { change_key(q, b0, p.kv_head(h0), j); },
      fmt::format("changing keys after position {} (row {} of [b={}, h={}]) changes earlier "
                  "queries",
                  position, i0, b0, h0));
}

void judge_window(CaseContext& ctx, const Case& c) {
  const Problem& p = c.problem;
  // Plain variables, not a structured binding: the lambdas below capture
  // them, which clang before 16 refuses for bindings.
  const std::array<int64_t, 3> where = row_of(c);
  const int64_t b0 = where[0], h0 = where[1], i0 = where[2];
  if (p.window_left < 0 && p.window_right < 0) {
    ctx.discard("no window (a short sequence's empty rows unbound it)");
  }
  const ForwardResult r = ctx.call_ok(p);
  // A packed or paged sequence's window is aligned by its own lengths
  // (SPEC 1.1): window_band(b, i).
  // An implementation that counts its score elements claims locality: it
  // may not compute more than the windows hold (exercise 10's honesty).
  if (const auto computed = ctx.impl().score_elements_computed()) {
    int64_t band = 0;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t i = 0; i < p.seq_tq(b); ++i) band += p.window_band(b, i).size();
    band *= p.heads;
    if (*computed > band) {
      ctx.fail(fmt::format("computed {} score elements, but the windows hold {}: the window is "
                           "masked out of the full matrix, not computed locally",
                           *computed, band));
    }
  }
  Comparison cmp;
  // Weights are not returned for packed queries (SPEC 1.1); a paged
  // sequence's weights past its own keys are outside its window too.
  if (ctx.info().has(ATTNCHECK_FEATURE_WEIGHTS) && !p.packed_q() && !r.weights.empty()) {
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads; ++h)
        for (int64_t i = 0; i < p.seq_tq(b); ++i)
          for (int64_t j = 0; j < p.tk; ++j)
            if (!p.window_band(b, i).contains(j))
              cmp.add_element({"weights (outside the window)", {b, h, i, j}, 0.0,
                               r.weights[weight_index(p, b, h, i, j)], 0, 0, 0});
  }
  // A mask does not combine with packed or paged problems (SPEC 1.1).
  if (ctx.info().has(ATTNCHECK_FEATURE_MASK) && !p.varlen()) {
    // Window attention equals global attention under the band mask.
    Problem banded = p;
    banded.window_left = banded.window_right = -1;
    banded.mask = make_broadcast<uint8_t>(
        p.batch, p.heads, p.tq, p.tk, [&](int64_t b, int64_t h, int64_t i, int64_t j) {
          return p.window_band(i).contains(j) && (!p.mask || p.mask->at(b, h, i, j, p.tq, p.tk));
        });
    const ForwardResult rb = ctx.call_ok(banded);
    const auto [o, t] = ctx.reference(p);
    compare_array(cmp, ArrayKind::out, p, r.out, rb.out, t.out, CompareMode::pairwise,
                  "global attention with the band mask");
  }
  if (!cmp.ok()) ctx.expect(cmp, "the window is not a band mask");
  std::vector<int64_t> keys;
  for (int64_t j = 0; j < p.seq_tk(b0); ++j)
    if (!p.window_band(b0, i0).contains(j)) keys.push_back(j);
  expect_unseen_keys_ignored(ctx, p, r, b0, p.kv_head(h0), keys,
                             [&](Problem& q, int64_t j) { change_key(q, b0, p.kv_head(h0), j); },
                             fmt::format("keys outside the window of row {} (of [b={}, h={}]) "
                                         "influence rows whose window excludes them",
                                         i0, b0, h0));
}

Case draw_slice(CaseContext& ctx) {
  const Problem p = *gen::problem(gen::with_sinks(ctx.spec()));
  const bool by_head = *rc::gen::arbitrary<bool>();
  const int64_t index = by_head ? *rc::gen::inRange<int64_t>(0, p.kv_heads)
                                : *rc::gen::inRange<int64_t>(0, p.batch);
  return {p, {{"changed", by_head ? "kv_head" : "batch"}, {"index", index}}};
}

void validate_slice(const Fixture& f) {
  const ArgsCheck a(f.args, f.problem, {"changed", "index"});
  const Problem& p = f.problem;
  a.required({"changed", "index"});
  a.one_of("changed", {"kv_head", "batch"});
  const bool by_head = *a.find("changed") == "kv_head";
  a.integer_in("index", *a.find("index"), 0, by_head ? p.kv_heads : p.batch,
               by_head ? "kv_head" : "batch");
}

void judge_slice(CaseContext& ctx, const Case& c) {
  const Problem& p = c.problem;
  const bool by_head = c.args.at("changed") == "kv_head";
  const int64_t index = c.args.at("index");
  const auto changed_slice = [&](int64_t b, int64_t h) {
    return by_head ? p.kv_head(h) == index : b == index;
  };
  Problem q = p;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h)
      if (changed_slice(b, h))
        for (int64_t i = 0; i < p.tq; ++i)
          for (int64_t d = 0; d < p.dk; ++d)
            q.q.at(b, h, i, d) = changed_value(p.q_dtype.value_or(p.dtype), p.q.at(b, h, i, d));
    for (int64_t g = 0; g < p.kv_heads; ++g)
      if (by_head ? g == index : b == index)
        for (int64_t j = 0; j < p.tk; ++j) change_key(q, b, g, j);
  }
  const ForwardResult r = ctx.call_ok(p);
  const ForwardResult rq = ctx.call_ok(q);
  Comparison cmp;
  compare_array(cmp, ArrayKind::out, p, r.out, rq.out, {}, CompareMode::bitwise,
                "another slice changed",
                [&](int64_t b, int64_t h, int64_t) { return !changed_slice(b, h); });
  if (ctx.calls_may_differ() && !cmp.ok()) {
    const auto [o, t] = ctx.reference(p);
    Comparison tol_cmp;
    compare_array(tol_cmp, ArrayKind::out, p, r.out, rq.out, t.out, CompareMode::pairwise,
                  "another slice changed");
    ctx.expect(tol_cmp, "changing one slice changes another");
    return;
  }
  ctx.expect(cmp, fmt::format("changing {} {} changes another slice's output",
                              by_head ? "K/V head" : "batch entry", index));
}

void judge_gqa(CaseContext& ctx, const Case& c) {
  const Problem& p = c.problem;
  ctx.screen(p);
  const ForwardResult r = ctx.call_ok(p);
  // Multi-head attention with each K/V head repeated for its group: the
  // group size times p's K/V (a gigabyte at a thorough decode shape),
  // handed over, so the context keeps it for a report without a copy.
  const ForwardResult rm = ctx.call_ok(expand_kv_heads(p));
  const auto [o, t] = ctx.reference(p);
  Comparison cmp;
  compare_array(cmp, ArrayKind::out, p, rm.out, r.out, t.out, CompareMode::pairwise,
                "K/V repeated per query head");
  ctx.expect(cmp, "grouped-query attention differs from MHA with repeated K/V heads");
}

}  // namespace

PropertyDef causal_prefix_property() {
  PropertyDef d = case_property(
      "CausalPrefixIndependence",
      "with a causal mask, keys/values after a query's last allowed key do not change its "
      "output (bitwise); both alignments, tq != tk included",
      100, needs_features(ATTNCHECK_FEATURE_CAUSAL, "FEATURE_CAUSAL"),
      [](CaseContext& ctx) {
        // Every declared serving part: per sequence when packed or paged.
        gen::GenSpec spec = gen::with_serving_parts(ctx.spec());
        spec.require_causal = true;
        return draw_with_row(ctx, spec);
      },
      judge_causal, validate_row_arg, AtSize::some);
  d.not_a_case = rows_have_keys_and([](const Problem& p) -> std::optional<std::string> {
    if (p.causal) return std::nullopt;
    return "the problem is not causal";
  });
  d.slice_args = {"row"};
  return d;
}

PropertyDef window_property() {
  PropertyDef d = case_property(
      "WindowLocality",
      "keys outside the window have zero weight and no influence (bitwise); window attention "
      "equals global attention with the band mask",
      100, needs_features(ATTNCHECK_FEATURE_WINDOW, "FEATURE_WINDOW"),
      [](CaseContext& ctx) {
        // Every declared serving part: per sequence when packed or paged.
        gen::GenSpec spec = gen::with_serving_parts(ctx.spec());
        spec.require_window = true;
        return draw_with_row(ctx, spec);
      },
      judge_window, validate_row_arg, AtSize::some);
  d.not_a_case = rows_have_keys_and([](const Problem& p) -> std::optional<std::string> {
    if (p.window_left >= 0 || p.window_right >= 0) return std::nullopt;
    return "the problem has no window";
  });
  d.slice_args = {"row"};
  return d;
}

PropertyDef batch_head_property() {
  PropertyDef d = case_property("BatchHeadIndependence",
                       "changing one batch entry, or one K/V head with its query heads, "
                       "changes no other slice's output (bitwise)",
                       100, always_applies, draw_slice, judge_slice, validate_slice, AtSize::some);
  d.slice_args = {"changed", "index"};
  return d;
}

PropertyDef gqa_property() {
  PropertyDef d = case_property("GroupedQueryEquivalence",
                       "GQA equals MHA with each K/V head repeated for its group of query heads",
                       100, needs_features(ATTNCHECK_FEATURE_GQA, "FEATURE_GQA"),
                       [](CaseContext& ctx) {
                         gen::GenSpec spec = gen::with_sinks(ctx.spec());
                         spec.require_gqa = true;
                         return Case{*gen::problem(spec)};
                       },
                       judge_gqa, {}, AtSize::some);
  d.not_a_case = rows_have_keys_and([](const Problem& p) -> std::optional<std::string> {
    if (p.kv_heads != p.heads) return std::nullopt;
    return "kv_heads equals heads (no grouped K/V)";
  });
  return d;
}

ATTNCHECK_REGISTER_PROPERTY(120, causal_prefix_property);
ATTNCHECK_REGISTER_PROPERTY(130, window_property);
ATTNCHECK_REGISTER_PROPERTY(140, batch_head_property);
ATTNCHECK_REGISTER_PROPERTY(150, gqa_property);

}  // namespace attncheck
