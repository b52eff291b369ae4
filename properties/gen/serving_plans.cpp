#include "properties/gen/serving_plans.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "properties/gen/coverage.h"
#include "properties/gen/draws.h"
#include "properties/gen/problem.h"
#include "properties/gen/real_size_draw.h"
#include "properties/gen/value_regimes.h"

namespace attncheck::gen::detail {
namespace {

using rc::gen::inRange;

// Key j of K/V head g of batch entry b of a dense tensor, copied to `at`.
void copy_key(Tensor& to, const Tensor& from_t, size_t at, int64_t b, int64_t g, int64_t j,
              int64_t width) {
  for (int64_t c = 0; c < width; ++c) {
    to.data[at + static_cast<size_t>(c)] = from_t.at(b, g, j, c);
  }
}

// Offsets from 0 of sequences of lengths n (cu_seqlens).
std::vector<int64_t> cumulative(const std::vector<int64_t>& n) {
  std::vector<int64_t> cu{0};
  for (int64_t x : n) cu.push_back(cu.back() + x);
  return cu;
}

// What make_varlen draws as one part: the sequences' lengths and the pages.
struct Lengths {
  std::vector<int64_t> q, k;
  int64_t page_size = 1;
  std::vector<int64_t> page_order;  // a permutation of the pages
  std::vector<int64_t> share;       // per sequence: share sequence 0's first page (1) or not
  int64_t spare_pages = 0;
  int64_t table_pad = 0;  // block-table entries past the longest sequence's
};

// The lengths of d's sequences (and the pages) as one part, then made
// judgeable: some sequence has queries and some key.
Lengths draw_lengths(const Problem& d, const ServingPlan& plan, bool sink, bool at_size) {
  const bool bottom_right_causal = d.causal && d.align == Align::bottom_right;
  // The part captures the dims, not d: RapidCheck copies a part's callable
  // several times (each shrink keeps one), and a copy of d at real sizes is
  // tens of megabytes.
  Lengths len = part([plan, sink, at_size, batch = d.batch, tq = d.tq, tk = d.tk] {
    Lengths l;
    // The page size first: a search that changes the number of sequences
    // keeps it.
    if (plan.paged) {
      const int64_t small[] = {1, 2, 3, 16}, real[] = {16, 256, 17};
      l.page_size = at_size ? real[pick(3)] : small[pick(4)];
      l.spare_pages = pick(3);
      // Serving block tables are sized for the model's longest sequence,
      // not this batch's: a kernel that takes the row stride from the
      // lengths reads the wrong row.
      const int64_t pads[] = {0, 1, 3, 61};
      l.table_pad = pads[pick(4)];
    }
    const auto length = [at_size](int64_t lo, int64_t n) {
      return at_size ? real_size_length(lo, n) : *inRange<int64_t>(lo, n + 1);
    };
    for (int64_t b = 0; b < batch; ++b) {
      // At real sizes the first sequence is the longest (past the split
      // thresholds of the shape) and the others are shorter beside it, as
      // in a serving batch: a kernel that reads max_seqlen_k keys for every
      // sequence shows. Their lengths up to a quarter keep the batch's
      // cost near the shape's.
      const bool longest = at_size && b == 0;
      const auto n_of = [&](int64_t n) { return at_size ? std::max<int64_t>(1, n / 4) : n; };
      l.q.push_back(!plan.packed_q ? tq : longest ? tq : length(0, n_of(tq)));
      // No key at all only with a sink (the row then holds only the sink).
      const int64_t lo = sink ? 0 : 1;
      l.k.push_back(!(plan.packed_k || plan.paged) ? tk : longest ? tk : length(lo, n_of(tk)));
    }
    if (plan.paged) {
      for (int64_t b = 0; b < batch; ++b) l.share.push_back(b > 0 && coin() ? 1 : 0);
    }
    return l;
  });
  // Bottom-right causal with more queries than keys empties rows: only a
  // sink keeps them judgeable.
  for (int64_t b = 0; b < d.batch; ++b) {
    if (bottom_right_causal && !sink) len.q[static_cast<size_t>(b)] =
        std::min(len.q[static_cast<size_t>(b)], len.k[static_cast<size_t>(b)]);
  }
  // Some sequence has queries, and some key (tk >= 1); the longest
  // lengths are tq / tk.
  if (*std::max_element(len.k.begin(), len.k.end()) == 0) len.k[0] = 1;
  if (*std::max_element(len.q.begin(), len.q.end()) == 0) {
    len.q[0] = bottom_right_causal && !sink ? std::min(d.tq, len.k[0]) : d.tq;
  }
  return len;
}

// q of the dense d, packed by len.q (plan.packed_q) or dense.
void lay_out_queries(Problem& p, const Problem& d, const Lengths& len, const ServingPlan& plan) {
  if (plan.packed_q) {
    p.packed->cu_seqlens_q = cumulative(len.q);
    const int64_t rows = p.packed->cu_seqlens_q.back();
    p.q = make_tensor(1, rows, p.heads, p.dk);
    p.q.strides = {0, p.dk, p.heads * p.dk, 1};
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads; ++h)
        for (int64_t i = 0; i < len.q[static_cast<size_t>(b)]; ++i)
          for (int64_t c = 0; c < p.dk; ++c) p.q.data[p.q_offset(b, h, i, c)] = d.q.at(b, h, i, c);
  } else {
    p.q = make_tensor(p.batch, p.heads, p.tq, p.dk);
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads; ++h)
        for (int64_t i = 0; i < p.tq; ++i)
          for (int64_t c = 0; c < p.dk; ++c) p.q.at(b, h, i, c) = d.q.at(b, h, i, c);
  }
}

