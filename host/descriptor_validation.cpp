// The checks of SPEC 5.1 on one plugin descriptor, of either ABI version
// (validate_plugin_descriptor of host/plugin_loader.h): every field a
// call or the harness reads is known and sane before the descriptor
// becomes an implementation, including the stages and paths appended to
// version 2 (SPEC 4.1) where its struct_size covers them.

#include "host/descriptor_validation.h"

#include <fmt/format.h>

#include <cstddef>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <tuple>
#include <string_view>
#include <utility>

#include "attncheck/dtype.h"
#include "host/plugin_loader.h"
#include "attncheck/registry.h"
#include "core/text.h"
#include "host/abi_marshal.h"

namespace attncheck {
namespace {

using host_detail::Abi;

constexpr uint32_t kKnownDtypes =
    (1u << ATTNCHECK_F64) | (1u << ATTNCHECK_F32) | (1u << ATTNCHECK_BF16) | (1u << ATTNCHECK_F16);
constexpr uint32_t kKnownFtz =
    ATTNCHECK_FTZ_ACCUM | ATTNCHECK_FTZ_P_CAST | ATTNCHECK_FTZ_OUT | ATTNCHECK_FTZ_PV_ACCUM;
constexpr uint32_t kKnownStages = ATTNCHECK_STAGE_Q_CAST | ATTNCHECK_STAGE_SCORE_ACCUM |
                                  ATTNCHECK_STAGE_SOFTMAX_ACCUM | ATTNCHECK_STAGE_PV_ACCUM;
// A bound that only a garbage descriptor exceeds.
constexpr uint32_t kMaxCombos = 256;

// The feature bits ABI version `version` defines.
constexpr uint32_t known_features(uint32_t version) {
  return version >= 2 ? (ATTNCHECK_FEATURE_DESCALE << 1) - 1
                      : (ATTNCHECK_FEATURE_NONDETERMINISTIC << 1) - 1;
}

// Reads a NUL-terminated C string of at most 255 characters, or nullopt.
std::optional<std::string> bounded_string(const char* s) {
  const size_t n = strnlen(s, 256);
  if (n == 256) return std::nullopt;
  return std::string(s, n);
}

// Which fp8 and block formats a descriptor field takes (SPEC 1.1, 1.2 and
// 4): q_dtype the fp8 formats; kv_dtype those and the block formats Q8_0
// and Q4_0 (K/V storage only); p_cast and s_cast E4M3 (u = 2^-4, inside
// the first-order limit 0.1) but not E5M2 (u = 2^-3, past it); an
// accumulation and the output neither.
enum class FormatField { input, kv, cast, other };

// What is wrong with format code `code` in a descriptor field of
// `version`, or "": every field takes f64, f32, bf16 and f16; version 2's
// fields take the fp8 and block formats `field` allows.
std::string format_defect(uint32_t code, uint32_t version, FormatField field) {
  const uint32_t last_known = version >= 2 ? ATTNCHECK_Q4_0 : ATTNCHECK_F16;
  if (code > last_known) return fmt::format("{} is no dtype", code);
  if (code <= ATTNCHECK_F16) return "";
  const std::string_view name = dtype_name(static_cast<DType>(code));
  if (is_block_format(static_cast<DType>(code))) {
    if (field == FormatField::kv) return "";
    return fmt::format("{} is {}, a block format for K/V only (SPEC 1.2: kv_dtype{})", code,
                       name, code == ATTNCHECK_Q8_0 ? ", and q_cast" : "");
  }
  if (field == FormatField::input || field == FormatField::kv) return "";
  if (field == FormatField::other) {
    return fmt::format("{} is {}, an input format only (this field takes f64, f32, bf16 or f16)",
                       code, name);
  }
  if (code == ATTNCHECK_E4M3) return "";
  return fmt::format(
      "{} is {}, an input format only (this field takes f64, f32, bf16, f16 or e4m3: e5m2's u = "
      "2^-3 is past the first-order limit of SPEC 4)",
      code, name);
}

using Fail = std::function<void(const std::string&)>;

// What is wrong with a q_cast code (SPEC 4.1), or "": a float format,
// Q8_0 (Q quantized in blocks of 32 as ggml does for block-quantized K), or
// ATTNCHECK_Q_CAST_KV. Q4_0 is never one: no kernel rounds Q that coarsely.
std::string q_cast_defect(uint32_t code) {
  if (code == ATTNCHECK_Q_CAST_KV || code == ATTNCHECK_Q8_0) return "";
  if (code == ATTNCHECK_Q4_0) {
    return "7 (Q4_0) is never a q_cast: use a float format, Q8_0 or ATTNCHECK_Q_CAST_KV";
  }
  if (code > ATTNCHECK_E5M2) {
    return fmt::format(
        "{} is no dtype (q_cast takes a float format, Q8_0 or ATTNCHECK_Q_CAST_KV)", code);
  }
  return "";
}

// The checks of a version 2 precision, the descriptor's own or a path's:
// the same fields with the same rules, each defect reported through `fail`
// with the field's name.
template <typename Declaration>
void validate_precision(const Declaration& d, const Fail& fail) {
  using enum FormatField;
  if (const std::string e = format_defect(d.precision.accum, 2, other); !e.empty())
    fail("precision.accum " + e);
  if (const std::string e = format_defect(d.precision.p_cast, 2, cast); !e.empty())
    fail("precision.p_cast " + e);
  if (d.precision.flush_to_zero > 1) fail("precision.flush_to_zero must be 0 or 1");
  if (d.precision.key_block < 0) fail("precision.key_block is negative");
  if (const std::string e = format_defect(d.s_cast, 2, cast); !e.empty()) fail("s_cast " + e);
  if (d.ftz_formats & ~kKnownFtz)
    fail(fmt::format("unknown ftz_formats bits {:#x}", d.ftz_formats & ~kKnownFtz));
}

// The checks of a stages struct (SPEC 4.1 and 5.1): known bits, and each
// declared stage's format: q_cast a float format or ATTNCHECK_Q_CAST_KV;
// every accumulation f64, f32, bf16 or f16 (an fp8 accumulation's u is past
// the first-order limit). A field whose bit is clear is not read.
void validate_stages(const attncheck_stages& s, const Fail& fail) {
  if (s.set & ~kKnownStages)
    fail(fmt::format("unknown stages.set bits {:#x}", s.set & ~kKnownStages));
  if (s.set & ATTNCHECK_STAGE_Q_CAST) {
    if (const std::string e = q_cast_defect(s.q_cast); !e.empty()) fail("stages.q_cast " + e);
  }
  const std::tuple<uint32_t, const char*, uint32_t> accums[] = {
      {ATTNCHECK_STAGE_SCORE_ACCUM, "score_accum", s.score_accum},
      {ATTNCHECK_STAGE_SOFTMAX_ACCUM, "softmax_accum", s.softmax_accum},
      {ATTNCHECK_STAGE_PV_ACCUM, "pv_accum", s.pv_accum}};
  for (const auto& [bit, field, code] : accums) {
    if (!(s.set & bit)) continue;
    if (const std::string e = format_defect(code, 2, FormatField::other); !e.empty())
      fail(fmt::format("stages.{} {}", field, e));
  }
}

// The paths of a version 2 descriptor whose struct_size covers them (SPEC
// 4.1 and 5.1): a plausible count, an array at a stride no smaller than the
// first attncheck_path layout, names valid and unique, each path's
// precision valid like the descriptor's and no looser than the
// descriptor's own in any component. `where` names the descriptor.
void validate_paths(const attncheck_impl& d, const std::string& where) {
  const auto fail = [&](const std::string& what) { throw InputError(where + ": " + what); };
  if (d.n_paths > host_detail::kMaxPaths)
    fail(fmt::format("implausible n_paths {} (at most {})", d.n_paths, host_detail::kMaxPaths));
  if (d.n_paths == 0) return;
  if (!d.paths) fail(fmt::format("n_paths is {} but paths is NULL", d.n_paths));
  const uint32_t stride = d.paths[0].struct_size;
  if (stride < host_detail::kFirstPathSize) {
    fail(fmt::format(
        "paths[0].struct_size is {}, smaller than attncheck_path ({} bytes): set it to "
        "sizeof(attncheck_path)",
        stride, host_detail::kFirstPathSize));
  }
  if (stride > host_detail::kMaxStructSize)
    fail(fmt::format("paths[0]: implausible struct_size {}", stride));
  const auto* base = reinterpret_cast<const unsigned char*>(d.paths);
  for (uint32_t k = 1; k < d.n_paths; ++k) {
    uint32_t size = 0;
    std::memcpy(&size, base + size_t{k} * stride, sizeof size);
    if (size != stride) {
      fail(fmt::format("paths[{}].struct_size is {}, but paths[0]'s is {} (the array stride)", k,
                       size, stride));
    }
  }
  const std::vector<attncheck_path> paths = host_detail::declared_paths(d);
  const PrecisionTraits own = host_detail::declared_precision(d);
  std::map<std::string, uint32_t> seen;
  for (uint32_t k = 0; k < paths.size(); ++k) {
    const attncheck_path& p = paths[k];
    std::string path_where = fmt::format("paths[{}]", k);
    const auto path_fail = [&](const std::string& what) { fail(path_where + ": " + what); };
    if (!p.name) path_fail("name is NULL");
    const auto name = bounded_string(p.name);
    if (!name) path_fail("name is longer than 255 characters");
    if (!valid_impl_name(*name))
      path_fail(fmt::format("name '{}' is not of the form [a-z0-9_.-]+", printable(*name)));
    path_where += fmt::format(" (path '{}')", *name);
    if (const auto [it, fresh] = seen.emplace(*name, k); !fresh)
      path_fail(fmt::format("paths[{}] has the same name", it->second));
    validate_precision(p, path_fail);
    validate_stages(p.stages, path_fail);
    const std::string tighter = tighter_component(own, host_detail::declared_precision(p));
    if (!tighter.empty()) {
      path_fail(fmt::format(
          "the descriptor's own precision is tighter than this path's ({}): it must be the "
          "loosest, since a call that names no path, and older harnesses, judge by the "
          "descriptor alone",
          tighter));
    }
  }
}

template <uint32_t version>
void validate_descriptor(const typename Abi<version>::Descriptor& d, size_t index,
                         const std::string& origin) {
  std::string where = fmt::format("{}: descriptor {}", origin, index);
  const auto fail = [&](const std::string& what) { throw InputError(where + ": " + what); };
  // Nothing past abi_version is read from a descriptor of another version:
  // its layout may differ.
  if (d.abi_version != version) {
    if (d.abi_version == 1 || d.abi_version == 2) {
      fail(fmt::format("abi_version is {}, but the descriptor was read as version {}",
                       d.abi_version, version));
    }
    fail(host_detail::unknown_version(d.abi_version));
  }
  bool has_combos = false;
  if constexpr (version >= 2) {
    if (d.struct_size < host_detail::kFirstV2ImplSize) {
      fail(fmt::format(
          "struct_size is {}, smaller than version 2's attncheck_impl ({} bytes): set it to "
          "sizeof(attncheck_impl)",
          d.struct_size, host_detail::kFirstV2ImplSize));
    }
    has_combos = d.n_combos > 0;
  }
  if (!d.name) fail("name is NULL");
  const auto name = bounded_string(d.name);
  if (!name) fail("name is longer than 255 characters");
  if (!valid_impl_name(*name))
    fail(fmt::format("name '{}' is not of the form [a-z0-9_.-]+", printable(*name)));
  where += fmt::format(" (name '{}')", *name);
  if (d.dtypes == 0 && !has_combos) fail("declares no dtype (dtypes is 0)");
  if (d.dtypes & ((1u << ATTNCHECK_Q8_0) | (1u << ATTNCHECK_Q4_0))) {
    fail(fmt::format(
        "dtypes {:#x} has a bit of Q8_0 or Q4_0: a block format stores K/V only, declared as "
        "the kv_dtype of a combo (SPEC 1.2)",
        d.dtypes));
  }
  if (d.dtypes & ~kKnownDtypes)
    fail(fmt::format("unknown dtype bits {:#x}", d.dtypes & ~kKnownDtypes));
  if (d.features & ~known_features(version)) {
    fail(fmt::format("unknown feature bits {:#x}", d.features & ~known_features(version)));
  }
  if (!d.forward) fail("forward is NULL");
  if ((d.features & ATTNCHECK_FEATURE_BACKWARD) && !d.backward) {
    fail("declares ATTNCHECK_FEATURE_BACKWARD but backward is NULL");
  }
  if (d.empty_rows != ATTNCHECK_EMPTY_ROW_ERROR && d.empty_rows != ATTNCHECK_EMPTY_ROW_ZERO) {
    fail(
        fmt::format("unknown empty_rows policy {} (expected ATTNCHECK_EMPTY_ROW_ERROR or "
                    "ATTNCHECK_EMPTY_ROW_ZERO)",
                    d.empty_rows));
  }
  using enum FormatField;
  if constexpr (version >= 2) {
    validate_precision(d, fail);
  } else {
    if (const std::string e = format_defect(d.precision.accum, version, other); !e.empty())
      fail("precision.accum " + e);
    if (const std::string e = format_defect(d.precision.p_cast, version, cast); !e.empty())
      fail("precision.p_cast " + e);
    if (d.precision.flush_to_zero > 1) fail("precision.flush_to_zero must be 0 or 1");
    if (d.precision.key_block < 0) fail("precision.key_block is negative");
  }
  const auto& l = d.limits;
  const std::pair<const char*, int64_t> limits[] = {
      {"max_tq", l.max_tq}, {"max_tk", l.max_tk}, {"max_batch_heads", l.max_batch_heads},
      {"dk_min", l.dk_min}, {"dk_max", l.dk_max}, {"dk_multiple", l.dk_multiple}};
  for (const auto& [field, value] : limits) {
    if (value < 0) fail(fmt::format("limits.{} is negative ({}; 0 = no limit)", field, value));
  }
  if (l.dk_max > 0 && l.dk_min > l.dk_max) {
    fail(fmt::format("limits.dk_min {} exceeds limits.dk_max {}", l.dk_min, l.dk_max));
  }
  if (l.dv_equals_dk > 1) fail("limits.dv_equals_dk must be 0 or 1");
  if constexpr (version >= 2) {
    if (d.n_combos > kMaxCombos) fail(fmt::format("implausible n_combos {}", d.n_combos));
    if (d.n_combos > 0 && !d.combos)
      fail(fmt::format("n_combos is {} but combos is NULL", d.n_combos));
    for (uint32_t k = 0; k < d.n_combos; ++k) {
      const attncheck_dtype_combo& c = d.combos[k];
      const std::pair<const char*, std::string> fields[] = {
          {"q_dtype", format_defect(c.q_dtype, version, input)},
          {"kv_dtype", format_defect(c.kv_dtype, version, kv)},
          {"out_dtype", format_defect(c.out_dtype, version, other)}};
      for (const auto& [field, e] : fields) {
        if (!e.empty()) fail(fmt::format("combos[{}].{} {}", k, field, e));
      }
    }
    if (has_combos && d.dtypes != 0) {
      const uint32_t uniform = host_detail::uniform_dtypes(host_detail::declared_combos(d));
      if (d.dtypes != uniform) {
        fail(fmt::format(
            "dtypes {:#x} does not match combos: with combos, dtypes is 0 or the formats d "
            "whose {{d, d, d}} is listed ({:#x})",
            d.dtypes, uniform));
      }
    }
    // Appended to version 2 (SPEC 4.1): read only where struct_size covers
    // them (the loader zero-fills the rest: no stages, no paths).
    if (host_detail::covers(d, offsetof(attncheck_impl, stages), sizeof d.stages))
      validate_stages(d.stages, fail);
    if (host_detail::covers(d, offsetof(attncheck_impl, paths), sizeof d.paths))
      validate_paths(d, where);
  }
}

}  // namespace

std::string host_detail::unknown_version(uint32_t version) {
  return fmt::format(
      "abi_version is {}, but this attncheck speaks ATTNCHECK_ABI_VERSION 1 and 2 (rebuild the "
      "plugin against its plugin.h)",
      version);
}

void validate_plugin_descriptor(const attncheck_impl& d, size_t index, const std::string& origin) {
  validate_descriptor<2>(d, index, origin);
}

void validate_plugin_descriptor(const attncheck_v1_impl& d, size_t index,
                                const std::string& origin) {
  validate_descriptor<1>(d, index, origin);
}

}  // namespace attncheck
