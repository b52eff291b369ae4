// Tests of the field lists of core/fields.h against every codec of a
// Problem and an ImplInfo: the worker wire carries every field of a value
// the lists set to non-defaults; the JSON file, the C ABI and describe's
// text carry every field their bit says they do, for sample problems that
// between them set each such field; a sequence of a packed problem keeps
// every field it takes as it is; a saved file's keys come in SPEC 5.3's
// order. The codecs walk the lists (a field of a plain type needs no line
// in them, any other fails their static_assert until written by hand);
// these tests catch a hand-written line that drops its field, and the C
// ABI, whose struct no walk writes. (The Python bridge:
// tests/python/test_fields.py.)

#include <bit>
#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/pfr/core.hpp>
#include <gtest/gtest.h>

#include "formats/json.h"
#include "core/text.h"
#include "formats/declaration_text.h"
#include "properties/gen/generators.h"
#include "formats/pretty_json.h"
#include "formats/report.h"
#include "core/fields.h"
#include "properties/case_context.h"
#include "host/abi_marshal.h"
#include "host/wire.h"

namespace attncheck {
namespace {

using fields::Field;


// Whether a and b hold the same value (doubles bit for bit, structs member
// by member).
template <typename T>
bool same(const T& a, const T& b) {
  if constexpr (std::is_same_v<T, double>) {
    return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
  } else if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T> ||
                       std::is_same_v<T, std::string> ||
                       std::is_same_v<T, std::array<int64_t, 4>>) {
    return a == b;
  } else if constexpr (fields::IsVector<T>::value) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!same(a[i], b[i])) return false;
    return true;
  } else if constexpr (fields::IsOptional<T>::value) {
    return a.has_value() == b.has_value() && (!a || same(*a, *b));
  } else {
    const auto ta = boost::pfr::structure_tie(a);
    const auto tb = boost::pfr::structure_tie(b);
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return (same(std::get<I>(ta), std::get<I>(tb)) && ...);
    }(std::make_index_sequence<boost::pfr::tuple_size_v<T>>{});
  }
}

// x changed to a value its type's default is not (every member of a struct,
// one element of a vector, an engaged optional).
template <typename T>
void set_non_default(T& x) {
  if constexpr (std::is_same_v<T, bool>) {
    x = !x;
  } else if constexpr (std::is_floating_point_v<T>) {
    x += 0.375;
  } else if constexpr (std::is_arithmetic_v<T>) {
    x += 3;
  } else if constexpr (std::is_enum_v<T>) {
    x = static_cast<T>(static_cast<std::underlying_type_t<T>>(x) + 1);
  } else if constexpr (std::is_same_v<T, std::string>) {
    x += "x";
  } else if constexpr (std::is_same_v<T, std::array<int64_t, 4>>) {
    for (int64_t& s : x) s += 1;
  } else if constexpr (fields::IsVector<T>::value) {
    x.emplace_back();
    set_non_default(x.back());
  } else if constexpr (fields::IsOptional<T>::value) {
    set_non_default(x.emplace());
  } else {
    boost::pfr::for_each_field(x, [](auto& m) { set_non_default(m); });
  }
}

// The walks of core/fields.h as objects, and two values walked together:
// f(field, member of a, same member of b).
const auto problem_walk = [](auto& p, auto&& f) { fields::for_each_problem_field(p, f); };
const auto info_walk = [](auto& i, auto&& f) { fields::for_each_impl_info_field(i, f); };
const auto precision_walk = [](auto& t, auto&& f) { fields::for_each_precision_field(t, f); };
const auto limits_walk = [](auto& t, auto&& f) { fields::for_each_limits_field(t, f); };

template <typename Walk, typename T, typename F>
void zip(Walk walk, const T& a, const T& b, F f) {
  std::vector<const void*> others;
  walk(b, [&](const Field&, const auto& m) { others.push_back(&m); });
  size_t i = 0;
  walk(a, [&](const Field& field, const auto& m) {
    using M = std::remove_cvref_t<decltype(m)>;
    f(field, m, *static_cast<const M*>(others[i++]));
  });
}

// A value whose every field differs from the default's, built from the
// field list (a new field is covered without a line here).
template <typename T, typename Walk>
T every_field_set(Walk walk) {
  T x;
  walk(x, [](const Field&, auto& m) { set_non_default(m); });
  return x;
}

// Fails naming each field `codec` carries that differs between a value
// and what came back.
template <typename Walk, typename T>
void expect_carried(Walk walk, fields::Codec codec, const T& sent, const T& back,
                    const std::string& what) {
  zip(walk, sent, back, [&](const Field& f, const auto& x, const auto& y) {
    if (f.in(codec)) {
      EXPECT_TRUE(same(x, y)) << what << " lost field '" << f.name << "'";
    }
  });
}

