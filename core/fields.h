#pragma once
// The fields of a Problem and of an ImplInfo, described once: each data
// member (by member pointer) with the name the JSON file and the Python
// dict spell it, the word `describe` shows it by, and the codecs that carry
// it (the JSON fixture, the worker wire, the C ABI, the Python bridge, the
// text and JSON of describe, a packed or paged problem's sequences).
//
// Every codec walks these lists. A member of a plain type (an integer, a
// double, a bool, a format: GenericValue) is carried by the walk itself,
// spelled by its name; a codec writes by hand only the members whose
// layout it documents (a tensor, the JSON file's "window", the C ABI's
// struct), and names them in its list of hand-written fields. A
// static_assert in each codec (handled_by) fails the build when a field it
// carries is neither of a plain type nor in its list, so a codec cannot
// forget a field: a new scalar crosses every codec without a line there.
// The C ABI's struct (plugin.h) is the one layout no walk can write: it is
// checked by tests/core/test_fields.cpp.
//
// Adding a data member to Problem, ImplInfo, PrecisionTraits or Limits
// without a line here fails the build (the static_asserts below count the
// members with Boost.PFR).

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <tuple>
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

/// The plain types a walk carries without a hand-written line: an integer,
/// a double, a bool, a format, an optional format. Each codec spells them
/// its one way (JSON: a number, true/false, the format's name; describe:
/// "name value").
template <typename T>
inline constexpr bool GenericValue =
    std::is_same_v<T, int64_t> || std::is_same_v<T, uint32_t> || std::is_same_v<T, double> ||
    std::is_same_v<T, bool> || std::is_same_v<T, DType> ||
    std::is_same_v<T, std::optional<DType>>;

/// The codecs a field can cross, as bits of Field::codecs.
enum Codec : unsigned {
  kJson = 1u << 0,      ///< the attncheck-problem-1 file / implementation_json
  kWire = 1u << 1,      ///< harness <-> worker (host/wire.cpp)
  kCAbi = 1u << 2,      ///< plugin.h's attncheck_problem / attncheck_impl
  kPython = 1u << 3,    ///< the Python bridge's dict
  kDescribe = 1u << 4,  ///< describe's text (the failure report, `describe`)
  /// sequence_problem: each sequence of a packed or paged problem takes it
  /// as it is (the shape, the tensors and the layouts are cut per sequence).
  kSequence = 1u << 5,
  kAll = kJson | kWire | kCAbi | kPython | kDescribe | kSequence,
};

/// One data member.
struct Field {
  std::string_view name;  ///< as the JSON file and the Python dict spell it
  unsigned codecs = kAll;  ///< Codec bits of the codecs that carry it
  std::string_view shown_as = name;  ///< the word describe's text shows it by
  /// The JSON file's keys for it, space-separated, in SPEC 5.3's order.
  std::string_view json_as = name;

  constexpr bool in(Codec c) const { return (codecs & c) != 0; }
};

/// A Field and the member it describes.
template <typename S, typename M>
struct Member {
  Field field;
  M S::*ptr;
  using type = M;
};

template <typename S, typename M>
constexpr Member<S, M> member(Field f, M S::*ptr) {
  return {f, ptr};
}

/// The serving parts of a problem (SPEC 1.1) the Python bridge does not
/// offer (_declare.py): sinks, descales, packed and paged layouts. Its
/// input formats (q_dtype, kv_dtype: mixed, fp8 and block K/V) it does.
inline constexpr unsigned kNotPython = kAll & ~kPython;
/// The parts a sequence of a packed or paged problem has its own of.
inline constexpr unsigned kPerSequence = kAll & ~kSequence;

