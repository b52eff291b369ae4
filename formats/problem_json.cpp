// The "attncheck-problem-1" format (SPEC 5.3), reader beside writer. The
// reader reads a problem in parts, each from the fields the parts before it
// decide the layout of: the formats, the shape, the sequences (packed or
// paged), the tensors, the masks and bias, the score parameters, dout, the
// descales and sink. Every part checks its fields as it
// reads them, naming the field; Problem::validate() checks the whole.

#include "formats/problem_json.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "core/fields.h"
#include "formats/json.h"
#include "formats/json_reader.h"

namespace attncheck {
namespace {

using nlohmann::json;
using formats::element_count;
using formats::numbers_to_json;
using formats::power_of_two;
using formats::Reader;
namespace limits = input_limits;

// ---- Writing

// The logical [d0][d1][d2][d3] values of a strided tensor, row-major.
json tensor_to_json(const Tensor& t, int64_t d0, int64_t d1, int64_t d2,
                    int64_t d3) {
  json a = json::array();
  for (int64_t i0 = 0; i0 < d0; ++i0)
    for (int64_t i1 = 0; i1 < d1; ++i1)
      for (int64_t i2 = 0; i2 < d2; ++i2)
        for (int64_t i3 = 0; i3 < d3; ++i3)
          a.push_back(number_to_json(t.at(i0, i1, i2, i3)));
  return a;
}

// A packed tensor's [rows][heads][d] values (SPEC 1.1: element (row, h, d)
// at h * strides[1] + row * strides[2] + d * strides[3]).
json packed_to_json(const Tensor& t, int64_t rows, int64_t heads, int64_t d) {
  json a = json::array();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t c = 0; c < d; ++c)
        a.push_back(number_to_json(t.data[static_cast<size_t>(
            h * t.strides[1] + r * t.strides[2] + c * t.strides[3])]));
  return a;
}

template <typename T, typename Convert>
json broadcast_to_json(const Broadcast<T>& x, const Problem& p,
                       Convert convert) {
  json data = json::array();
  for (const T& v : x.data) data.push_back(convert(v));
  return json{{"shape", {x.batch, x.heads, p.tq, p.tk}},
              {"data", std::move(data)}};
}

// A plain value (core/fields.h's GenericValue) as the file spells it.
template <typename T>
json value_to_json(const T& x) {
  if constexpr (std::is_same_v<T, double>) {
    return number_to_json(x);
  } else if constexpr (std::is_same_v<T, DType>) {
    return std::string(dtype_name(x));
  } else {
    return x;
  }
}

// ---- Reading: the checks a part shares

// Reads the {"shape": [B|1, H|1, tq, tk], "data": [...]} of a mask or bias.
template <typename T, typename ReadData>
Broadcast<T> read_broadcast(Reader& r, std::string_view name, const json& v,
                            const Problem& p, ReadData read_data) {
  Reader inner(v, fmt::format("{}: field '{}'", r.where(), name));
  const json& shape =
      inner.array("shape", inner.required("shape"), 4, "integers");
  std::array<int64_t, 4> dims{};
  for (size_t k = 0; k < 4; ++k) dims[k] = inner.integer("shape", shape[k]);
  const bool ok = (dims[0] == 1 || dims[0] == p.batch) &&
                  (dims[1] == 1 || dims[1] == p.heads) && dims[2] == p.tq &&
                  dims[3] == p.tk;
  if (!ok) {
    auto either = [](int64_t n) {
      return n == 1 ? std::string("1") : fmt::format("1|{}", n);
    };
    inner.field_error(
        "shape",
        fmt::format("expected [{}, {}, {}, {}] ([B|1, H|1, tq, tk]), got "
                    "[{}, {}, {}, {}]",
                    either(p.batch), either(p.heads), p.tq, p.tk, dims[0],
                    dims[1], dims[2], dims[3]));
  }
  Broadcast<T> out;
  out.batch = dims[0];
  out.heads = dims[1];
  out.data =
      read_data(inner, inner.required("data"),
                element_count(inner, "data", {dims[0], dims[1], p.tq, p.tk}));
  inner.reject_unknown_fields();
  return out;
}

// cu_seqlens_q / cu_seqlens_k (SPEC 1.1): batch + 1 offsets from 0, never
// decreasing, the longest sequence `dim` (tq or tk) long. Checked here, not
// only by Problem::validate: the tensors' sizes are read from them.
std::vector<int64_t> read_cu_seqlens(const Reader& r, std::string_view name, const json& v,
                                     int64_t batch, std::string_view dim, int64_t longest) {
  const json& a = r.array(name, v, batch + 1, "integers (batch + 1 offsets)");
  std::vector<int64_t> cu;
  cu.reserve(a.size());
  for (const json& x : a) cu.push_back(r.integer(name, x));
  if (cu[0] != 0) r.field_error(name, fmt::format("must start at 0, got {}", cu[0]));
  int64_t most = 0;
  for (size_t b = 0; b + 1 < cu.size(); ++b) {
    if (cu[b + 1] < cu[b]) {
      r.field_error(name, fmt::format("offsets must not decrease: element {} is {}, after {}",
                                      b + 1, cu[b + 1], cu[b]));
    }
    most = std::max(most, cu[b + 1] - cu[b]);
  }
  if (most != longest) {
    r.field_error(name, fmt::format("the longest sequence has {}, but {} is {} (the longest)",
                                    most, dim, longest));
  }
  return cu;
}

// "paged": {"page_size", "num_pages", "block_table_stride", "block_table",
// "seqlens_k"} (SPEC 5.3). block_table is flat [batch][block_table_stride];
// without block_table_stride its length over batch is the stride. Entries
// past a sequence's keys are never read and may hold anything.
PagedKv read_paged(Reader& r, const json& v, int64_t batch, int64_t tk) {
  Reader in(v, fmt::format("{}: field 'paged'", r.where()));
  PagedKv pg;
  pg.page_size = in.dimension("page_size");
  pg.num_pages = in.dimension("num_pages");
  const json& lengths = in.array("seqlens_k", in.required("seqlens_k"), batch, "integers");
  int64_t most = 0;
  for (size_t b = 0; b < lengths.size(); ++b) {
    const int64_t n = in.integer("seqlens_k", lengths[b]);
    if (n < 0) in.field_error("seqlens_k", fmt::format("element {}: {} is negative", b, n));
    pg.seqlens_k.push_back(n);
    most = std::max(most, n);
  }
  if (most != tk) {
    in.field_error("seqlens_k",
                   fmt::format("the longest sequence has {} keys, but tk is {}", most, tk));
  }
  const json& table = in.required("block_table");
  if (!table.is_array()) {
    in.field_error("block_table",
                   fmt::format("expected an array of integers, got {}", json_type_name(table)));
  }
  if (const json* stride = in.optional("block_table_stride")) {
    pg.block_table_stride = in.integer("block_table_stride", *stride);
    if (pg.block_table_stride < 1) {
      in.field_error("block_table_stride",
                     fmt::format("must be >= 1, got {}", pg.block_table_stride));
    }
  } else if (table.size() % static_cast<size_t>(batch) != 0) {
    in.field_error("block_table", fmt::format("{} entries are not batch = {} rows (and no "
                                              "block_table_stride is given)",
                                              table.size(), batch));
  } else {
    pg.block_table_stride = static_cast<int64_t>(table.size()) / batch;
  }
  const int64_t needed = (tk + pg.page_size - 1) / pg.page_size;
  if (pg.block_table_stride < needed) {
    in.field_error("block_table_stride",
                   fmt::format("{} pages per sequence hold fewer than tk = {} keys need ({})",
                               pg.block_table_stride, tk, needed));
  }
  in.array("block_table", table, element_count(in, "block_table", {batch, pg.block_table_stride}),
           "integers ([batch][block_table_stride])");
  for (size_t idx = 0; idx < table.size(); ++idx) {
    pg.block_table.push_back(in.integer("block_table", table[idx]));
  }
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s * pg.page_size < pg.seqlens_k[static_cast<size_t>(b)]; ++s) {
      const int64_t page = pg.block_table[static_cast<size_t>(b * pg.block_table_stride + s)];
      if (page < 0 || page >= pg.num_pages) {
        in.field_error("block_table",
                       fmt::format("sequence {} page {} is {}, outside [0, num_pages = {})", b, s,
                                   page, pg.num_pages));
      }
    }
  }
  in.reject_unknown_fields();
  return pg;
}