// ---- The worker wire: every field, whatever its value.

TEST(Fields, TheWireCarriesEveryProblemField) {
  const Problem sent = every_field_set<Problem>(problem_walk);
  const Problem defaults;
  zip(problem_walk, sent, defaults, [](const Field& f, const auto& x, const auto& d) {
    EXPECT_FALSE(same(x, d)) << f.name << " is still its default";
  });
  host_detail::Writer w;
  host_detail::put_problem(w, sent);
  host_detail::Reader r(w.bytes());
  expect_carried(problem_walk, fields::kWire, sent, host_detail::get_problem(r), "the wire");
}

TEST(Fields, TheWireCarriesEveryImplInfoField) {
  const ImplInfo sent = every_field_set<ImplInfo>(info_walk);
  host_detail::Writer w;
  host_detail::put_info(w, sent);
  host_detail::Reader r(w.bytes());
  expect_carried(info_walk, fields::kWire, sent, host_detail::get_info(r), "the wire");
}

// ---- Sample problems: valid, small, and between them every field set.

Problem dense_sample() {
  Problem p = Problem::zeros(DType::bf16, 2, 2, 1, 2, 3, 2, 2);
  p.q_dtype = DType::e4m3;
  p.kv_dtype = DType::e5m2;
  for (size_t i = 0; i < p.q.data.size(); ++i) p.q.data[i] = 0.5 * static_cast<double>(i % 3);
  for (size_t i = 0; i < p.k.data.size(); ++i) p.k.data[i] = -0.25 * static_cast<double>(i % 5);
  for (size_t i = 0; i < p.v.data.size(); ++i) p.v.data[i] = 1.5 - static_cast<double>(i % 4);
  p.key_valid = {1, 1, 0, 1, 0, 1};
  p.mask = Broadcast<uint8_t>{1, 2, {1, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1}};
  p.bias = Broadcast<double>{2, 1, {0.5, 0, 0, 0, 0, -1, 0, 0, 2, 0, 0, 0}};
  p.causal = true;
  p.align = Align::bottom_right;
  p.window_left = 2;
  p.window_right = 1;
  p.scale = 0.75;
  p.softcap = 8;
  p.dout.assign(2 * 2 * 2 * 2, 0.25);
  p.descale = Descales{0.5, 2, 0.125};
  p.sink = {0.5, -1};
  return p;
}

Problem packed_sample() {
  Problem p = Problem::zeros(DType::f32, 2, 1, 1, 2, 2, 1, 1);
  p.packed = PackedSeqs{{0, 2, 3}, {0, 1, 3}};
  p.q = make_tensor(1, 3, 1, 1);
  p.q.strides = {0, 1, 1, 1};
  p.k = make_tensor(1, 3, 1, 1);
  p.k.strides = {0, 1, 1, 1};
  p.v = make_tensor(1, 3, 1, 1);
  p.v.strides = {0, 1, 1, 1};
  p.q.data = {1, 2, 3};
  p.k.data = {0.5, -1, 2};
  p.v.data = {4, 5, 6};
  return p;
}

Problem paged_sample() {
  Problem p = Problem::zeros(DType::f64, 2, 2, 2, 1, 3, 1, 1);
  p.paged = PagedKv{{3, 1}, {1, 0, 2, -1}, 2, 2, 3};
  p.k = make_tensor(3, 2, 2, 1);
  p.v = make_tensor(3, 2, 2, 1);
  p.k.data = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  p.v.data = {-1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11, -12};
  return p;
}

std::vector<Problem> samples() {
  std::vector<Problem> v{dense_sample(), packed_sample(), paged_sample()};
  for (const Problem& p : v) p.validate();
  return v;
}

// Every field `codec` carries is set (not its default) in some sample:
// a new field needs a sample value here before the codecs are judged on it.
TEST(Fields, TheSamplesSetEveryField) {
  const Problem defaults;
  std::set<std::string_view> set;
  for (const Problem& p : samples()) {
    zip(problem_walk, p, defaults, [&](const Field& f, const auto& x, const auto& d) {
      if (!same(x, d)) set.insert(f.name);
    });
  }
  problem_walk(defaults, [&](const Field& f, const auto&) {
    EXPECT_TRUE(set.count(f.name)) << "no sample sets field '" << f.name << "'";
  });
}

// ---- The JSON file (SPEC 5.3).