/// The members of a Problem, in declaration order.
inline constexpr auto kProblemFields = std::make_tuple(
    member({"dtype"}, &Problem::dtype),
    // The shape: a sequence has one batch and its own tq and tk.
    member({"batch", kPerSequence}, &Problem::batch),
    member({"heads"}, &Problem::heads),
    member({"kv_heads"}, &Problem::kv_heads),
    member({"tq", kPerSequence}, &Problem::tq),
    member({"tk", kPerSequence}, &Problem::tk),
    member({"dk"}, &Problem::dk),
    member({"dv"}, &Problem::dv),
    member({"q", kPerSequence, "Q ="}, &Problem::q),
    member({"k", kPerSequence, "K ="}, &Problem::k),
    member({"v", kPerSequence, "V ="}, &Problem::v),
    member({"key_valid", kPerSequence}, &Problem::key_valid),
    member({"mask", kPerSequence}, &Problem::mask),
    member({"bias", kPerSequence}, &Problem::bias),
    member({"causal"}, &Problem::causal),
    member({"align"}, &Problem::align),
    // The JSON file spells the two as "window": [left, right].
    member({"window_left", kAll, "window [", "window"}, &Problem::window_left),
    member({"window_right", kAll, "window [", "window"}, &Problem::window_right),
    member({"scale"}, &Problem::scale),
    member({"softcap"}, &Problem::softcap),
    // The failure report describes the forward problem; dout's values are in
    // the fixture.
    member({"dout", kPerSequence & ~kDescribe}, &Problem::dout),
    // Version 2 (SPEC 1.1). describe shows the two input formats as one
    // combination, "formats q=...,kv=...,out=...".
    member({"q_dtype", kAll, "formats"}, &Problem::q_dtype),
    member({"kv_dtype", kAll, "formats"}, &Problem::kv_dtype),
    member({"descale", kNotPython}, &Problem::descale),
    member({"sink", kNotPython}, &Problem::sink),
    // The JSON file spells it as cu_seqlens_q and cu_seqlens_k, top level.
    member({"packed", kNotPython & kPerSequence, "cu_seqlens_", "cu_seqlens_q cu_seqlens_k"},
           &Problem::packed),
    member({"paged", kNotPython & kPerSequence}, &Problem::paged));
static_assert(std::tuple_size_v<decltype(kProblemFields)> == boost::pfr::tuple_size_v<Problem>,
              "a Problem member was added or removed: describe it here");

/// The members of PrecisionTraits (ImplInfo::precision).
inline constexpr auto kPrecisionFields = std::make_tuple(
    member({"accum"}, &PrecisionTraits::accum),
    member({"p_cast"}, &PrecisionTraits::p_cast),
    member({"exp_ulps"}, &PrecisionTraits::exp_ulps),
    member({"flush_to_zero", kAll, "flush to zero"}, &PrecisionTraits::flush_to_zero),
    member({"key_block"}, &PrecisionTraits::key_block),
    member({"s_cast"}, &PrecisionTraits::s_cast),
    // Version 2 of the C ABI; the Python bridge speaks version 1 (+ s_cast).
    member({"ftz_formats", kAll & ~kPython}, &PrecisionTraits::ftz_formats),
    // Precision by stage (SPEC 4.1): the C ABI's attncheck_stages, read where
    // a descriptor's struct_size covers it. q_cast_kv is the C ABI's
    // ATTNCHECK_Q_CAST_KV, spelled q_cast "kv" in JSON and Python too.
    member({"q_cast"}, &PrecisionTraits::q_cast),
    member({"q_cast_kv", kAll, "q_cast kv"}, &PrecisionTraits::q_cast_kv),
    member({"score_accum"}, &PrecisionTraits::score_accum),
    member({"softmax_accum"}, &PrecisionTraits::softmax_accum),
    member({"pv_accum"}, &PrecisionTraits::pv_accum));
static_assert(std::tuple_size_v<decltype(kPrecisionFields)> ==
                  boost::pfr::tuple_size_v<PrecisionTraits>,
              "a PrecisionTraits member was added or removed: describe it here");

/// The members of Limits (ImplInfo::limits).
inline constexpr auto kLimitsFields = std::make_tuple(
    member({"max_tq"}, &Limits::max_tq),
    member({"max_tk"}, &Limits::max_tk),
    member({"max_batch_heads"}, &Limits::max_batch_heads),
    member({"dk_min"}, &Limits::dk_min),
    member({"dk_max"}, &Limits::dk_max),
    member({"dk_multiple"}, &Limits::dk_multiple),
    member({"dv_equals_dk"}, &Limits::dv_equals_dk));
static_assert(std::tuple_size_v<decltype(kLimitsFields)> == boost::pfr::tuple_size_v<Limits>,
              "a Limits member was added or removed: describe it here");

