// The serving properties of SPEC 2 (sinks, packed batches, paged K/V,
// descales: the parts of SPEC 1.1 that serving kernels add), and the judging of a packed or paged problem one
// sequence at a time that MatchesOracle uses for them.

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "core/broadcast.h"
#include "core/transforms.h"
#include "properties/case_context.h"

namespace attncheck {

namespace {

// The forward kinds both results hold (packed queries return no weights).
std::vector<ArrayKind> common_kinds(const ImplInfo& info, const ForwardResult& a,
                                    const ForwardResult& b) {
  std::vector<ArrayKind> kinds;
  for (ArrayKind k : returned_kinds(info, kForwardKinds)) {
    if (!array_of(a, k).empty() && !array_of(b, k).empty()) kinds.push_back(k);
  }
  return kinds;
}

// The sequences with queries (a sequence without any has nothing to judge).
std::vector<int64_t> judged_sequences(const Problem& p) {
  std::vector<int64_t> seqs;
  for (int64_t b = 0; b < p.batch; ++b)
    if (p.seq_tq(b) > 0) seqs.push_back(b);
  return seqs;
}

// Whether two results are bitwise equal on sequence b (values: +0 = -0,
// NaN never equal), or within tolerance for nondeterministic ones.
void expect_sequence_unchanged(CaseContext& ctx, const Problem& p, const ForwardResult& before,
                               const ForwardResult& after, int64_t b, const std::string& what) {
  const Problem s = sequence_problem(p, b);
  const ForwardResult x = sequence_result(p, before, b), y = sequence_result(p, after, b);
  const std::vector<ArrayKind> kinds = common_kinds(ctx.info(), x, y);
  Comparison cmp;
  if (ctx.calls_may_differ()) {
    const auto [o, t] = ctx.reference(s);
    compare_kinds(cmp, kinds, s, x, y, t, CompareMode::pairwise,
                  fmt::format("sequence {}", b));
  } else {
    Tolerances none;  // not read in bitwise mode, but sized like the arrays
    none.out.assign(x.out.size(), 0.0);
    none.weights.assign(x.weights.size(), 0.0);
    none.lse.assign(x.lse.size(), 0.0);
    compare_kinds(cmp, kinds, s, x, y, none, CompareMode::bitwise, fmt::format("sequence {}", b));
  }
  ctx.require(cmp, what);
}

// A sequence without keys in a problem whose implementation cannot take
// key_valid (the form sequence_problem gives it): its rows hold only the
// sink, so o = 0 and lse = sink exactly (SPEC 1.1).
void expect_sink_only_rows(CaseContext& ctx, const Problem& p, const ForwardResult& r, int64_t b) {
  Comparison cmp;
  for (int64_t h = 0; h < p.heads; ++h)
    for (int64_t i = 0; i < p.seq_tq(b); ++i) {
      for (int64_t d = 0; d < p.dv; ++d) {
        cmp.add_element({"out (sink-only row)", {b, h, i, d}, 0.0,
                         r.out[out_index(p, b, h, i, d)], 0, 0, 0});
      }
      if (!r.lse.empty()) {
        cmp.add_element({"lse (sink-only row)", {b, h, i}, p.sink[static_cast<size_t>(h)],
                         r.lse[row_index(p, b, h, i)], 0, 0, 0});
      }
    }
  ctx.require(cmp, "a row with only the sink must give o = 0 and lse = sink");
}

}  // namespace

void judge_sequences_against_oracle(CaseContext& ctx, const Problem& p, const ForwardResult& r) {
  Comparison cmp;
  for (int64_t b : judged_sequences(p)) {
    const Problem s = sequence_problem(p, b);
    const ForwardResult rs = sequence_result(p, r, b);
    const auto [o, t] = ctx.reference(s);
    std::vector<ArrayKind> kinds;
    for (ArrayKind k : returned_kinds(ctx.info(), kForwardKinds))
      if (!array_of(rs, k).empty()) kinds.push_back(k);
    compare_kinds(cmp, kinds, s, o, rs, t, CompareMode::tolerance, fmt::format("sequence {}", b));
  }
  ctx.expect(cmp, "values differ from the oracle's");
}

namespace {

// ---- SinkIsAKeyWithoutValue ----

// The problem with one more key, key 0, with k = v = 0 and bias sink_h for
// every query (scale * q.0 = 0, a softcap keeps 0, so its score is exactly
// sink_h); every other key moves to j + 1 with its constraints. Only
// meaningful without a window and with causal only bottom-right (SPEC 2),
// for dense problems.
Problem with_sink_key(const Problem& p) {
  Problem e = p;
  e.sink.clear();
  e.tk = p.tk + 1;
  const Problem c = p.contiguous();
  e.k = make_tensor(p.batch, p.kv_heads, e.tk, p.dk);
  e.v = make_tensor(p.batch, p.kv_heads, e.tk, p.dv);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t g = 0; g < p.kv_heads; ++g)
      for (int64_t j = 0; j < p.tk; ++j) {
        for (int64_t d = 0; d < p.dk; ++d) e.k.at(b, g, j + 1, d) = c.k.at(b, g, j, d);
        for (int64_t d = 0; d < p.dv; ++d) e.v.at(b, g, j + 1, d) = c.v.at(b, g, j, d);
      }
  e.q = c.q;
  if (!p.key_valid.empty()) {
    e.key_valid.clear();
    for (int64_t b = 0; b < p.batch; ++b) {
      e.key_valid.push_back(1);
      for (int64_t j = 0; j < p.tk; ++j) e.key_valid.push_back(p.key_valid[static_cast<size_t>(b * p.tk + j)]);
    }
  }
  if (p.mask) {
    e.mask = make_broadcast<uint8_t>(
        p.mask->batch, p.mask->heads, p.tq, e.tk, [&](int64_t b, int64_t h, int64_t i, int64_t j) {
          return j == 0 ? uint8_t{1} : p.mask->at(b, h, i, j - 1, p.tq, p.tk);
        });
  }
  // The bias varies by head (the sink is per head); its batch axis as before.
  e.bias = make_broadcast<double>(
      p.bias ? p.bias->batch : 1, p.heads, p.tq, e.tk,
      [&](int64_t b, int64_t h, int64_t i, int64_t j) {
        return j == 0 ? p.sink[static_cast<size_t>(h)] : p.bias_at(b, h, i, j - 1);
      });
  return e;
}

bool sink_key_applies(const ImplInfo& info, const Problem& p) {
  return info.has(ATTNCHECK_FEATURE_BIAS) && !p.varlen() && p.window_left < 0 &&
         p.window_right < 0 && (!p.causal || p.align == Align::bottom_right);
}

Case draw_sink(CaseContext& ctx) {
  gen::GenSpec spec = gen::with_serving_parts(ctx.spec());
  spec.serving_required = ATTNCHECK_FEATURE_SINK;
  // Half the cases keep to problems the extra-key form applies to.
  const bool keyed = ctx.info().has(ATTNCHECK_FEATURE_BIAS) && *rc::gen::arbitrary<bool>();
  if (keyed) {
    spec.serving &= ~(ATTNCHECK_FEATURE_PACKED | ATTNCHECK_FEATURE_PAGED_KV);
    spec.features &= ~(ATTNCHECK_FEATURE_WINDOW | ATTNCHECK_FEATURE_ALIGN_TOP_LEFT);
    if (!(spec.features & ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT)) spec.features &= ~ATTNCHECK_FEATURE_CAUSAL;
  }
  return Case{*gen::problem(spec)};
}

void judge_sink(CaseContext& ctx, const Case& c) {
  const Problem& p = c.problem;
  // Rows with only the sink are not empty: never an error (call_ok).
  const ForwardResult r = ctx.call_ok(p);
  judge_sequences_against_oracle(ctx, p, r);
  if (!sink_key_applies(ctx.info(), p)) return;
  const Problem e = with_sink_key(p);
  const ForwardResult re = ctx.call_ok(e);
  const auto [o, t] = ctx.reference(p);
  const auto [oe, te] = ctx.reference(e);
  Comparison cmp;
  const auto kinds = returned_kinds(ctx.info(), kForwardKinds);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i) {
        for (int64_t d = 0; d < p.dv; ++d) {
          const size_t k = out_index(p, b, h, i, d);
          cmp.add_element({"out (sink vs key of score sink)", {b, h, i, d}, re.out[k], r.out[k], 0,
                           pairwise_tolerance(t.out[k], te.out[k]), 0});
        }
        if (std::find(kinds.begin(), kinds.end(), ArrayKind::lse) != kinds.end()) {
          const size_t k = row_index(p, b, h, i);
          cmp.add_element({"lse (sink vs key of score sink)", {b, h, i}, re.lse[k], r.lse[k], 0,
                           pairwise_tolerance(t.lse[k], te.lse[k]), 0});
        }
        if (std::find(kinds.begin(), kinds.end(), ArrayKind::weights) != kinds.end()) {
          for (int64_t j = 0; j < p.tk; ++j) {
            const size_t k = weight_index(p, b, h, i, j), ke = weight_index(e, b, h, i, j + 1);
            cmp.add_element({"weights (sink vs key of score sink)", {b, h, i, j}, re.weights[ke],
                             r.weights[k], 0, pairwise_tolerance(t.weights[k], te.weights[ke]), 0});
          }
        }
      }
  ctx.require(cmp, "the sink differs from a key of score sink_h with value 0");
}

