// describe's text (formats/declaration_text.h).

#include "formats/declaration_text.h"

#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/features.h"
#include "core/text.h"

namespace attncheck {
namespace {

std::string or_none(const std::vector<std::string>& names) {
  return names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", "));
}

// The precision line: the version 1 and 2 traits, then the stages a
// declaration spells out (SPEC 4.1; an undeclared stage is not shown, so a
// declaration without stages reads as it always did).
std::string precision_text(const PrecisionTraits& p) {
  std::string text = fmt::format(
      "accum {}, p_cast {}, s_cast {}, exp_ulps {}, key_block {}", dtype_name(p.accum),
      dtype_name(p.p_cast),
      // S not cast stays in the q.k sums' format.
      p.s_cast        ? std::string(dtype_name(*p.s_cast))
      : p.score_accum ? fmt::format("{} (score_accum)", dtype_name(*p.score_accum))
                      : fmt::format("{} (accum)", dtype_name(p.accum)),
      p.exp_ulps, p.key_block ? std::to_string(p.key_block) : std::string("0 (one pass)"));
  if (p.q_cast_kv) {
    text += ", q_cast kv";
  } else if (p.q_cast) {
    text += fmt::format(", q_cast {}", dtype_name(*p.q_cast));
  }
  for (const auto& [name, stage] : {std::pair{"score_accum", &p.score_accum},
                                    {"softmax_accum", &p.softmax_accum},
                                    {"pv_accum", &p.pv_accum}}) {
    if (*stage) text += fmt::format(", {} {}", name, dtype_name(**stage));
  }
  return text;
}

// The flush line: which formats flush (ftz_formats names PV_ACCUM when
// pv_accum's bit is declared).
std::string flush_text(const PrecisionTraits& p) {
  return fmt::format("{}, ftz_formats {}", p.flush_to_zero ? "yes" : "no",
                     p.ftz_formats ? or_none(bit_names(p.ftz_formats, ftz_format_table()))
                                   : std::string("0 (flush to zero decides)"));
}

}  // namespace

std::string declaration_text(const ImplInfo& i) {
  std::string out;
  const auto limit = [](int64_t v) { return v ? std::to_string(v) : std::string("none"); };
  std::vector<std::string> dtypes, combos;
  for (DType d : kAllDTypes)
    if (i.supports(d)) dtypes.emplace_back(dtype_name(d));
  for (const DTypeCombo& c : i.combos) combos.push_back(combo_name(c));
  const Limits& l = i.limits;
  out += fmt::format("{}\n", printable(i.name));
  out += fmt::format("  kind:          {}\n", kind_name(i.kind));
  out += fmt::format("  description:   {}\n", printable(i.description));
  out += fmt::format("  origin:        {}\n", i.origin.empty() ? "built-in" : printable(i.origin));
  if (!i.caught_by.empty()) out += fmt::format("  caught by:     {}\n", printable(i.caught_by));
  out += fmt::format("  dtypes:        {}\n", or_none(dtypes));
  out += fmt::format("  combos:        {}\n",
             combos.empty() ? std::string("q = k/v = out, for each dtype")
                            : fmt::format("{}", fmt::join(combos, " ")));
  out += fmt::format("  features:      {} (0x{:x})\n", or_none(feature_names(i.features)), i.features);
  out += fmt::format("  empty rows:    {}\n", i.empty_rows == EmptyRowPolicy::zero ? "zero" : "error");
  out += fmt::format("  precision:     {}\n", precision_text(i.precision));
  out += fmt::format("  flush to zero: {}\n", flush_text(i.precision));
  out += fmt::format("  limits:        max_tq {}, max_tk {}, max_batch_heads {}, dk_min {}, dk_max {}, "
             "dk_multiple {}, dv_equals_dk {}\n",
             limit(l.max_tq), limit(l.max_tk), limit(l.max_batch_heads), limit(l.dk_min),
             limit(l.dk_max), limit(l.dk_multiple), l.dv_equals_dk ? "yes" : "no");
  // Each dispatch path (SPEC 4.1), its precision as the two lines above
  // show the declaration's own.
  for (const ImplPath& path : i.paths) {
    out += fmt::format("  path {}: {}; flush to zero {}\n", printable(path.name),
                       precision_text(path.precision), flush_text(path.precision));
  }
  return out;
}

}  // namespace attncheck