// K and V of the dense d, packed by len.k.
void pack_keys(Problem& p, const Problem& d, const Lengths& len) {
  p.packed->cu_seqlens_k = cumulative(len.k);
  const int64_t rows = p.packed->cu_seqlens_k.back();
  for (auto [t, from, width] : {std::tuple{&p.k, &d.k, p.dk}, std::tuple{&p.v, &d.v, p.dv}}) {
    *t = make_tensor(1, std::max<int64_t>(rows, 1), p.kv_heads, width);
    t->strides = {0, width, p.kv_heads * width, 1};
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t g = 0; g < p.kv_heads; ++g)
        for (int64_t j = 0; j < len.k[static_cast<size_t>(b)]; ++j)
          copy_key(*t, *from, p.kv_offset(*t, b, g, j, 0), b, g, j, width);
  }
}

// K and V of the dense d in shuffled pages (len's page size, spares and
// shared first pages), junk in every slot no sequence reads.
void page_keys(Problem& p, const Problem& d, const Lengths& len, bool at_size) {
  const DType kv_format = d.kv_dtype.value_or(d.dtype);
  PagedKv pg;
  pg.page_size = len.page_size;
  pg.seqlens_k = len.k;
  pg.block_table_stride = (p.tk + pg.page_size - 1) / pg.page_size + len.table_pad;
  // Pages in order of need; sequence b > 0 may share sequence 0's first
  // page (prefix caching): its first keys are then sequence 0's.
  std::vector<std::vector<int64_t>> pages(static_cast<size_t>(p.batch));
  int64_t next = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t n = (len.k[static_cast<size_t>(b)] + pg.page_size - 1) / pg.page_size;
    for (int64_t s = 0; s < n; ++s) {
      const bool shared = s == 0 && len.share[static_cast<size_t>(b)] && !pages[0].empty();
      pages[static_cast<size_t>(b)].push_back(shared ? pages[0][0] : next++);
    }
  }
  pg.num_pages = next + len.spare_pages;
  if (pg.num_pages == 0) pg.num_pages = 1;
  // Shuffle the physical page numbers.
  const std::vector<int64_t> perm = part([n = pg.num_pages] { return permutation(n); });
  pg.block_table.assign(static_cast<size_t>(p.batch * pg.block_table_stride), pg.num_pages - 1);
  for (int64_t b = 0; b < p.batch; ++b)
    for (size_t s = 0; s < pages[static_cast<size_t>(b)].size(); ++s)
      pg.block_table[static_cast<size_t>(b * pg.block_table_stride) + s] =
          perm[static_cast<size_t>(pages[static_cast<size_t>(b)][s])];
  p.paged = pg;
  // Junk everywhere first (slots no sequence reads keep it), then the keys.
  for (auto [t, from, width] : {std::tuple{&p.k, &d.k, p.dk}, std::tuple{&p.v, &d.v, p.dv}}) {
    *t = make_tensor(pg.num_pages, p.kv_heads, pg.page_size, width);
    if (at_size) {
      // One drawn seed and a hash per slot (as draw_sized's values): a
      // draw per element would cost a RapidCheck ingredient each, seconds
      // for a pool of millions of slots.
      const uint64_t seed = *rc::gen::resize(100, rc::gen::arbitrary<uint64_t>());
      for (size_t e = 0; e < t->data.size(); ++e) {
        // Small integers: exact in every format, block formats included
        // (a block of them has scale 1).
        t->data[e] = stored(kv_format, static_cast<double>(hash(seed, 19, e, 0, 0, 0) % 7) - 3);
      }
    } else {
      t->data = part([n = t->data.size(), kv_format] {
        std::vector<double> x(n);
        for (double& e : x) e = stored(kv_format, small_int(3));
        return x;
      });
    }
    for (int64_t b = 0; b < p.batch; ++b) {
      const bool shares = b > 0 && !pages[0].empty() &&
                          !pages[static_cast<size_t>(b)].empty() &&
                          pages[static_cast<size_t>(b)][0] == pages[0][0];
      for (int64_t g = 0; g < p.kv_heads; ++g)
        for (int64_t j = 0; j < len.k[static_cast<size_t>(b)]; ++j) {
          // A slot of the shared page that sequence 0 filled keeps its
          // keys: sequence b reads them as its own first keys.
          if (shares && j < pg.page_size && j < len.k[0]) continue;
          copy_key(*t, *from, p.kv_offset(*t, b, g, j, 0), b, g, j, width);
        }
    }
  }
}

}  // namespace

