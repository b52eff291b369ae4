// The shrinker's passes (run/shrink_passes.h).

#include "run/shrink_passes.h"

#include <algorithm>
#include <utility>

#include "run/judge_once.h"

namespace attncheck {
namespace {

bool names_a_slice(const PropertyDef& prop, const nlohmann::json& args) {
  for (const std::string& key : prop.slice_args)
    if (args.contains(key)) return true;
  return false;
}

// A pass that drops one part of the structure: kept only if the case still
// fails without it.
SizeShrinkPass drop(std::string name, void (*without)(gen::SizeShape&)) {
  return {std::move(name), [without](gen::SizeShape& cur, const SizeSearch& search) {
            gen::SizeShape s = cur;
            without(s);
            if (!(s == cur) && search.fails(s)) cur = s;
          }};
}

// A window towards the narrowest that still fails, each bound searched as
// a length (bound + 1 on the grid: 0 is a bound).
void narrow_window(gen::SizeShape& cur, const SizeSearch& search) {
  if (cur.window_left > 0) {
    cur.window_left = smallest_failing(cur.window_left + 1, gen::length_grid(), [&](int64_t n) {
      gen::SizeShape s = cur;
      s.window_left = n - 1;
      return search.fails(s);
    }) - 1;
  }
  if (cur.window_right > 0) {
    cur.window_right = smallest_failing(cur.window_right + 1, gen::length_grid(), [&](int64_t n) {
      gen::SizeShape s = cur;
      s.window_right = n - 1;
      return search.fails(s);
    }) - 1;
  }
}

void shorten_keys(gen::SizeShape& cur, const SizeSearch& search) {
  // Queries past the keys would leave rows empty (bottom-right causal) or
  // lose the window (top-left windows, which the draw then unbinds).
  const bool tq_within_tk = (cur.causal && cur.align == Align::bottom_right) || cur.windowed();
  cur.tk = smallest_failing(cur.tk, gen::length_grid(), [&](int64_t n) {
    gen::SizeShape s = cur;
    s.tk = n;
    if (tq_within_tk) s.tq = std::min(s.tq, n);
    return search.fails(s);
  });
  if (tq_within_tk) cur.tq = std::min(cur.tq, cur.tk);
}

void shorten_queries(gen::SizeShape& cur, const SizeSearch& search) {
  cur.tq = smallest_failing(cur.tq, gen::length_grid(), [&](int64_t n) {
    gen::SizeShape s = cur;
    s.tq = n;
    return search.fails(s);
  });
}

// The head dims the limits allow, on the grid.
std::vector<int64_t> allowed_dims(const Limits& lim) {
  std::vector<int64_t> dims;
  for (int64_t d : gen::head_dim_grid()) {
    if (d >= std::max<int64_t>(1, lim.dk_min) && (lim.dk_max <= 0 || d <= lim.dk_max) &&
        (lim.dk_multiple <= 1 || d % lim.dk_multiple == 0)) {
      dims.push_back(d);
    }
  }
  return dims;
}

void shrink_dk(gen::SizeShape& cur, const SizeSearch& search) {
  const Limits& lim = search.spec.limits;
  const std::vector<int64_t> dims = allowed_dims(lim);
  const auto f = [&](int64_t d) {
    gen::SizeShape s = cur;
    s.dk = d;
    if (lim.dv_equals_dk) s.dv = d;
    return search.fails(s);
  };
  // Bisection may visit any dim only without a multiple to keep; with one,
  // the allowed dims are tried upwards.
  if (lim.dk_multiple <= 1) {
    cur.dk = smallest_failing(cur.dk, dims, f);
  } else {
    for (int64_t d : dims) {
      if (d < cur.dk && f(d)) {
        cur.dk = d;
        break;
      }
    }
  }
  if (lim.dv_equals_dk) cur.dv = cur.dk;
}

void shrink_dv(gen::SizeShape& cur, const SizeSearch& search) {
  if (search.spec.limits.dv_equals_dk) return;  // moved with dk
  cur.dv = smallest_failing(cur.dv, gen::head_dim_grid(), [&](int64_t d) {
    gen::SizeShape s = cur;
    s.dv = d;
    return search.fails(s);
  });
}

// The smallest (heads, kv_heads) that still fails.
void fewer_heads(gen::SizeShape& cur, const SizeSearch& search) {
  for (int64_t h = 1; h <= cur.heads; ++h) {
    bool done = false;
    for (int64_t kv = 1; kv <= std::min(h, cur.kv_heads) && !done; ++kv) {
      if (h % kv || (h == cur.heads && kv == cur.kv_heads)) continue;
      if (kv != h && !(search.spec.features & ATTNCHECK_FEATURE_GQA)) continue;
      gen::SizeShape s = cur;
      s.heads = h;
      s.kv_heads = kv;
      if (search.fails(s)) {
        cur = s;
        done = true;
      }
    }
    if (done || h == cur.heads) break;
  }
}

void fewer_batch_entries(gen::SizeShape& cur, const SizeSearch& search) {
  for (int64_t b = 1; b < cur.batch; ++b) {
    gen::SizeShape s = cur;
    s.batch = b;
    if (search.fails(s)) {
      cur = s;
      break;
    }
  }
}

// The sequences of a packed or paged draw, the fewest that still fail.
void fewer_sequences(gen::SizeShape& cur, const SizeSearch& search) {
  const bool varlen = search.ctx.failed_case && search.ctx.failed_case->problem.varlen();
  for (int64_t n = 1; varlen && n < 16; ++n) {
    gen::SizeShape s = cur;
    s.sequences = n;
    if (search.fails(s)) {
      cur = s;
      break;
    }
  }
}

// Values: the simplest of these that still fails, at the shape found
// (element-wise shrinking, as for small problems, would cost thousands of
// calls here). The regime first: plain values, if the failure does not
// need it.
void plain_regime(gen::SizeShape& cur, const SizeSearch& search) {
  if (cur.regime == gen::SizeRegime::plain) return;
  gen::SizeShape s = cur;
  s.regime = gen::SizeRegime::plain;
  if (search.fails(s)) cur = s;
}

// Then q = 0 and small integers, small integers, q = 0.
void simpler_values(gen::SizeShape& cur, const SizeSearch& search) {
  for (const auto& [small, zero_q] : {std::pair{true, true}, {true, false}, {false, true}}) {
    gen::SizeShape s = cur;
    s.small_values = small;
    s.zero_queries = zero_q;
    if (search.fails(s)) {
      cur = s;
      break;
    }
  }
}

}  // namespace

const std::vector<ShrinkPass>& shrink_passes() {
  static const std::vector<ShrinkPass> passes = {
      {"drop_batch_entries",
       [](const Problem& p) {
         std::vector<SliceChoice> choices;
         if (p.batch > 1)
           for (int64_t b = 0; b < p.batch; ++b) choices.push_back({b, std::nullopt, std::nullopt});
         return choices;
       }},
      {"drop_heads",
       [](const Problem& p) {
         // With grouped K/V a group goes with its query heads; without, one
         // query head at a time.
         std::vector<SliceChoice> choices;
         if (p.kv_heads > 1)
           for (int64_t g = 0; g < p.kv_heads; ++g) choices.push_back({std::nullopt, g, std::nullopt});
         else if (p.heads > 1)
           for (int64_t h = 0; h < p.heads; ++h) choices.push_back({std::nullopt, std::nullopt, h});
         return choices;
       }},
  };
  return passes;
}

void run_shrink_passes(const PropertyDef& prop, CaseContext& ctx) {
  // A slice keeps the args and stays dense: eligibility is decided once.
  if (!ctx.failed_case || names_a_slice(prop, ctx.failed_case->args) ||
      ctx.failed_case->problem.varlen())
    return;
  const auto fails = [&](const Problem& p) {
    if (prop.not_a_case && prop.not_a_case(p)) return false;
    return judge_once(prop, ctx, Case{p, ctx.failed_case->args}).failed();
  };
  const int cases = ctx.cases, discarded = ctx.discarded;
  const auto reasons = ctx.discard_reasons;
  const double budget = ctx.max_budget_used;
  bool progress = true;
  while (progress) {
    progress = false;
    const Problem p = ctx.failed_case->problem;
    for (const ShrinkPass& pass : shrink_passes()) {
      for (const SliceChoice& choice : pass.slices(p)) {
        if (fails(slice_problem(p, choice))) {
          progress = true;
          break;
        }
      }
      if (progress) break;
    }
  }
  ctx.cases = cases;
  ctx.discarded = discarded;
  ctx.discard_reasons = reasons;
  ctx.max_budget_used = budget;
}

const std::vector<SizeShrinkPass>& size_shrink_passes() {
  static const std::vector<SizeShrinkPass> passes = {
      drop("drop_softcap", [](gen::SizeShape& s) { s.softcap = 0; }),
      drop("drop_bias", [](gen::SizeShape& s) { s.bias = false; }),
      drop("drop_mask", [](gen::SizeShape& s) { s.explicit_mask = false; }),
      drop("drop_window", [](gen::SizeShape& s) { s.window_left = s.window_right = -1; }),
      drop("drop_causal", [](gen::SizeShape& s) { s.causal = false; }),
      drop("drop_key_padding", [](gen::SizeShape& s) { s.key_padding = false; }),
      {"narrow_window", narrow_window},
      {"shorten_keys", shorten_keys},
      {"shorten_queries", shorten_queries},
      {"narrow_window_again", narrow_window},
      {"shrink_dk", shrink_dk},
      {"shrink_dv", shrink_dv},
      {"fewer_heads", fewer_heads},
      {"fewer_batch_entries", fewer_batch_entries},
      {"fewer_sequences", fewer_sequences},
      {"plain_regime", plain_regime},
      {"simpler_values", simpler_values},
  };
  return passes;
}

gen::SizeShape shrink_at_size(const gen::SizeShape& found, const SizeSearch& search) {
  gen::SizeShape cur = found;
  for (const SizeShrinkPass& pass : size_shrink_passes()) pass.shrink(cur, search);
  return cur;
}

int64_t smallest_failing(int64_t start, const std::vector<int64_t>& grid,
                         const std::function<bool(int64_t)>& fails) {
  int64_t lo = 0, hi = start;  // lo passes (0: nothing below 1), hi fails
  for (int64_t g : grid) {
    if (g >= start) break;
    if (fails(g)) {
      hi = g;
      break;
    }
    lo = g;
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fails(mid) ? hi : lo) = mid;
  }
  return hi;
}

}  // namespace attncheck
