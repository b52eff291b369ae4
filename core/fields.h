#pragma once
// The fields of a Problem and of an ImplInfo, described once: each data
// member with the name the JSON file and the Python dict spell it, the
// word `describe` shows it by, and the codecs that carry it (the JSON
// fixture, the worker wire, the C ABI, the Python bridge, the text and
// JSON of describe). The worker wire walks these lists; the other codecs
// keep their documented layouts, and tests/core/test_fields.cpp checks
// each of them against the lists, so a field a codec forgets fails there.
//
// Adding a data member to Problem, ImplInfo, PrecisionTraits or Limits
// without a line here fails the build (the static_asserts below count the
// members with Boost.PFR).

#include <optional>
#include <string_view>
#include <type_traits>
#include <vector>

#include <boost/pfr/core.hpp>

#include "attncheck/implementation.h"
#include "attncheck/problem.h"

namespace attncheck::fields {

/// What a codec walking the fields dispatches on: an optional member, a
/// vector member.
template <typename T>
struct IsOptional : std::false_type {};
template <typename T>
struct IsOptional<std::optional<T>> : std::true_type {};
template <typename T>
struct IsVector : std::false_type {};
template <typename T>
struct IsVector<std::vector<T>> : std::true_type {};

/// The codecs a field can cross, as bits of Field::codecs.
enum Codec : unsigned {
  kJson = 1u << 0,      ///< the attncheck-problem-1 file / implementation_json
  kWire = 1u << 1,      ///< harness <-> worker (host/wire.cpp)
  kCAbi = 1u << 2,      ///< plugin.h's attncheck_problem / attncheck_impl
  kPython = 1u << 3,    ///< the Python bridge's dict
  kDescribe = 1u << 4,  ///< describe's text (the failure report, `describe`)
  kAll = kJson | kWire | kCAbi | kPython | kDescribe,
};

/// One data member.
struct Field {
  std::string_view name;  ///< as the JSON file and the Python dict spell it
  unsigned codecs = kAll;  ///< Codec bits of the codecs that carry it
  std::string_view shown_as = name;  ///< the word describe's text shows it by