bool may_have(const GenSpec& spec, Features bit) { return (spec.serving & spec.features & bit) != 0; }
bool must_have(const GenSpec& spec, Features bit) {
  return may_have(spec, bit) && (spec.serving_required & bit) != 0;
}

std::vector<ServingPlan> layout_choices(const GenSpec& spec) {
  const auto may = [&](Features bit) { return may_have(spec, bit); };
  const auto must = [&](Features bit) { return must_have(spec, bit); };
  std::vector<ServingPlan> layouts;
  const auto layout = [&](bool packed_q, bool packed_k, bool paged) {
    ServingPlan l;
    l.packed_q = packed_q;
    l.packed_k = packed_k;
    l.paged = paged;
    layouts.push_back(l);
  };
  if (!must(ATTNCHECK_FEATURE_PACKED) && !must(ATTNCHECK_FEATURE_PAGED_KV)) layout(false, false, false);
  if (may(ATTNCHECK_FEATURE_PACKED) && !must(ATTNCHECK_FEATURE_PAGED_KV)) {
    layout(true, true, false);
    layout(true, false, false);
  }
  if (may(ATTNCHECK_FEATURE_PAGED_KV)) {
    if (!must(ATTNCHECK_FEATURE_PACKED)) layout(false, false, true);
    if (may(ATTNCHECK_FEATURE_PACKED)) layout(true, false, true);
  }
  if (layouts.empty()) layout(false, false, false);
  return layouts;
}

ServingPlan with_layout_of(ServingPlan plan, const ServingPlan& l) {
  plan.packed_q = l.packed_q;
  plan.packed_k = l.packed_k;
  plan.paged = l.paged;
  return plan;
}