// Problem::validate() says "name: what"; file errors say "field 'name': what".
std::string as_field_message(std::string_view message) {
  const size_t colon = message.find(": ");
  const std::string_view name = message.substr(0, colon);
  const bool identifier =
      colon != std::string_view::npos && !name.empty() &&
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyz_.") ==
          std::string_view::npos;
  if (!identifier) return std::string(message);
  return fmt::format("field '{}': {}", name, message.substr(colon + 2));
}

// ---- Reading: the parts of a problem, in the order they are read

// dtype, the output's, and (SPEC 1.1) the inputs' formats when
// not the output's.
void read_formats(Reader& r, Problem& p) {
  const std::string name = r.string("dtype", r.required("dtype"));
  try {
    p.dtype = parse_dtype(name);
  } catch (const std::exception&) {
    const bool fp8 = name == "e4m3" || name == "e5m2";
    const bool block = name == "q8_0" || name == "q4_0";
    if (block) {
      r.field_error("dtype", fmt::format("{} is a block format for K/V only (dtype is the "
                                         "output's: f64, f32, bf16 or f16; K/V take kv_dtype)",
                                         name));
    }
    r.field_error("dtype",
                  fp8 ? fmt::format("{} is an input format only (dtype is the output's: "
                                    "f64, f32, bf16 or f16; inputs take q_dtype and kv_dtype)",
                                    name)
                      : fmt::format("unknown dtype \"{}\" (expected f64, f32, "
                                    "bf16 or f16)",
                                    name));
  }
  const auto input_format = [&](std::string_view field) -> std::optional<DType> {
    const json* v = r.optional(field);
    if (v == nullptr) return std::nullopt;
    const std::string format = r.string(field, *v);
    const bool kv = field == "kv_dtype";
    try {
      return kv ? parse_kv_format(format) : parse_format(format);
    } catch (const std::exception&) {
      if (format == "q8_0" || format == "q4_0") {
        r.field_error(field, fmt::format("{} is a block format for K/V only (kv_dtype)", format));
      }
      r.field_error(field, fmt::format("unknown format \"{}\" (expected f64, f32, bf16, "
                                       "f16, e4m3 or e5m2{})",
                                       format, kv ? ", q8_0 or q4_0" : ""));
    }
  };
  p.q_dtype = input_format("q_dtype");
  p.kv_dtype = input_format("kv_dtype");
}