TEST(Fields, TheJsonFileCarriesItsProblemFields) {
  for (const Problem& p : samples()) {
    const Problem back =
        problem_from_json(nlohmann::json::parse(problem_to_json(p).dump()), "sample.json");
    expect_carried(problem_walk, fields::kJson, p, back, "the JSON file");
  }
}

TEST(Fields, DescribeJsonNamesEveryImplInfoField) {
  const ImplInfo info = every_field_set<ImplInfo>(info_walk);
  const nlohmann::json j = implementation_json(info);
  info_walk(info, [&](const Field& f, const auto&) {
    if (f.in(fields::kJson)) {
      EXPECT_TRUE(j.contains(f.name)) << "describe --json lacks " << f.name;
    }
  });
  precision_walk(info.precision, [&](const Field& f, const auto&) {
    if (f.in(fields::kJson)) {
      EXPECT_TRUE(j["precision"].contains(f.name)) << "describe --json lacks precision." << f.name;
    }
  });
  limits_walk(info.limits, [&](const Field& f, const auto&) {
    if (f.in(fields::kJson)) {
      EXPECT_TRUE(j["limits"].contains(f.name)) << "describe --json lacks limits." << f.name;
    }
  });
}

// A saved file lists its keys in SPEC 5.3's order (formats/pretty_json.cpp
// takes a problem's from core/fields.h): this order, which files written
// before keep.
TEST(Fields, ASavedFileKeepsSpecOrder) {
  const std::vector<std::string> spec{
      "format",       "dtype",        "batch",     "heads",     "kv_heads",
      "tq",           "tk",           "dk",        "dv",        "q",
      "k",            "v",            "key_valid", "mask",      "bias",
      "causal",       "align",        "window",    "scale",     "softcap",
      "dout",         "q_dtype",      "kv_dtype",  "descale",   "sink",
      "cu_seqlens_q", "cu_seqlens_k", "paged",     "page_size", "num_pages",
      "block_table_stride", "block_table", "seqlens_k", "shape", "data",
      "problem",      "args",         "expected",  "meta",      "a_later_key", "z_last_key"};
  nlohmann::json j = nlohmann::json::object();
  for (const std::string& key : spec) j[key] = 0;
  const nlohmann::json order = nlohmann::json::parse(formats::pretty_json(j));
  // Parsed back, keys sort; read them off the text instead.
  const std::string text = formats::pretty_json(j);
  std::vector<std::string> keys;
  for (size_t at = text.find("\n \""); at != std::string::npos; at = text.find("\n \"", at + 1)) {
    const size_t from = at + 3;
    keys.push_back(text.substr(from, text.find('"', from) - from));
  }
  EXPECT_EQ(keys, spec);
  EXPECT_EQ(order.size(), spec.size());
}

// ---- sequence_problem: every field a sequence takes as it is (kSequence).

TEST(Fields, ASequenceKeepsEveryFieldItTakesAsItIs) {
  Problem p = packed_sample();
  p.causal = true;
  p.align = Align::bottom_right;
  p.window_left = 1;
  p.window_right = 0;
  p.scale = 0.75;
  p.softcap = 8;
  p.q_dtype = DType::e4m3;
  p.kv_dtype = DType::e5m2;
  p.descale = Descales{0.5, 2, 0.125};
  p.sink = {0.5};
  p.validate();
  const Problem defaults;
  zip(problem_walk, p, defaults, [&](const Field& f, const auto& x, const auto& d) {
    if (f.in(fields::kSequence) && f.name != "heads" && f.name != "kv_heads" && f.name != "dk" &&
        f.name != "dv") {
      EXPECT_FALSE(same(x, d)) << "the sample leaves '" << f.name << "' at its default";
    }
  });
  for (int64_t b = 0; b < p.batch; ++b) {
    expect_carried(problem_walk, fields::kSequence, p, sequence_problem(p, b),
                   "sequence_problem");
  }
}

// ---- The C ABI (plugin.h, version 2): marshal, then read the C struct
// back as a plugin would.

double load(DType d, const void* base, size_t i) {
  const auto* bytes = static_cast<const unsigned char*>(base);
  switch (d) {
    case DType::f64: {
      double x;
      std::memcpy(&x, bytes + i * 8, 8);
      return x;
    }
    case DType::f32: {
      float x;
      std::memcpy(&x, bytes + i * 4, 4);
      return x;
    }
    case DType::bf16:
    case DType::f16: {
      uint16_t b;
      std::memcpy(&b, bytes + i * 2, 2);
      return d == DType::bf16 ? bf16_value(b) : f16_value(b);
    }
    default:
      return fp8_value(d, bytes[i]);
  }
}