// ---- PackedEqualsSeparate ----

Case draw_packed(CaseContext& ctx) {
  gen::GenSpec spec = gen::with_serving_parts(ctx.spec());
  spec.serving_required = ATTNCHECK_FEATURE_PACKED;
  const Problem p = *gen::problem(spec);
  const int64_t changed = *rc::gen::inRange<int64_t>(0, p.batch);
  return Case{p, {{"changed_sequence", changed}}};
}

// Sequence b's query rows (and, with packed keys, its key rows) replaced by
// other values of their formats: 1 - x, exact for the small values drawn,
// else x itself negated.
Problem change_sequence(const Problem& p, int64_t b) {
  Problem c = p;
  const DType qf = p.q_dtype.value_or(p.dtype), kf = p.kv_dtype.value_or(p.dtype);
  // A block format's values round with their block (SPEC 1.2), below.
  const auto other = [](DType f, double x) {
    const double y = 1 - x;
    return is_block_format(f) || representable(f, y) ? y : -x;
  };
  for (int64_t h = 0; h < p.heads; ++h)
    for (int64_t i = 0; i < p.seq_tq(b); ++i)
      for (int64_t d = 0; d < p.dk; ++d) {
        double& x = c.q.data[p.q_offset(b, h, i, d)];
        x = other(qf, x);
      }
  if (p.packed_k()) {
    for (int64_t g = 0; g < p.kv_heads; ++g)
      for (int64_t j = 0; j < p.seq_tk(b); ++j)
        change_key_row(c, b, g, j, [&](double x) { return other(kf, x); });
  }
  return c;
}