/// The members of an ImplInfo (precision and limits as one member each:
/// kPrecisionFields and kLimitsFields describe theirs).
inline constexpr auto kImplInfoFields = std::make_tuple(
    member({"name"}, &ImplInfo::name),
    // Where an implementation comes from is the loader's to say, not the
    // descriptor's: a plugin or Python declaration is always kind plugin,
    // with origin its file and (C ABI) description "from FILE".
    member({"kind", kJson | kWire | kDescribe}, &ImplInfo::kind),
    member({"dtypes"}, &ImplInfo::dtypes),
    member({"features"}, &ImplInfo::features),
    member({"empty_rows", kAll, "empty rows"}, &ImplInfo::empty_rows),
    member({"precision"}, &ImplInfo::precision),
    member({"limits"}, &ImplInfo::limits),
    member({"description", kAll & ~kCAbi}, &ImplInfo::description),
    // Only the broken twins are caught by a property.
    member({"caught_by", kJson | kWire | kDescribe, "caught by"}, &ImplInfo::caught_by),
    member({"origin", kJson | kWire | kDescribe}, &ImplInfo::origin),
    // Version 2 of the C ABI; the Python bridge takes them in dtypes=[...]
    // as their spellings ("q=f32,kv=q8_0,out=f32").
    member({"combos"}, &ImplInfo::combos),
    // Dispatch paths (SPEC 4.1); the Python bridge takes them inside
    // precision={..., "paths": [...]}.
    member({"paths", kAll, "path "}, &ImplInfo::paths),
    // The adapter's own to say (ggml's _mt, 3): `check --jobs` counts them.
    // A plugin or a Python file runs in its caller's threads, 1.
    member({"threads", kJson | kWire | kDescribe}, &ImplInfo::threads));
static_assert(std::tuple_size_v<decltype(kImplInfoFields)> == boost::pfr::tuple_size_v<ImplInfo>,
              "an ImplInfo member was added or removed: describe it here");

/// Calls f(Field, member of x) for every member `fields` describes, in its
/// order (x const or not).
template <typename Fields, typename X, typename F>
void walk(const Fields& fields, X& x, F&& f) {
  std::apply([&](const auto&... m) { (f(m.field, x.*(m.ptr)), ...); }, fields);
}

/// Calls f(Field, member of a, the same member of b) for every member.
template <typename Fields, typename A, typename B, typename F>
void walk2(const Fields& fields, A& a, B& b, F&& f) {
  std::apply([&](const auto&... m) { (f(m.field, a.*(m.ptr), b.*(m.ptr)), ...); }, fields);
}

/// Whether `name` is among `names`.
template <size_t N>
constexpr bool named(std::string_view name, const std::array<std::string_view, N>& names) {
  for (std::string_view n : names)
    if (n == name) return true;
  return false;
}

/// Whether a codec covers every field of `fields` it carries (bit c): each
/// is of a GenericValue type, which the codec's walk carries, or named in
/// `by_hand`, the fields the codec writes itself. And every name in
/// `by_hand` is a field (a renamed field fails too). Each codec
/// static_asserts it.
template <typename Fields, size_t N>
constexpr bool handled_by(const Fields& fields, Codec c,
                          const std::array<std::string_view, N>& by_hand) {
  const bool every_field = std::apply(
      [&](const auto&... m) {
        return ((!m.field.in(c) ||
                 GenericValue<typename std::remove_cvref_t<decltype(m)>::type> ||
                 named(m.field.name, by_hand)) &&
                ...);
      },
      fields);
  bool every_name = true;
  for (std::string_view n : by_hand) {
    every_name = every_name && std::apply(
                                   [&](const auto&... m) { return ((m.field.name == n) || ...); },
                                   fields);
  }
  return every_field && every_name;
}

/// Copies from `from` to `to` every member of `fields` that carries bit c.
template <typename Fields, typename S>
void copy_fields(const Fields& fields, Codec c, const S& from, S& to) {
  std::apply([&](const auto&... m) { ((m.field.in(c) ? void(to.*(m.ptr) = from.*(m.ptr)) : void()), ...); },
             fields);
}

/// The walks by struct, as the wire and the tests call them: f(Field,
/// member) for every data member, in declaration order.
template <typename P, typename F>
void for_each_problem_field(P& p, F&& f) {
  walk(kProblemFields, p, f);
}
template <typename T, typename F>
void for_each_precision_field(T& t, F&& f) {
  walk(kPrecisionFields, t, f);
}
template <typename T, typename F>
void for_each_limits_field(T& t, F&& f) {
  walk(kLimitsFields, t, f);
}
template <typename I, typename F>
void for_each_impl_info_field(I& i, F&& f) {
  walk(kImplInfoFields, i, f);
}

}  // namespace attncheck::fields