template <typename T>
std::vector<T> copy_of(const T* data, size_t n) {
  return data ? std::vector<T>(data, data + n) : std::vector<T>{};
}

// The problem a plugin reads from c, sized like `like` (the C struct holds
// pointers, not lengths).
Problem from_c(const attncheck_problem& c, const void* dout, const Problem& like) {
  Problem p;
  p.dtype = static_cast<DType>(c.dtype);
  p.batch = c.batch;
  p.heads = c.heads;
  p.kv_heads = c.kv_heads;
  p.tq = c.tq;
  p.tk = c.tk;
  p.dk = c.dk;
  p.dv = c.dv;
  const DType qf = static_cast<DType>(c.q_dtype), kvf = static_cast<DType>(c.kv_dtype);
  const auto tensor = [](DType f, const void* data, const int64_t (&strides)[4], size_t n) {
    Tensor t;
    for (size_t i = 0; i < n; ++i) t.data.push_back(load(f, data, i));
    std::copy(strides, strides + 4, t.strides.begin());
    return t;
  };
  p.q = tensor(qf, c.q, c.q_strides, like.q.data.size());
  p.k = tensor(kvf, c.k, c.k_strides, like.k.data.size());
  p.v = tensor(kvf, c.v, c.v_strides, like.v.data.size());
  p.key_valid = copy_of(c.key_valid, like.key_valid.size());
  const auto broadcast = [&](const auto* data, const int64_t (&strides)[4], size_t n) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(data)>>;
    std::optional<Broadcast<T>> b;
    if (data) b = Broadcast<T>{strides[0] ? p.batch : 1, strides[1] ? p.heads : 1, copy_of(data, n)};
    return b;
  };
  p.mask = broadcast(c.mask, c.mask_strides, like.mask ? like.mask->data.size() : 0);
  p.bias = broadcast(c.bias, c.bias_strides, like.bias ? like.bias->data.size() : 0);
  p.causal = c.causal != 0;
  p.align = static_cast<Align>(c.align);
  p.window_left = c.window_left;
  p.window_right = c.window_right;
  p.scale = c.scale;
  p.softcap = c.softcap;
  for (size_t i = 0; i < like.dout.size(); ++i) p.dout.push_back(load(p.dtype, dout, i));
  if (qf != p.dtype) p.q_dtype = qf;
  if (kvf != p.dtype) p.kv_dtype = kvf;
  if (c.q_descale != 1 || c.k_descale != 1 || c.v_descale != 1) {
    p.descale = Descales{c.q_descale, c.k_descale, c.v_descale};
  }
  p.sink = copy_of(c.sink, static_cast<size_t>(c.sink ? p.heads : 0));
  if (c.cu_seqlens_q || c.cu_seqlens_k) {
    const size_t n = static_cast<size_t>(p.batch + 1);
    p.packed = PackedSeqs{copy_of(c.cu_seqlens_q, c.cu_seqlens_q ? n : 0),
                          copy_of(c.cu_seqlens_k, c.cu_seqlens_k ? n : 0)};
  }
  if (c.block_table) {
    p.paged = PagedKv{copy_of(c.seqlens_k, static_cast<size_t>(p.batch)),
                      copy_of(c.block_table, static_cast<size_t>(p.batch * c.block_table_stride)),
                      c.block_table_stride, c.page_size, c.num_pages};
  }
  return p;
}

TEST(Fields, TheCAbiCarriesItsProblemFields) {
  for (const Problem& p : samples()) {
    host_detail::MarshalledProblem<2> m(p);
    const void* dout = p.dout.empty() ? nullptr : m.add_dout(host_detail::encode(p.dtype, p.dout), p.dtype);
    expect_carried(problem_walk, fields::kCAbi, p, from_c(m.c, dout, p), "the C ABI");
  }
}