void judge_packed(CaseContext& ctx, const Case& c) {
  const Problem& p = c.problem;
  const ForwardResult r = ctx.call_ok(p);
  for (int64_t b : judged_sequences(p)) {
    const Problem s = sequence_problem(p, b);
    const ForwardResult rs = sequence_result(p, r, b);
    if (!s.key_valid.empty() && !ctx.info().has(ATTNCHECK_FEATURE_KEY_VALID)) {
      expect_sink_only_rows(ctx, p, r, b);
      continue;
    }
    const ForwardResult alone = ctx.call_ok(s);
    const auto [o, t] = ctx.reference(s);
    Comparison cmp;
    compare_kinds(cmp, common_kinds(ctx.info(), rs, alone), s, alone, rs, t,
                  CompareMode::pairwise, fmt::format("sequence {} packed vs alone", b));
    ctx.require(cmp, fmt::format("sequence {} of the packed batch differs from the sequence alone", b));
  }
  const int64_t changed = c.args.at("changed_sequence").get<int64_t>();
  const ForwardResult r2 = ctx.call_ok(change_sequence(p, changed));
  for (int64_t b : judged_sequences(p)) {
    if (b == changed) continue;
    expect_sequence_unchanged(ctx, p, r, r2, b,
                              fmt::format("changing sequence {} changed sequence {}", changed, b));
  }
  ctx.passed(0);  // the budgets were recorded by require()
}

// ---- PagedEqualsContiguous ----

Case draw_paged(CaseContext& ctx) {
  gen::GenSpec spec = gen::with_serving_parts(ctx.spec());
  spec.serving_required = ATTNCHECK_FEATURE_PAGED_KV;
  return Case{*gen::problem(spec)};
}