// batch, heads, kv_heads, tq, tk, dk, dv.
void read_shape(Reader& r, Problem& p) {
  p.batch = r.dimension("batch");
  p.heads = r.dimension("heads");
  p.kv_heads = r.optional("kv_heads") ? r.dimension("kv_heads") : p.heads;
  if (p.heads % p.kv_heads != 0) {
    r.field_error("kv_heads", fmt::format("{} does not divide heads = {}",
                                          p.kv_heads, p.heads));
  }
  p.tq = r.dimension("tq");
  p.tk = r.dimension("tk");
  p.dk = r.dimension("dk");
  p.dv = r.dimension("dv");
  // Every consumer stores a score per (b, h, i, j): refuse a problem whose
  // scores alone would not fit, before reading its tensors.
  if (p.batch > limits::kScores / p.heads ||
      p.batch * p.heads > limits::kScores / p.tq ||
      p.batch * p.heads * p.tq > limits::kScores / p.tk) {
    r.field_error("tk", fmt::format("batch * heads * tq * tk = {} * {} * {} * "
                                    "{} scores is more than the limit {}",
                                    p.batch, p.heads, p.tq, p.tk,
                                    power_of_two(limits::kScores)));
  }
}

// Version 2 sequences (SPEC 1.1), read before the tensors whose layout
// they decide: packed queries and keys, paged keys.
void read_sequences(Reader& r, Problem& p) {
  PackedSeqs packed;
  if (const json* v = r.optional("cu_seqlens_q")) {
    packed.cu_seqlens_q = read_cu_seqlens(r, "cu_seqlens_q", *v, p.batch, "tq", p.tq);
  }
  if (const json* v = r.optional("cu_seqlens_k")) {
    packed.cu_seqlens_k = read_cu_seqlens(r, "cu_seqlens_k", *v, p.batch, "tk", p.tk);
  }
  if (!packed.cu_seqlens_q.empty() || !packed.cu_seqlens_k.empty()) p.packed = std::move(packed);
  if (const json* v = r.optional("paged")) {
    if (p.packed_k()) {
      r.field_error("paged", "keys are paged or packed (cu_seqlens_k), not both (SPEC 1.1)");
    }
    p.paged = read_paged(r, *v, p.batch, p.tk);
  }
}