// A descriptor declaring a non-default value of every field plugin.h has:
// the ImplInfo read from it differs from the default in every field the
// C ABI carries.
TEST(Fields, TheCAbiDescriptorFillsItsImplInfoFields) {
  static const attncheck_dtype_combo combos[] = {
      {ATTNCHECK_E4M3, ATTNCHECK_E5M2, ATTNCHECK_BF16},
      {ATTNCHECK_F32, ATTNCHECK_F32, ATTNCHECK_F32}};
  attncheck_impl d{};
  d.abi_version = ATTNCHECK_ABI_VERSION;
  d.name = "every_field";
  d.dtypes = 1u << ATTNCHECK_F32;
  d.features = ATTNCHECK_FEATURE_CAUSAL;
  d.empty_rows = ATTNCHECK_EMPTY_ROW_ZERO;
  d.precision = {ATTNCHECK_F32, ATTNCHECK_BF16, 3, 1, 64};
  d.limits = {8, 16, 32, 2, 128, 2, 1};
  d.struct_size = sizeof d;
  d.s_cast = ATTNCHECK_BF16;
  d.ftz_formats = ATTNCHECK_FTZ_OUT;
  d.n_combos = 2;
  d.combos = combos;
  d.stages = {ATTNCHECK_STAGE_Q_CAST | ATTNCHECK_STAGE_SCORE_ACCUM |
                  ATTNCHECK_STAGE_SOFTMAX_ACCUM | ATTNCHECK_STAGE_PV_ACCUM,
              ATTNCHECK_F16, ATTNCHECK_F32, ATTNCHECK_F32, ATTNCHECK_F16};
  attncheck_path path{};
  path.struct_size = sizeof path;
  path.name = "short";
  path.precision = d.precision;
  path.s_cast = d.s_cast;
  d.n_paths = 1;
  d.paths = &path;
  const ImplInfo info = host_detail::declared_info(d, "/plugins/every_field.so");
  const ImplInfo defaults;
  // q_cast is a format or ATTNCHECK_Q_CAST_KV (q_cast_kv): one descriptor
  // declares one of the two, a second the other.
  d.stages.q_cast = ATTNCHECK_Q_CAST_KV;
  const ImplInfo kv = host_detail::declared_info(d, "/plugins/every_field.so");
  EXPECT_TRUE(kv.precision.q_cast_kv);
  const auto non_default = [](const Field& f, const auto& x, const auto& dflt) {
    if (f.in(fields::kCAbi) && f.name != "q_cast_kv") {
      EXPECT_FALSE(same(x, dflt)) << "the descriptor left '" << f.name << "' at its default";
    }
  };
  zip(info_walk, info, defaults, non_default);
  zip(precision_walk, info.precision, defaults.precision, non_default);
  zip(limits_walk, info.limits, defaults.limits, non_default);
}

// ---- describe's text: the failure report names every field a sample sets.

TEST(Fields, TheFailureReportShowsEverySetProblemField) {
  const Problem defaults;
  for (const Problem& p : samples()) {
    std::ostringstream os;
    showValue(p, os);
    const std::string text = os.str();
    zip(problem_walk, p, defaults, [&](const Field& f, const auto& x, const auto& d) {
      if (f.in(fields::kDescribe) && !same(x, d)) {
        EXPECT_NE(text.find(f.shown_as), std::string::npos)
            << "the report does not show '" << f.name << "' (as \"" << f.shown_as << "\"):\n"
            << text;
      }
    });
  }
}

TEST(Fields, DescribeTextShowsEveryImplInfoField) {
  // `attncheck describe` and `list --verbose`: every field describe carries
  // has its line (or word), the name heads the text.
  const ImplInfo info = every_field_set<ImplInfo>(info_walk);
  const std::string text = declaration_text(info);
  const auto shows = [&](const Field& f, const std::string& where) {
    if (!f.in(fields::kDescribe)) return;
    if (f.name == "name") {
      EXPECT_TRUE(text.starts_with(printable(info.name))) << text;
      return;
    }
    EXPECT_NE(text.find(f.shown_as), std::string::npos)
        << "describe does not show " << where << f.name << " (as \"" << f.shown_as << "\"):\n"
        << text;
  };
  info_walk(info, [&](const Field& f, const auto&) { shows(f, ""); });
  precision_walk(info.precision, [&](const Field& f, const auto&) { shows(f, "precision."); });
  limits_walk(info.limits, [&](const Field& f, const auto&) { shows(f, "limits."); });
}

}  // namespace
}  // namespace attncheck

namespace attncheck {
namespace {

// A long row the shrinker left at q = 0 and small integers reads in a line:
// rows that repeat are shown once with their count (run-length form), and
// a problem of a few hundred values is shown whole, not "see the fixture".
TEST(FailureReport, ShowsALongRowOfRepeatedKeysInRunLengthForm) {
  Problem p = Problem::zeros(DType::f64, 1, 1, 1, 1, 72, 1, 1);
  p.k.at(0, 0, 71, 0) = 5.0;
  const std::string text = describe_problem(p);
  EXPECT_NE(text.find("K = [[0] x 71, [5]]"), std::string::npos) << text;
  EXPECT_NE(text.find("V = [[0] x 72]"), std::string::npos) << text;
  EXPECT_EQ(text.find("values omitted"), std::string::npos) << text;
}

}  // namespace
}  // namespace attncheck