// The same keys in one page per sequence, in order: page b holds sequence
// b's keys in slots 0 .. tk_b - 1 (zeros after them).
Problem contiguous_pages(const Problem& p) {
  Problem c = p;
  PagedKv pg;
  pg.page_size = p.tk;
  pg.num_pages = p.batch;
  pg.block_table_stride = 1;
  pg.seqlens_k = p.paged->seqlens_k;
  for (int64_t b = 0; b < p.batch; ++b) pg.block_table.push_back(b);
  c.paged = pg;
  c.k = make_tensor(p.batch, p.kv_heads, p.tk, p.dk);
  c.v = make_tensor(p.batch, p.kv_heads, p.tk, p.dv);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t g = 0; g < p.kv_heads; ++g)
      for (int64_t j = 0; j < p.seq_tk(b); ++j) {
        for (int64_t d = 0; d < p.dk; ++d) c.k.at(b, g, j, d) = p.k_at(b, g, j, d);
        for (int64_t d = 0; d < p.dv; ++d) c.v.at(b, g, j, d) = p.v_at(b, g, j, d);
      }
  return c;
}

// Slots that no sequence reads (a page's tail past tk_b, unused pages) set
// to `value`.
Problem fill_unread_slots(const Problem& p, double value) {
  Problem c = p;
  const PagedKv& pg = *p.paged;
  std::set<std::pair<int64_t, int64_t>> read;  // (page, slot)
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t j = 0; j < p.seq_tk(b); ++j)
      read.emplace(pg.block_table[static_cast<size_t>(b * pg.block_table_stride + j / pg.page_size)],
                   j % pg.page_size);
  for (int64_t page = 0; page < pg.num_pages; ++page)
    for (int64_t s = 0; s < pg.page_size; ++s) {
      if (read.count({page, s})) continue;
      for (int64_t g = 0; g < p.kv_heads; ++g) {
        for (int64_t d = 0; d < p.dk; ++d) c.k.at(page, g, s, d) = value;
        for (int64_t d = 0; d < p.dv; ++d) c.v.at(page, g, s, d) = value;
      }
    }
  return c;
}

// A large value of the key format whose scores stay finite: |scale| *
// descales * dk * max|q| * value at least 8x below the largest finite value
// of the accumulation format (as MaskedWeightsAreZero's large keys).
double large_key_value(const Problem& p, DType accum) {
  const DType kf = p.kv_dtype.value_or(p.dtype);
  double mq = 1;
  for (double x : p.q.data) mq = std::max(mq, std::fabs(x));
  const Descales d = p.descale.value_or(Descales{});
  const double growth = std::max(1.0, std::fabs(p.scale) * d.q * d.k) * static_cast<double>(p.dk) * mq;
  // A block of one power of two is exact in a block format (scale 2^e / 64
  // for q8_0, -2^e / 8 for q4_0) up to half its largest value.
  const int e = std::min(std::ilogb(format_max_value(kf)) - 1,
                         std::ilogb(max_finite(accum)) - std::ilogb(growth) - 3);
  return std::ldexp(1.0, e);
}

void judge_paged(CaseContext& ctx, const Case& c) {
  const Problem& p = c.problem;
  const ForwardResult r = ctx.call_ok(p);
  const Problem flat = contiguous_pages(p);
  const ForwardResult rc = ctx.call_ok(flat);
  for (int64_t b : judged_sequences(p)) {
    const Problem s = sequence_problem(p, b);
    const auto [o, t] = ctx.reference(s);
    const ForwardResult x = sequence_result(p, r, b), y = sequence_result(flat, rc, b);
    Comparison cmp;
    compare_kinds(cmp, common_kinds(ctx.info(), x, y), s, y, x, t, CompareMode::pairwise,
                  fmt::format("sequence {} paged vs contiguous", b));
    ctx.require(cmp, fmt::format("sequence {} paged differs from the contiguous cache", b));
  }
  const bool strict = ctx.config().strict;
  const double junk = strict ? std::nan("") : large_key_value(p, ctx.info().precision.accum);
  const ForwardResult rj = ctx.call_ok(fill_unread_slots(p, junk));
  for (int64_t b : judged_sequences(p)) {
    expect_sequence_unchanged(ctx, p, r, rj, b,
                              fmt::format("slots no sequence reads, set to {}, changed sequence {}",
                                          junk, b));
  }
  ctx.passed(0);  // the budgets were recorded by require()
}

// ---- DescaleEquivalence ----

Case draw_descale(CaseContext& ctx) {
  gen::GenSpec spec = gen::with_serving_parts(ctx.spec());
  spec.serving_required = ATTNCHECK_FEATURE_DESCALE;
  const Problem p = *gen::problem(spec);
  const int which = *rc::gen::inRange(0, 3);
  return Case{p, {{"doubled", which == 0 ? "q" : which == 1 ? "k" : "v"}}};
}