// q, k and v: dense [batch][heads][t][d], packed [rows][heads][d] (strides
// {0, d, heads * d, 1}) or paged [num_pages][kv_heads][page_size][d].
void read_tensors(Reader& r, Problem& p) {
  const DType q_format = p.q_dtype.value_or(p.dtype);
  const DType kv_format = p.kv_dtype.value_or(p.dtype);
  const auto dense = [&](std::string_view name, int64_t h, int64_t t, int64_t d, DType format) {
    Tensor out;
    out.data = r.numbers(name, r.required(name), element_count(r, name, {p.batch, h, t, d}),
                         format, false);
    out.strides = contiguous_strides(p.batch, h, t, d);
    return out;
  };
  const auto packed = [&](std::string_view name, int64_t rows, int64_t h, int64_t d,
                          DType format) {
    Tensor out;
    out.data = r.numbers(name, r.required(name), element_count(r, name, {rows, h, d}), format,
                         false);
    out.strides = {0, d, h * d, 1};
    return out;
  };
  const auto paged = [&](std::string_view name, int64_t d) {
    Tensor out;
    const int64_t pages = p.paged->num_pages, slots = p.paged->page_size;
    out.data = r.numbers(name, r.required(name),
                         element_count(r, name, {pages, p.kv_heads, slots, d}), kv_format, false);
    out.strides = contiguous_strides(pages, p.kv_heads, slots, d);
    return out;
  };
  p.q = p.packed_q() ? packed("q", p.total_q(), p.heads, p.dk, q_format)
                     : dense("q", p.heads, p.tq, p.dk, q_format);
  if (p.paged) {
    p.k = paged("k", p.dk);
    p.v = paged("v", p.dv);
  } else if (p.packed_k()) {
    const int64_t rows = p.packed->cu_seqlens_k.back();
    p.k = packed("k", rows, p.kv_heads, p.dk, kv_format);
    p.v = packed("v", rows, p.kv_heads, p.dv, kv_format);
  } else {
    p.k = dense("k", p.kv_heads, p.tk, p.dk, kv_format);
    p.v = dense("v", p.kv_heads, p.tk, p.dv, kv_format);
  }
}

