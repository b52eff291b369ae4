// The real-size phase of a property run (SPEC 3 "Real sizes"): after the
// small problems pass, the profile's fixed real-size shapes and random
// real-size draws, each fitted to the implementation's limits and the
// profile's cost cap, one case each. A failure is shrunk by search, not by
// RapidCheck: RapidCheck's greedy shrinking stops at local minima of the
// size (a 64-key tile bug fails at 65 and 129 but not at 100), so the
// search walks the length grid upwards and bisects: the reported length n
// fails and n - 1 and every grid length below n pass. The structure the
// failure does not need (softcap, bias, mask, window, causal, padding) is
// dropped first, and a window shrinks to the narrowest that fails, before
// and after the lengths. Then head dims, heads and batch the same way, and
// last the values (a few simpler kinds).

#include <algorithm>
#include <functional>
#include <optional>

#include <fmt/format.h>
#include <rapidcheck.h>
#include <rapidcheck/detail/TestListenerAdapter.h>

#include "run/real_sizes.h"

#include "properties/case_context.h"
#include "properties/seeds.h"

namespace attncheck {
namespace {

enum class Verdict { pass, fail, discarded };

// Cases per profile: fixed shapes taken (all, or a share) and random draws.
struct Plan {
  size_t fixed_share;  // 0 = every fixed shape
  int random;
};

Plan plan_for(AtSize at_size, Profile profile) {
  const bool thorough = profile == Profile::thorough;
  if (at_size == AtSize::all) return {0, thorough ? 16 : 3};
  return {thorough ? size_t{6} : size_t{1}, thorough ? 4 : 1};
}

bool same(const gen::SizeShape& a, const gen::SizeShape& b) {
  return a.batch == b.batch && a.heads == b.heads && a.kv_heads == b.kv_heads && a.tq == b.tq &&
         a.tk == b.tk && a.dk == b.dk && a.dv == b.dv && a.causal == b.causal &&
         a.align == b.align && a.key_padding == b.key_padding && a.small_values == b.small_values &&
         a.zero_queries == b.zero_queries && a.sequences == b.sequences && a.regime == b.regime &&
         a.window_left == b.window_left && a.window_right == b.window_right &&
         a.explicit_mask == b.explicit_mask && a.bias == b.bias && a.softcap == b.softcap;
}

// The smallest n in [1, start] with fails(n), searched as the header says;
// `start` fails. Grid lengths below it are tried upwards until one fails,
// then the gap to the last passing one is bisected.
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

}  // namespace

SizePhase run_real_sizes(const std::string& property, AtSize at_size, CaseContext& ctx,
                         const DrawFn& draw, const JudgeFn& judge, uint64_t seed) {
  SizePhase phase;
  const Profile profile = ctx.config().profile;
  ctx.set_size(std::nullopt);
  const gen::GenSpec spec = ctx.spec();
  const int64_t cap = gen::size_cost_cap(profile);
  const int64_t weight = gen::reference_weight(ctx.info());

  // The shapes: the fixed list and the structural covering set (or this
  // property's share of the fixed list, starting at a place of its own so
  // that the catalog covers the list), then the random draws; fitted,
  // duplicates dropped.
  const Plan plan = plan_for(at_size, profile);
  const std::vector<gen::SizeShape> fixed = gen::fixed_real_shapes(profile);
  std::vector<gen::SizeShape> shapes;
  const auto add = [&](const gen::SizeShape& s) {
    gen::SizeShape f = gen::fit_shape(s, spec, cap, weight);
    for (const auto& x : shapes)
      if (same(x, f)) return;
    f.variant = static_cast<int64_t>(shapes.size());  // the parts it takes, in turn
    // The value regimes in turn (SPEC 3: each in a real-size MatchesOracle
    // case of every run), numbered from far-below scores so that with
    // CI's 13 fixed shapes near-flat scores come at tk 1025 and far-below
    // ones at the decode over 4097 keys. Properties with a share of the
    // shapes draw
    // plain values: their judges change values (sums of two value sets,
    // translated keys) within limits the regimes sit near.
    if (at_size == AtSize::all) {
      f.regime = static_cast<gen::SizeRegime>((shapes.size() + 2) % gen::kSizeRegimes);
    }
    shapes.push_back(f);
  };
  if (plan.fixed_share == 0) {
    for (const auto& s : fixed) add(s);
    for (const auto& s : gen::structural_real_shapes()) add(s);
  } else {
    const size_t start = fnv1a(property) % fixed.size();
    const size_t step = fixed.size() / plan.fixed_share;
    for (size_t k = 0; k < plan.fixed_share; ++k) add(fixed[(start + k * step) % fixed.size()]);
  }
  for (int k = 0; k < plan.random; ++k) {
    add(gen::random_real_shape(profile, mix(seed ^ (0x5157ull + static_cast<uint64_t>(k)))));
  }

  // One case at a shape: drawn with RapidCheck (the property's own draw,
  // at that shape), judged, never shrunk by it. The verdict, a discard by
  // the draw or the judge included, is caught inside the testable, so
  // RapidCheck sees a success and never runs the case again: given a
  // failure it would describe the counterexample (draw the problem again
  // and print every element: gigabytes at these sizes, minutes per case;
  // the search below judges dozens), and having given up after discards
  // it would run the last case again, calls and all, for its message. A
  // discarded case is drawn again at the shape with the next seed,
  // kDrawsPerShape draws in all.
  constexpr int kDrawsPerShape = 3;
  rc::detail::TestListenerAdapter listener;
  const auto run_at = [&](const gen::SizeShape& s, uint64_t case_seed) {
    ctx.set_size(s);
    rc::detail::TestMetadata metadata;
    metadata.id = property + "/real-size";
    for (int draw_index = 0; draw_index < kDrawsPerShape; ++draw_index) {
      ctx.last_discard_reason.clear();
      ctx.case_beyond_precision = false;
      rc::detail::TestParams params;
      params.seed =
          draw_index == 0 ? case_seed : mix(case_seed + static_cast<uint64_t>(draw_index));
      params.maxSuccess = 1;
      params.maxSize = 100;
      params.disableShrinking = true;
      Verdict verdict = Verdict::discarded;
      const auto testable = [&] {
        std::optional<Case> c;
        try {
          c = draw(ctx);
        } catch (const rc::detail::CaseResult& r) {
          if (r.type != rc::detail::CaseResult::Type::Discard) throw;
          return;
        } catch (const rc::GenerationFailure&) {  // the draw's own discard
          return;
        }
        ctx.begin(*c);
        verdict = Verdict::pass;
        try {
          judge(ctx, *c);
        } catch (const rc::detail::CaseResult& r) {
          if (r.type == rc::detail::CaseResult::Type::Discard) verdict = Verdict::discarded;
          if (r.type == rc::detail::CaseResult::Type::Failure) verdict = Verdict::fail;
        } catch (const std::exception& e) {  // a failure, as RapidCheck would take it
          verdict = Verdict::fail;
          try {
            ctx.fail(fmt::format("exception while judging: {}", e.what()));
          } catch (const rc::detail::CaseResult&) {
          }
        }
      };
      const auto result = rc::detail::checkProperty(rc::detail::toProperty(testable), metadata,
                                                    params, listener, {});
      rc::detail::SuccessResult success;
      if (!result.match(success)) return Verdict::fail;  // the draw threw
      if (verdict != Verdict::discarded) return verdict;
    }
    return Verdict::discarded;
  };

  for (size_t k = 0; k < shapes.size(); ++k) {
    const uint64_t case_seed = mix(seed ^ (0xA11CEull + k));
    const Verdict v = run_at(shapes[k], case_seed);
    // The shape's verdict, by its last draw: a discarded shape by the
    // reason of its last discard (kDrawsPerShape draws all discarded).
    RealSizeCounts& n = phase.counts;
    ++n.shapes;
    if (ctx.case_beyond_precision) ++n.beyond_precision;
    if (v == Verdict::discarded) {
      if (ctx.last_discard_reason == "unsupported by the implementation") {
        ++n.unsupported;
      } else if (!ctx.case_beyond_precision) {
        ++n.discarded;
      }
    } else {
      ++n.judged;
    }
    if (v != Verdict::fail) continue;
    // Shrink by search, the case's seed fixed: its values stay where they
    // were (generators.h: SizeShape).
    const gen::SizeShape found = shapes[k];
    gen::SizeShape cur = found;
    const auto fails = [&](const gen::SizeShape& s) { return run_at(s, case_seed) == Verdict::fail; };
    // The structure the failure does not need, dropped first: softcap,
    // bias, mask, window, causal, key padding, each kept only if the case
    // passes without it.
    const std::vector<std::function<void(gen::SizeShape&)>> drops = {
        [](gen::SizeShape& s) { s.softcap = 0; },
        [](gen::SizeShape& s) { s.bias = false; },
        [](gen::SizeShape& s) { s.explicit_mask = false; },
        [](gen::SizeShape& s) { s.window_left = s.window_right = -1; },
        [](gen::SizeShape& s) { s.causal = false; },
        [](gen::SizeShape& s) { s.key_padding = false; },
    };
    for (const auto& drop : drops) {
      gen::SizeShape s = cur;
      drop(s);
      if (!same(s, cur) && fails(s)) cur = s;
    }
    // A window towards the smallest that still fails, each bound searched
    // as a length (bound + 1 on the grid: 0 is a bound); before the
    // lengths, which a narrow window lets shrink further, and after them.
    const auto shrink_window = [&] {
      if (cur.window_left > 0) {
        cur.window_left = smallest_failing(cur.window_left + 1, gen::length_grid(), [&](int64_t n) {
          gen::SizeShape s = cur;
          s.window_left = n - 1;
          return fails(s);
        }) - 1;
      }
      if (cur.window_right > 0) {
        cur.window_right = smallest_failing(cur.window_right + 1, gen::length_grid(), [&](int64_t n) {
          gen::SizeShape s = cur;
          s.window_right = n - 1;
          return fails(s);
        }) - 1;
      }
    };
    shrink_window();
    // Queries past the keys would leave rows empty (bottom-right causal) or
    // lose the window (top-left windows, which the draw then unbinds).
    const bool tq_within_tk = (cur.causal && cur.align == Align::bottom_right) || cur.windowed();
    cur.tk = smallest_failing(cur.tk, gen::length_grid(), [&](int64_t n) {
      gen::SizeShape s = cur;
      s.tk = n;
      if (tq_within_tk) s.tq = std::min(s.tq, n);
      return fails(s);
    });
    if (tq_within_tk) cur.tq = std::min(cur.tq, cur.tk);
    cur.tq = smallest_failing(cur.tq, gen::length_grid(), [&](int64_t n) {
      gen::SizeShape s = cur;
      s.tq = n;
      return fails(s);
    });
    shrink_window();
    const Limits& lim = spec.limits;
    std::vector<int64_t> dims;
    for (int64_t d : gen::head_dim_grid()) {
      if (d >= std::max<int64_t>(1, lim.dk_min) && (lim.dk_max <= 0 || d <= lim.dk_max) &&
          (lim.dk_multiple <= 1 || d % lim.dk_multiple == 0)) {
        dims.push_back(d);
      }
    }
    const bool free_dims = lim.dk_multiple <= 1;  // bisection may visit any dim
    const auto dim_search = [&](int64_t start, const std::function<bool(int64_t)>& f) {
      return free_dims ? smallest_failing(start, dims, f) : [&] {
        for (int64_t d : dims)
          if (d < start && f(d)) return d;
        return start;
      }();
    };
    cur.dk = dim_search(cur.dk, [&](int64_t d) {
      gen::SizeShape s = cur;
      s.dk = d;
      if (lim.dv_equals_dk) s.dv = d;
      return fails(s);
    });
    if (lim.dv_equals_dk) cur.dv = cur.dk;
    if (!lim.dv_equals_dk) {
      cur.dv = smallest_failing(cur.dv, gen::head_dim_grid(), [&](int64_t d) {
        gen::SizeShape s = cur;
        s.dv = d;
        return fails(s);
      });
    }
    // Heads: the smallest (heads, kv_heads) that still fails.
    for (int64_t h = 1; h <= cur.heads; ++h) {
      bool done = false;
      for (int64_t kv = 1; kv <= std::min(h, cur.kv_heads) && !done; ++kv) {
        if (h % kv || (h == cur.heads && kv == cur.kv_heads)) continue;
        if (kv != h && !(spec.features & ATTNCHECK_FEATURE_GQA)) continue;
        gen::SizeShape s = cur;
        s.heads = h;
        s.kv_heads = kv;
        if (fails(s)) {
          cur = s;
          done = true;
        }
      }
      if (done || h == cur.heads) break;
    }
    for (int64_t b = 1; b < cur.batch; ++b) {
      gen::SizeShape s = cur;
      s.batch = b;
      if (fails(s)) {
        cur = s;
        break;
      }
    }
    // The sequences of a packed or paged draw, the fewest that still fail.
    const bool varlen = ctx.failed_case && ctx.failed_case->problem.varlen();
    for (int64_t n = 1; varlen && n < 16; ++n) {
      gen::SizeShape s = cur;
      s.sequences = n;
      if (fails(s)) {
        cur = s;
        break;
      }
    }
    // Values: the simplest of these that still fails, at the shape found
    // (element-wise shrinking, as for small problems, would cost thousands
    // of calls here): q = 0 and small integers, small integers, q = 0.
    // The regime first: plain values, if the failure does not need it.
    if (cur.regime != gen::SizeRegime::plain) {
      gen::SizeShape s = cur;
      s.regime = gen::SizeRegime::plain;
      if (fails(s)) cur = s;
    }
    for (const auto& [small, zero_q] : {std::pair{true, true}, {true, false}, {false, true}}) {
      gen::SizeShape s = cur;
      s.small_values = small;
      s.zero_queries = zero_q;
      if (fails(s)) {
        cur = s;
        break;
      }
    }
    run_at(cur, case_seed);  // leaves the final case as ctx's counterexample
    phase.failed = true;
    phase.found = fmt::format(
        "  at real size: found at {} ({}); shrunk by search to {}{}\n", found.describe(),
        found.label, cur.describe(),
        cur.tk > 1 ? fmt::format(" (tk {} fails; tk {} and every grid length below pass)", cur.tk,
                                 cur.tk - 1)
                   : "");
    break;
  }
  ctx.set_size(std::nullopt);
  return phase;
}

}  // namespace attncheck