void judge_descale(CaseContext& ctx, const Case& c) {
  const Problem& p = c.problem;
  const std::string which = c.args.at("doubled").get<std::string>();
  Problem d = p;
  Tensor& t = which == "q" ? d.q : which == "k" ? d.k : d.v;
  const DType f = which == "q" ? p.q_dtype.value_or(p.dtype) : p.kv_dtype.value_or(p.dtype);
  for (double& x : t.data) {
    x *= 2;
    if (!is_block_format(f) && !representable(f, x))
      ctx.discard("doubled values not representable");
  }
  // A block doubles with its scale (SPEC 1.2): exact while that stays an f16.
  if (is_block_format(f) && !kv_blocks_exact(d)) ctx.discard("doubled values not representable");
  Descales& s = *d.descale;
  double& ds = which == "q" ? s.q : which == "k" ? s.k : s.v;
  ds /= 2;  // exact: descales are normal doubles
  const ForwardResult r = ctx.call_ok(p);
  const ForwardResult r2 = ctx.call_ok(d);
  for (int64_t b : judged_sequences(p)) {
    const Problem sp = sequence_problem(p, b);
    const auto [o, tol] = ctx.reference(sp);
    const ForwardResult x = sequence_result(p, r, b), y = sequence_result(d, r2, b);
    Comparison cmp;
    compare_kinds(cmp, common_kinds(ctx.info(), x, y), sp, x, y, tol,
                  CompareMode::pairwise, fmt::format("sequence {}", b));
    ctx.require(cmp, fmt::format("doubling {} and halving its descale changed the result", which));
  }
  ctx.passed(0);  // the budgets were recorded by require()
}

void validate_changed(const Fixture& f) {
  const ArgsCheck a(f.args, f.problem, {"changed_sequence"});
  a.required({"changed_sequence"});
  a.integer("changed_sequence", 0, f.problem.batch - 1, "sequence");
}

void validate_doubled(const Fixture& f) {
  const ArgsCheck a(f.args, f.problem, {"doubled"});
  a.required({"doubled"});
  a.one_of("doubled", {"q", "k", "v"});
  if (!f.problem.descale) throw InputError("problem: DescaleEquivalence needs descales");
}

}  // namespace

PropertyDef sink_property() {
  return case_property(
      "SinkIsAKeyWithoutValue",
      "with a sink the result equals the oracle's; with a bias, also the same implementation "
      "with one extra key of k = v = 0 and bias sink_h; rows with only the sink give o = 0 and "
      "lse = sink_h",
      100, needs_features(ATTNCHECK_FEATURE_SINK, "ATTNCHECK_FEATURE_SINK"), draw_sink,
      judge_sink);
}

PropertyDef packed_property() {
  PropertyDef d = case_property(
      "PackedEqualsSeparate",
      "a packed batch equals each sequence checked alone; changing one sequence leaves the "
      "others bitwise unchanged",
      100, needs_features(ATTNCHECK_FEATURE_PACKED, "ATTNCHECK_FEATURE_PACKED"), draw_packed,
      judge_packed, validate_changed, AtSize::some);
  d.slice_args = {"changed_sequence"};
  return d;
}

PropertyDef paged_property() {
  return case_property(
      "PagedEqualsContiguous",
      "a paged cache (pages shuffled, shared, partly filled) gives the contiguous cache's "
      "result; slots no sequence reads change nothing bitwise",
      100, needs_features(ATTNCHECK_FEATURE_PAGED_KV, "ATTNCHECK_FEATURE_PAGED_KV"), draw_paged,
      judge_paged, {}, AtSize::all);
}

PropertyDef descale_property() {
  return case_property(
      "DescaleEquivalence",
      "doubling a stored tensor and halving its descale leaves the result unchanged within "
      "tolerance",
      100, needs_features(ATTNCHECK_FEATURE_DESCALE, "ATTNCHECK_FEATURE_DESCALE"), draw_descale,
      judge_descale, validate_doubled);
}

ATTNCHECK_REGISTER_PROPERTY(210, sink_property);
ATTNCHECK_REGISTER_PROPERTY(220, packed_property);
ATTNCHECK_REGISTER_PROPERTY(230, paged_property);
ATTNCHECK_REGISTER_PROPERTY(240, descale_property);

}  // namespace attncheck
