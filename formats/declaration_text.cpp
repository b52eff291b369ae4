// describe's text (formats/declaration_text.h).

#include "formats/declaration_text.h"

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/features.h"
#include "core/fields.h"
#include "core/text.h"

namespace attncheck {
namespace {

std::string or_none(const std::vector<std::string>& names) {
  return names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", "));
}

// The precision fields the two lines below lay out by hand; every other
// one (a stage: an optional format) the walk of core/fields.h shows.
constexpr std::array<std::string_view, 9> kPrecisionByHand{
    "accum",  "p_cast", "exp_ulps", "flush_to_zero", "key_block",
    "s_cast", "ftz_formats", "q_cast", "q_cast_kv"};
static_assert(fields::handled_by(fields::kPrecisionFields, fields::kDescribe, kPrecisionByHand),
              "a precision field describe shows is neither laid out here nor plain");

// declaration_text lays a declaration out by hand: these fields.
constexpr std::array<std::string_view, 12> kInfoByHand{
    "name",   "kind",   "dtypes",      "features",  "empty_rows", "precision",
    "limits", "description", "caught_by", "origin", "combos",     "paths"};
static_assert(fields::handled_by(fields::kImplInfoFields, fields::kDescribe, kInfoByHand),
              "an ImplInfo field describe shows is not laid out here");

// The limits line: each limit by the walk, "none" for 0, yes or no.
std::string limits_text(const Limits& l) {
  std::string text;
  fields::for_each_limits_field(l, [&](const fields::Field& f, const auto& x) {
    using M = std::remove_cvref_t<decltype(x)>;
    static_assert(std::is_same_v<M, int64_t> || std::is_same_v<M, bool>,
                  "a limit is a count or a yes/no");
    if (!f.in(fields::kDescribe)) return;
    std::string value;
    if constexpr (std::is_same_v<M, bool>) {
      value = x ? "yes" : "no";
    } else {
      value = x ? std::to_string(x) : std::string("none");
    }
    text += fmt::format("{}{} {}", text.empty() ? "" : ", ", f.shown_as, value);
  });
  return text;
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
  // Every other stage by the walk (score_accum, softmax_accum, pv_accum),
  // shown where declared.
  fields::for_each_precision_field(p, [&](const fields::Field& f, const auto& stage) {
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(stage)>, std::optional<DType>>) {
      if (f.in(fields::kDescribe) && !fields::named(f.name, kPrecisionByHand) && stage) {
        text += fmt::format(", {} {}", f.shown_as, dtype_name(*stage));
      }
    }
  });
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
  std::vector<std::string> dtypes, combos;
  for (DType d : kAllDTypes)
    if (i.supports(d)) dtypes.emplace_back(dtype_name(d));
  for (const DTypeCombo& c : i.combos) combos.push_back(combo_name(c));
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
  out += fmt::format("  limits:        {}\n", limits_text(i.limits));
  // Every other field by the walk (threads), one line each where it is
  // not the default, so a declaration without it reads as before.
  const ImplInfo defaults;
  fields::walk2(fields::kImplInfoFields, i, defaults, [&](const fields::Field& f, const auto& x,
                                                          const auto& d) {
    using M = std::remove_cvref_t<decltype(x)>;
    if constexpr (std::is_integral_v<M> && !std::is_same_v<M, bool>) {
      if (f.in(fields::kDescribe) && !fields::named(f.name, kInfoByHand) && x != d) {
        out += fmt::format("  {:<14} {}\n", fmt::format("{}:", f.shown_as), x);
      }
    }
  });
  // Each dispatch path (SPEC 4.1), its precision as the two lines above
  // show the declaration's own.
  for (const ImplPath& path : i.paths) {
    out += fmt::format("  path {}: {}; flush to zero {}\n", printable(path.name),
                       precision_text(path.precision), flush_text(path.precision));
  }
  return out;
}

}  // namespace attncheck