// Which keys a query sees, and what is added to its scores: key_valid,
// mask, bias, causal, align, window.
void read_masks(Reader& r, Problem& p) {
  if (const json* v = r.optional("key_valid")) {
    p.key_valid = r.flags("key_valid", *v,
                          element_count(r, "key_valid", {p.batch, p.tk}));
  }
  if (const json* v = r.optional("mask")) {
    p.mask = read_broadcast<uint8_t>(
        r, "mask", *v, p, [](Reader& in, const json& data, int64_t count) {
          return in.flags("data", data, count);
        });
  }
  if (const json* v = r.optional("bias")) {
    const DType dtype = p.dtype;
    p.bias = read_broadcast<double>(
        r, "bias", *v, p, [dtype](Reader& in, const json& data, int64_t count) {
          return in.numbers("data", data, count, dtype, true);
        });
  }
  if (const json* v = r.optional("causal")) {
    if (!v->is_boolean()) {
      r.field_error("causal",
                    fmt::format("expected true or false, got {}", json_brief(*v)));
    }
    p.causal = v->get<bool>();
  }
  if (const json* v = r.optional("align")) {
    const std::string a = r.string("align", *v);
    if (a == "top_left") {
      p.align = Align::top_left;
    } else if (a == "bottom_right") {
      p.align = Align::bottom_right;
    } else {
      r.field_error("align",
                    fmt::format("expected \"top_left\" or \"bottom_right\", "
                                "got \"{}\"",
                                a));
    }
  }
  if (const json* v = r.optional("window")) {
    const json& w = r.array("window", *v, 2, "integers [left, right]");
    p.window_left = r.integer("window", w[0]);
    p.window_right = r.integer("window", w[1]);
    if (p.window_left < -1 || p.window_right < -1) {
      r.field_error("window", "bounds must be >= -1 (-1 = unbounded)");
    }
    if (p.window_left > limits::kWindow || p.window_right > limits::kWindow) {
      r.field_error("window", fmt::format("bounds must be at most {}",
                                          power_of_two(limits::kWindow)));
    }
  }
}

// scale (absent or null: the default 1/sqrt(dk)) and softcap.
void read_score_parameters(Reader& r, Problem& p) {
  p.scale = Problem::default_scale(p.dk);
  if (const json* v = r.optional("scale")) {
    p.scale = number_from_json(*v, fmt::format("{}: field 'scale'", r.where()));
    // SPEC 1's sigma is a positive scale (1/sqrt(dk) by default): a
    // negative or zero one is a mistake in the file, not a case.
    if (!std::isfinite(p.scale) || p.scale <= 0) {
      r.field_error("scale", fmt::format("must be finite and > 0, got {}", p.scale));
    }
  }
  if (const json* v = r.optional("softcap")) {
    p.softcap = number_from_json(*v, fmt::format("{}: field 'softcap'", r.where()));
    if (!std::isfinite(p.softcap) || p.softcap < 0) {
      r.field_error(
          "softcap",
          fmt::format("must be finite and >= 0 (0 = off), got {}", p.softcap));
    }
  }
}

// dout, the output gradient, shaped like the output.
void read_dout(Reader& r, Problem& p) {
  if (const json* v = r.optional("dout")) {
    // Packed like q when queries are packed: [total_q][heads][dv].
    p.dout = r.numbers("dout", *v,
                       p.packed_q() ? element_count(r, "dout", {p.total_q(), p.heads, p.dv})
                                    : element_count(r, "dout", {p.batch, p.heads, p.tq, p.dv}),
                       p.dtype, false);
  }
}

// The descales of scaled inputs and the sink logits (SPEC 1.1).
void read_descale_and_sink(Reader& r, Problem& p) {
  if (const json* v = r.optional("descale")) {
    Reader in(*v, fmt::format("{}: field 'descale'", r.where()));
    Descales d;
    for (auto [name, value] : {std::pair<const char*, double*>{"q", &d.q}, {"k", &d.k}, {"v", &d.v}}) {
      *value = number_from_json(in.required(name),
                                fmt::format("{}: field 'descale': field '{}'", r.where(), name));
      if (!std::isfinite(*value) || *value <= 0) {
        in.field_error(name, fmt::format("must be finite and > 0, got {}", *value));
      }
    }
    in.reject_unknown_fields();
    p.descale = d;
  }
  if (const json* v = r.optional("sink")) {
    // A logit per head, any finite double (SPEC 1.1).
    p.sink = r.numbers("sink", *v, p.heads, DType::f64, true);
  }
}

