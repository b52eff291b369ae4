// describe's text (formats/declaration_text.h).

#include "formats/declaration_text.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/features.h"
#include "core/text.h"

namespace attncheck {

std::string declaration_text(const ImplInfo& i) {
  std::string out;
  const auto or_none = [](const std::vector<std::string>& names) {
    return names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", "));
  };
  const auto limit = [](int64_t v) { return v ? std::to_string(v) : std::string("none"); };
  std::vector<std::string> dtypes, combos;
  for (DType d : kAllDTypes)
    if (i.supports(d)) dtypes.emplace_back(dtype_name(d));
  for (const DTypeCombo& c : i.combos) combos.push_back(combo_name(c));
  const PrecisionTraits& p = i.precision;
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
  out += fmt::format("  precision:     accum {}, p_cast {}, s_cast {}, exp_ulps {}, key_block {}\n",
             dtype_name(p.accum), dtype_name(p.p_cast),
             p.s_cast ? std::string(dtype_name(*p.s_cast)) : fmt::format("{} (accum)", dtype_name(p.accum)),
             p.exp_ulps, p.key_block ? std::to_string(p.key_block) : std::string("0 (one pass)"));
  out += fmt::format("  flush to zero: {}, ftz_formats {}\n", p.flush_to_zero ? "yes" : "no",
             p.ftz_formats ? or_none(bit_names(p.ftz_formats, ftz_format_table()))
                           : std::string("0 (flush to zero decides)"));
  out += fmt::format("  limits:        max_tq {}, max_tk {}, max_batch_heads {}, dk_min {}, dk_max {}, "
             "dk_multiple {}, dv_equals_dk {}\n",
             limit(l.max_tq), limit(l.max_tk), limit(l.max_batch_heads), limit(l.dk_min),
             limit(l.dk_max), limit(l.dk_multiple), l.dv_equals_dk ? "yes" : "no");
  return out;
}

}  // namespace attncheck
