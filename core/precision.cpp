// Comparing precisions component by component (SPEC 4.1): which of two is
// looser, and the loosest and tightest of two. A component is a stage's
// format (compared by unit roundoff), exp_ulps, the number of rescales an
// online softmax makes (key_block), and each flushing format.

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "attncheck/implementation.h"

namespace attncheck {
namespace {

// The unit roundoff of Q's rounding in a call with K/V in kv (0: none).
// Q8_0 rounds an element to a step of its block's largest / 127, so an
// element far below its block's largest may round to 0: a relative error
// up to 1, looser than every float format.
double q_cast_u(const PrecisionTraits& t, DType kv) {
  const std::optional<DType> f = t.q_cast_format(kv);
  if (f && is_block_format(*f)) return 1.0;
  return f ? unit_roundoff(*f) : 0.0;
}

// A stage's format, and how it is read from / written to a PrecisionTraits.
struct Stage {
  const char* name;
  DType (*get)(const PrecisionTraits&);
  void (*set)(PrecisionTraits&, DType);
};

const std::array<Stage, 6> kStages = {{
    {"accum", [](const PrecisionTraits& t) { return t.accum; },
     [](PrecisionTraits& t, DType d) { t.accum = d; }},
    {"score_accum", [](const PrecisionTraits& t) { return t.score_format(); },
     [](PrecisionTraits& t, DType d) { t.score_accum = d; }},
    {"s_cast", [](const PrecisionTraits& t) { return t.s_cast_format(); },
     [](PrecisionTraits& t, DType d) { t.s_cast = d; }},
    {"softmax_accum", [](const PrecisionTraits& t) { return t.softmax_format(); },
     [](PrecisionTraits& t, DType d) { t.softmax_accum = d; }},
    {"p_cast", [](const PrecisionTraits& t) { return t.p_cast; },
     [](PrecisionTraits& t, DType d) { t.p_cast = d; }},
    {"pv_accum", [](const PrecisionTraits& t) { return t.pv_format(); },
     [](PrecisionTraits& t, DType d) { t.pv_accum = d; }},
}};

constexpr std::array<std::pair<uint32_t, const char*>, 4> kFlushes = {{
    {kFtzAccum, "accum"}, {kFtzPCast, "p_cast"}, {kFtzOut, "out"}, {kFtzPvAccum, "pv_accum"}}};

// Rescales of a row of n keys: ceil(n / key_block) - 1, none for one pass.
// `a` makes at least as many as `b` for every n when b is one pass, or a
// uses blocks no longer than b's.
bool at_least_as_many_rescales(int64_t a, int64_t b) { return b == 0 || (a != 0 && a <= b); }

// The union / intersection of two precisions' flushing formats as explicit
// ftz_formats bits (0 when none flushes, which then means the same).
uint32_t flush_bits(const PrecisionTraits& t) {
  uint32_t bits = 0;
  for (const auto& [bit, name] : kFlushes)
    if (t.flushes(bit)) bits |= bit;
  return bits;
}

PrecisionTraits combine(const PrecisionTraits& a, const PrecisionTraits& b, DType kv,
                        bool loose) {
  PrecisionTraits r;
  const auto pick = [loose](DType x, DType y) {
    return (unit_roundoff(x) >= unit_roundoff(y)) == loose ? x : y;
  };
  for (const Stage& s : kStages) s.set(r, pick(s.get(a), s.get(b)));
  // Stages equal to accum are stored as declared all the same: the
  // tolerance reads the formats, not whether they were spelled.
  const double ua = q_cast_u(a, kv), ub = q_cast_u(b, kv);
  r.q_cast = (ua >= ub) == loose ? a.q_cast_format(kv) : b.q_cast_format(kv);
  r.exp_ulps = loose ? std::max(a.exp_ulps, b.exp_ulps) : std::min(a.exp_ulps, b.exp_ulps);
  r.key_block = at_least_as_many_rescales(a.key_block, b.key_block) == loose ? a.key_block
                                                                             : b.key_block;
  r.ftz_formats = loose ? (flush_bits(a) | flush_bits(b)) : (flush_bits(a) & flush_bits(b));
  // A pv_accum flush bit is only read when pv_accum is declared (it is, above).
  return r;
}

}  // namespace

std::string tighter_component(const PrecisionTraits& loose, const PrecisionTraits& tight) {
  for (const Stage& s : kStages) {
    if (unit_roundoff(s.get(loose)) < unit_roundoff(s.get(tight)))
      return fmt::format("{} {} is tighter than {}", s.name, dtype_name(s.get(loose)),
                         dtype_name(s.get(tight)));
  }
  // Element K/V formats only: Q_CAST_KV with block K/V is Q8_0, looser
  // than every float format, so a float q_cast beside it would count as
  // tighter for every existing plugin; and a harness that judges by the
  // descriptor alone (the reason for this check) never runs block K/V.
  for (DType kv : kAllFormats) {
    if (q_cast_u(loose, kv) < q_cast_u(tight, kv)) {
      const auto name = [kv](const PrecisionTraits& t) {
        const std::optional<DType> f = t.q_cast_format(kv);
        return f ? std::string(dtype_name(*f)) : std::string("none");
      };
      return fmt::format("q_cast {} is tighter than {} (K/V in {})", name(loose), name(tight),
                         dtype_name(kv));
    }
  }
  if (loose.exp_ulps < tight.exp_ulps)
    return fmt::format("exp_ulps {} is fewer than {}", loose.exp_ulps, tight.exp_ulps);
  if (!at_least_as_many_rescales(loose.key_block, tight.key_block))
    return fmt::format("key_block {} makes fewer rescales than {}", loose.key_block,
                       tight.key_block);
  for (const auto& [bit, name] : kFlushes)
    if (tight.flushes(bit) && !loose.flushes(bit))
      return fmt::format("{} does not flush where the other does", name);
  return "";
}

PrecisionTraits loosest(const PrecisionTraits& a, const PrecisionTraits& b, DType kv) {
  return combine(a, b, kv, true);
}

PrecisionTraits tightest(const PrecisionTraits& a, const PrecisionTraits& b, DType kv) {
  return combine(a, b, kv, false);
}

}  // namespace attncheck