// The fields the parts above read, each with its own checks and in its
// place; the walk of core/fields.h reads every other field the file
// carries (read_plain_fields), by its type, absent: the default's value.
constexpr std::array<std::string_view, 27> kReadByHand{
    "dtype",    "batch",     "heads",   "kv_heads",    "tq",           "tk",     "dk",
    "dv",       "q",         "k",       "v",           "key_valid",    "mask",   "bias",
    "causal",   "align",     "window_left", "window_right", "scale",   "softcap", "dout",
    "q_dtype",  "kv_dtype",  "descale", "sink",        "packed",       "paged"};
static_assert(fields::handled_by(fields::kProblemFields, fields::kJson, kReadByHand),
              "a Problem field the JSON file carries is neither read here nor of a plain type");

// A number, true or false, or a format's name, as value_to_json writes it;
// a double must be finite (Problem::validate() checks the rest).
void read_plain_fields(Reader& r, Problem& p) {
  fields::for_each_problem_field(p, [&](const fields::Field& f, auto& m) {
    using M = std::remove_cvref_t<decltype(m)>;
    if constexpr (fields::GenericValue<M>) {
      if (!f.in(fields::kJson) || fields::named(f.name, kReadByHand)) return;
      const json* v = r.optional(f.name);
      if (v == nullptr) return;
      if constexpr (std::is_same_v<M, int64_t>) {
        m = r.integer(f.name, *v);
      } else if constexpr (std::is_same_v<M, uint32_t>) {
        const int64_t n = r.integer(f.name, *v);
        if (n < 0 || n > int64_t{UINT32_MAX}) {
          r.field_error(f.name, fmt::format("must be in [0, {}], got {}", UINT32_MAX, n));
        }
        m = static_cast<uint32_t>(n);
      } else if constexpr (std::is_same_v<M, bool>) {
        if (!v->is_boolean()) {
          r.field_error(f.name, fmt::format("expected true or false, got {}", json_brief(*v)));
        }
        m = v->get<bool>();
      } else if constexpr (std::is_same_v<M, double>) {
        m = number_from_json(*v, fmt::format("{}: field '{}'", r.where(), f.name));
        if (!std::isfinite(m)) r.field_error(f.name, "must be finite");
      } else {
        const std::string name = r.string(f.name, *v);
        try {
          m = parse_format(name);
        } catch (const std::exception&) {
          r.field_error(f.name, fmt::format("unknown format \"{}\"", name));
        }
      }
    }
  });
}

// SPEC 1.1's table: packed and paged problems take no key_valid, mask or
// bias.
void refuse_masks_of_varlen(Reader& r, const Problem& p) {
  if (p.varlen()) {
    for (const char* name : {"key_valid", "mask", "bias"}) {
      const bool given = (name == std::string_view("key_valid") && !p.key_valid.empty()) ||
                         (name == std::string_view("mask") && p.mask) ||
                         (name == std::string_view("bias") && p.bias);
      if (given) {
        r.field_error(name, "a packed or paged problem takes none (SPEC 1.1)");
      }
    }
  }
}

}  // namespace

// The fields the file lays out by hand (SPEC 5.3's tensors, masks,
// "window", the serving parts); the walk of core/fields.h writes every
// other one: a number, true or false, a format's name.
constexpr std::array<std::string_view, 14> kWrittenByHand{
    "q",         "k",        "v",       "key_valid", "mask",   "bias", "align", "window_left",
    "window_right", "dout", "descale", "sink",      "packed", "paged"};
static_assert(fields::handled_by(fields::kProblemFields, fields::kJson, kWrittenByHand),
              "a Problem field the JSON file carries is neither written here nor of a plain type");