  bool in(Codec c) const { return (codecs & c) != 0; }
};

/// The version 2 parts of a problem (SPEC 1.1) the Python bridge does not
/// offer (_declare.py): sinks, descales, packed and paged layouts. Its
/// input formats (q_dtype, kv_dtype: mixed, fp8 and block K/V) it does.
inline constexpr unsigned kNotPython = kAll & ~kPython;

/// Calls f(Field, member) for every data member of a Problem (const or
/// not), in declaration order.
template <typename P, typename F>
void for_each_problem_field(P& p, F&& f) {
  static_assert(boost::pfr::tuple_size_v<Problem> == 27,
                "a Problem member was added or removed: describe it here");
  f(Field{"dtype"}, p.dtype);
  f(Field{"batch"}, p.batch);
  f(Field{"heads"}, p.heads);
  f(Field{"kv_heads"}, p.kv_heads);
  f(Field{"tq"}, p.tq);
  f(Field{"tk"}, p.tk);
  f(Field{"dk"}, p.dk);
  f(Field{"dv"}, p.dv);
  f(Field{"q", kAll, "Q ="}, p.q);
  f(Field{"k", kAll, "K ="}, p.k);
  f(Field{"v", kAll, "V ="}, p.v);
  f(Field{"key_valid"}, p.key_valid);
  f(Field{"mask"}, p.mask);
  f(Field{"bias"}, p.bias);
  f(Field{"causal"}, p.causal);
  f(Field{"align"}, p.align);
  // The JSON file spells the two as "window": [left, right].
  f(Field{"window_left", kAll, "window ["}, p.window_left);
  f(Field{"window_right", kAll, "window ["}, p.window_right);
  f(Field{"scale"}, p.scale);
  f(Field{"softcap"}, p.softcap);
  // The failure report describes the forward problem; dout's values are in
  // the fixture.
  f(Field{"dout", kAll & ~kDescribe}, p.dout);
  // Version 2 (SPEC 1.1). describe shows the two input formats as one
  // combination, "formats q=...,kv=...,out=...".
  f(Field{"q_dtype", kAll, "formats"}, p.q_dtype);
  f(Field{"kv_dtype", kAll, "formats"}, p.kv_dtype);
  f(Field{"descale", kNotPython}, p.descale);
  f(Field{"sink", kNotPython}, p.sink);
  // The JSON file spells it as cu_seqlens_q and cu_seqlens_k, top level.
  f(Field{"packed", kNotPython, "cu_seqlens_"}, p.packed);
  f(Field{"paged", kNotPython}, p.paged);
}

/// The same for the members of PrecisionTraits (ImplInfo::precision).
template <typename T, typename F>
void for_each_precision_field(T& t, F&& f) {
  static_assert(boost::pfr::tuple_size_v<PrecisionTraits> == 12,
                "a PrecisionTraits member was added or removed: describe it here");
  f(Field{"accum"}, t.accum);
  f(Field{"p_cast"}, t.p_cast);
  f(Field{"exp_ulps"}, t.exp_ulps);
  f(Field{"flush_to_zero", kAll, "flush to zero"}, t.flush_to_zero);
  f(Field{"key_block"}, t.key_block);
  f(Field{"s_cast"}, t.s_cast);
  // Version 2 of the C ABI; the Python bridge speaks version 1 (+ s_cast).
  f(Field{"ftz_formats", kAll & ~kPython}, t.ftz_formats);
  // Precision by stage (SPEC 4.1): the C ABI's attncheck_stages, read where
  // a descriptor's struct_size covers it. q_cast_kv is the C ABI's
  // ATTNCHECK_Q_CAST_KV, spelled q_cast "kv" in JSON and Python too.
  f(Field{"q_cast"}, t.q_cast);
  f(Field{"q_cast_kv", kAll, "q_cast kv"}, t.q_cast_kv);
  f(Field{"score_accum"}, t.score_accum);
  f(Field{"softmax_accum"}, t.softmax_accum);
  f(Field{"pv_accum"}, t.pv_accum);
}

/// The same for the members of Limits (ImplInfo::limits).
template <typename T, typename F>
void for_each_limits_field(T& t, F&& f) {
  static_assert(boost::pfr::tuple_size_v<Limits> == 7,
                "a Limits member was added or removed: describe it here");
  f(Field{"max_tq"}, t.max_tq);
  f(Field{"max_tk"}, t.max_tk);
  f(Field{"max_batch_heads"}, t.max_batch_heads);
  f(Field{"dk_min"}, t.dk_min);
  f(Field{"dk_max"}, t.dk_max);
  f(Field{"dk_multiple"}, t.dk_multiple);
  f(Field{"dv_equals_dk"}, t.dv_equals_dk);
}

/// The same for the members of an ImplInfo (precision and limits as one
/// member each: for_each_precision_field and for_each_limits_field walk
/// them).
template <typename I, typename F>
void for_each_impl_info_field(I& i, F&& f) {
  static_assert(boost::pfr::tuple_size_v<ImplInfo> == 12,
                "an ImplInfo member was added or removed: describe it here");
  f(Field{"name"}, i.name);
  // Where an implementation comes from is the loader's to say, not the
  // descriptor's: a plugin or Python declaration is always kind plugin,
  // with origin its file and (C ABI) description "from FILE".
  f(Field{"kind", kJson | kWire | kDescribe}, i.kind);
  f(Field{"dtypes"}, i.dtypes);
  f(Field{"features"}, i.features);
  f(Field{"empty_rows", kAll, "empty rows"}, i.empty_rows);
  f(Field{"precision"}, i.precision);
  f(Field{"limits"}, i.limits);
  f(Field{"description", kAll & ~kCAbi}, i.description);
  // Only the broken twins are caught by a property.
  f(Field{"caught_by", kJson | kWire | kDescribe, "caught by"}, i.caught_by);
  f(Field{"origin", kJson | kWire | kDescribe}, i.origin);
  // Version 2 of the C ABI; the Python bridge takes them in dtypes=[...]
  // as their spellings ("q=f32,kv=q8_0,out=f32").
  f(Field{"combos"}, i.combos);
  // Dispatch paths (SPEC 4.1); the Python bridge takes them inside
  // precision={..., "paths": [...]}.
  f(Field{"paths", kAll, "path "}, i.paths);
}

}  // namespace attncheck::fields