ServingPlan draw_plan(const GenSpec& spec, bool any_combo) {
  return part([spec, any_combo] {
    ServingPlan plan;
    if (any_combo) {
      plan.combo = static_cast<size_t>(pick(static_cast<int64_t>(spec.combos.size())));
    }
    plan.sink = must_have(spec, ATTNCHECK_FEATURE_SINK) ||
                (may_have(spec, ATTNCHECK_FEATURE_SINK) && coin());
    plan.descale = must_have(spec, ATTNCHECK_FEATURE_DESCALE) ||
                   (may_have(spec, ATTNCHECK_FEATURE_DESCALE) && coin());
    const std::vector<ServingPlan> layouts = layout_choices(spec);
    return with_layout_of(plan, layouts[static_cast<size_t>(pick(static_cast<int64_t>(layouts.size())))]);
  });
}

Descales draw_descales() {
  return part([] {
    const double qk[] = {1.0, 0.5, 0.375, 0.25, 0.1, 1.0 / 448, 0.0625};
    const double v[] = {1.0, 2.0, 0.5, 1.5, 0.1, 3.0, 1.0 / 448};
    return Descales{qk[pick(7)], qk[pick(7)], v[pick(7)]};
  });
}

std::vector<double> draw_sinks(const Problem& p, bool counted) {
  double top = 0;  // a bound on |score| from the largest stored values
  {
    double mq = 0, mk = 0;
    for (double x : p.q.data) mq = std::max(mq, std::fabs(x));
    for (double x : p.k.data) mk = std::max(mk, std::fabs(x));
    const Descales d = p.descale.value_or(Descales{});
    top = std::fabs(p.scale) * d.q * d.k * mq * mk * static_cast<double>(p.dk);
  }
  return part([heads = p.heads, top, dtype = p.dtype, counted] {
    std::vector<double> sink(static_cast<size_t>(heads));
    const int regime = static_cast<int>(pick(5));
    if (counted) count(std::string("sink ") + (regime == 0   ? "small_int"
                                  : regime == 1 ? "dyadic"
                                  : regime == 2 ? "dominating"
                                  : regime == 3 ? "far below"
                                                : "zero"));
    for (double& x : sink) {
      switch (regime) {
        case 0: x = small_int(3); break;
        case 1: x = std::ldexp(small_int(64), -4); break;
        case 2: x = std::min(top + std::ldexp(1.0, 2 + static_cast<int>(pick(4))), 60.0); break;
        case 3: x = -std::min(top + 40.0, 600.0); break;
        default: x = 0; break;
      }
      x = round_to(dtype, x);
    }
    return sink;
  });
}

Problem make_varlen(const Problem& d, const ServingPlan& plan, bool sink, bool at_size) {
  const Lengths len = draw_lengths(d, plan, sink, at_size);
  Problem p = d;
  p.tq = *std::max_element(len.q.begin(), len.q.end());
  p.tk = *std::max_element(len.k.begin(), len.k.end());
  p.packed.reset();
  p.paged.reset();
  p.key_valid.clear();
  p.mask.reset();
  p.bias.reset();
  if (plan.packed_q || plan.packed_k) p.packed.emplace();
  lay_out_queries(p, d, len, plan);
  if (plan.packed_k) {
    pack_keys(p, d, len);
  } else if (plan.paged) {
    page_keys(p, d, len, at_size);
  } else {
    Problem c = d.contiguous();
    p.k = std::move(c.k);
    p.v = std::move(c.v);
  }
  if (!d.dout.empty()) p.dout.clear();
  return p;
}

GenSpec without_varlen_exclusions(GenSpec spec) {
  spec.features &= ~(ATTNCHECK_FEATURE_KEY_VALID | ATTNCHECK_FEATURE_MASK |
                     ATTNCHECK_FEATURE_BIAS | ATTNCHECK_FEATURE_STRIDES);
  return spec;
}

bool varlen(const ServingPlan& plan) { return plan.packed_q || plan.packed_k || plan.paged; }

}  // namespace attncheck::gen::detail