json problem_to_json(const Problem& p) {
  json j;
  j["format"] = std::string(formats::kProblemFormat);
  fields::for_each_problem_field(p, [&](const fields::Field& f, const auto& m) {
    using M = std::remove_cvref_t<decltype(m)>;
    if constexpr (fields::GenericValue<M>) {
      if (f.in(fields::kJson) && !fields::named(f.name, kWrittenByHand)) {
        // An optional format only when present (the version 2 fields,
        // SPEC 5.3: a version 1 problem's file is what it always was).
        if constexpr (std::is_same_v<M, std::optional<DType>>) {
          if (m) j[f.name] = value_to_json(*m);
        } else {
          j[f.name] = value_to_json(m);
        }
      }
    }
  });
  // Packed and paged tensors in their own layouts (SPEC 5.3): packed
  // [total rows][heads][d], paged [num_pages][kv_heads][page_size][d].
  if (p.packed_q()) {
    j["q"] = packed_to_json(p.q, p.total_q(), p.heads, p.dk);
  } else {
    j["q"] = tensor_to_json(p.q, p.batch, p.heads, p.tq, p.dk);
  }
  if (p.paged) {
    j["k"] = tensor_to_json(p.k, p.paged->num_pages, p.kv_heads, p.paged->page_size, p.dk);
    j["v"] = tensor_to_json(p.v, p.paged->num_pages, p.kv_heads, p.paged->page_size, p.dv);
  } else if (p.packed_k()) {
    j["k"] = packed_to_json(p.k, p.packed->cu_seqlens_k.back(), p.kv_heads, p.dk);
    j["v"] = packed_to_json(p.v, p.packed->cu_seqlens_k.back(), p.kv_heads, p.dv);
  } else {
    j["k"] = tensor_to_json(p.k, p.batch, p.kv_heads, p.tk, p.dk);
    j["v"] = tensor_to_json(p.v, p.batch, p.kv_heads, p.tk, p.dv);
  }
  j["key_valid"] = p.key_valid.empty() ? json(nullptr) : json(p.key_valid);
  j["mask"] =
      p.mask ? broadcast_to_json(*p.mask, p, [](uint8_t x) { return json(x); })
             : json(nullptr);
  j["bias"] =
      p.bias ? broadcast_to_json(*p.bias, p, number_to_json) : json(nullptr);
  j["align"] = p.align == Align::top_left ? "top_left" : "bottom_right";
  j["window"] = {p.window_left, p.window_right};
  j["dout"] = p.dout.empty() ? json(nullptr) : numbers_to_json(p.dout);
  // Version 2 fields (SPEC 5.3) only when present.
  if (p.descale) {
    j["descale"] = {{"q", number_to_json(p.descale->q)},
                    {"k", number_to_json(p.descale->k)},
                    {"v", number_to_json(p.descale->v)}};
  }
  if (!p.sink.empty()) j["sink"] = numbers_to_json(p.sink);
  if (p.packed_q()) j["cu_seqlens_q"] = p.packed->cu_seqlens_q;
  if (p.packed_k()) j["cu_seqlens_k"] = p.packed->cu_seqlens_k;
  if (p.paged) {
    j["paged"] = {{"page_size", p.paged->page_size},
                  {"num_pages", p.paged->num_pages},
                  {"block_table_stride", p.paged->block_table_stride},
                  {"block_table", p.paged->block_table},
                  {"seqlens_k", p.paged->seqlens_k}};
  }
  return j;
}

Problem problem_from_json(const json& j, const std::string& where) {
  Reader r(j, where);
  formats::check_format(r, formats::kProblemFormat);
  Problem p;
  read_formats(r, p);
  read_shape(r, p);
  read_sequences(r, p);
  read_tensors(r, p);
  read_masks(r, p);
  read_score_parameters(r, p);
  read_dout(r, p);
  read_descale_and_sink(r, p);
  read_plain_fields(r, p);
  refuse_masks_of_varlen(r, p);
  r.reject_unknown_fields();
  try {
    p.validate();
  } catch (const std::exception& e) {
    throw InputError(formats::one_line(
        fmt::format("{}: {}", where, as_field_message(e.what()))));
  }
  return p;
}

}  // namespace attncheck
