#include "problem_convert.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "core/fields.h"

namespace attncheck::python {
namespace {

// A NumPy array owning a copy of `data`, of the given shape (row-major).
template <typename T>
py::array_t<T> to_array(const std::vector<T>& data, std::vector<py::ssize_t> shape) {
  py::array_t<T> a(shape);
  if (static_cast<size_t>(a.size()) != data.size()) {
    throw std::logic_error("problem_to_py: an array does not fit its shape");
  }
  std::copy(data.begin(), data.end(), a.mutable_data());
  return a;
}

py::tuple tensor_to_py(const Tensor& t) {
  return py::make_tuple(to_array(t.data, {static_cast<py::ssize_t>(t.data.size())}),
                        py::make_tuple(t.strides[0], t.strides[1], t.strides[2], t.strides[3]));
}

// K or V stored in a block format (SPEC 1.2) as the bytes a ggml kernel
// reads: uint8 [batch][kv_heads][tk][d / 32][block_bytes], each block the
// canonical encoding of its 32 logical values (the bytes a fixture replays
// to and the C ABI hands a plugin), contiguous whatever the tensor's strides.
py::array_t<uint8_t> blocks_to_py(const Tensor& t, DType format, int64_t batch, int64_t heads,
                                  int64_t rows, int64_t d) {
  const auto bytes = static_cast<py::ssize_t>(block_bytes(format));
  const int64_t blocks = d / kBlockValues;
  py::array_t<uint8_t> a({batch, heads, rows, blocks, bytes});
  unsigned char* out = a.mutable_data();
  std::array<double, kBlockValues> values{};
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t g = 0; g < heads; ++g)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < blocks; ++k, out += bytes) {
          for (int64_t e = 0; e < kBlockValues; ++e)
            values[e] = t.at(b, g, r, k * kBlockValues + e);
          encode_values(format, values, out);
        }
  return a;
}

// The values of a C-contiguous array of `n` elements (cast by NumPy).
template <typename T>
std::vector<T> values(const py::handle& h, size_t n, const char* field) {
  const auto a = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(h);
  if (!a) throw InputError(fmt::format("problem field '{}': not an array", field));
  if (static_cast<size_t>(a.size()) != n) {
    throw InputError(fmt::format("problem field '{}': {} elements, expected {}", field, a.size(), n));
  }
  return {a.data(), a.data() + n};
}

template <typename T>
std::optional<Broadcast<T>> broadcast_from_py(const py::dict& d, const char* field,
                                              const Problem& p) {
  if (!d.contains(field) || d[field].is_none()) return std::nullopt;
  const auto a = py::array::ensure(d[field]);
  if (!a || a.ndim() != 4) throw InputError(fmt::format("problem field '{}': not a 4-d array", field));
  Broadcast<T> b;
  b.batch = a.shape(0);
  b.heads = a.shape(1);
  if (a.shape(2) != p.tq || a.shape(3) != p.tk || (b.batch != 1 && b.batch != p.batch) ||
      (b.heads != 1 && b.heads != p.heads)) {
    throw InputError(fmt::format("problem field '{}': shape ({}, {}, {}, {}) is not "
                                 "[batch|1][heads|1][tq][tk]",
                                 field, a.shape(0), a.shape(1), a.shape(2), a.shape(3)));
  }
  b.data = values<T>(d[field], static_cast<size_t>(a.size()), field);
  return b;
}

}  // namespace

namespace {

// The fields the bridge lays out by hand (arrays, names of formats and
// alignments, the dims' checks); the walk of core/fields.h carries every
// other one by its type, keyed by its name.
constexpr std::array<std::string_view, 11> kToPyByHand{
    "dtype", "q", "k", "v", "key_valid", "mask", "bias", "align", "dout", "q_dtype", "kv_dtype"};
constexpr std::array<std::string_view, 18> kFromPyByHand{
    "dtype", "batch", "heads",     "kv_heads", "tq",   "tk",    "dk",      "dv",      "q",
    "k",     "v",     "key_valid", "mask",     "bias", "align", "dout",    "q_dtype", "kv_dtype"};
static_assert(fields::handled_by(fields::kProblemFields, fields::kPython, kToPyByHand),
              "a Problem field the bridge carries is neither written here nor of a plain type");
static_assert(fields::handled_by(fields::kProblemFields, fields::kPython, kFromPyByHand),
              "a Problem field the bridge carries is neither read here nor of a plain type");

py::str key(std::string_view name) { return py::str(name.data(), name.size()); }

// A plain value (core/fields.h's GenericValue) as the dict holds it.
template <typename T>
py::object plain_to_py(const T& x) {
  if constexpr (std::is_same_v<T, DType>) {
    return py::str(std::string(dtype_name(x)));
  } else if constexpr (std::is_same_v<T, std::optional<DType>>) {
    return x ? plain_to_py(*x) : py::object(py::none());
  } else {
    return py::cast(x);
  }
}

template <typename T>
void plain_from_py(const py::dict& d, std::string_view name, T& x) {
  const py::object v = d[key(name)];
  if constexpr (std::is_same_v<T, DType>) {
    x = parse_format(v.cast<std::string>());
  } else if constexpr (std::is_same_v<T, std::optional<DType>>) {
    if (v.is_none()) {
      x.reset();
    } else {
      x = parse_format(v.cast<std::string>());
    }
  } else {
    x = v.cast<T>();
  }
}

}  // namespace

py::dict problem_to_py(const Problem& p) {
  py::dict d;
  const DType kv_format = p.kv_dtype.value_or(p.dtype);
  fields::for_each_problem_field(p, [&](const fields::Field& f, const auto& m) {
    using M = std::remove_cvref_t<decltype(m)>;
    if (!f.in(fields::kPython)) return;
    if (!fields::named(f.name, kToPyByHand)) {
      if constexpr (fields::GenericValue<M>) d[key(f.name)] = plain_to_py(m);
      return;
    }
    if (f.name == "dtype") {
      // The input formats beside it, dtype's when uniform.
      d["dtype"] = std::string(dtype_name(p.dtype));
      d["q_dtype"] = std::string(dtype_name(p.q_dtype.value_or(p.dtype)));
      d["kv_dtype"] = std::string(dtype_name(kv_format));
    } else if (f.name == "q") {
      d["q"] = tensor_to_py(p.q);
    } else if (f.name == "k") {
      d["k"] = tensor_to_py(p.k);
    } else if (f.name == "v") {
      d["v"] = tensor_to_py(p.v);
      if (is_block_format(kv_format)) {
        d["k_blocks"] = blocks_to_py(p.k, kv_format, p.batch, p.kv_heads, p.tk, p.dk);
        d["v_blocks"] = blocks_to_py(p.v, kv_format, p.batch, p.kv_heads, p.tk, p.dv);
      } else {
        d["k_blocks"] = py::none();
        d["v_blocks"] = py::none();
      }
    } else if (f.name == "key_valid") {
      d["key_valid"] = p.key_valid.empty() ? py::object(py::none())
                                           : py::object(to_array(p.key_valid, {p.batch, p.tk}));
    } else if (f.name == "mask") {
      d["mask"] = p.mask ? py::object(to_array(p.mask->data,
                                               {p.mask->batch, p.mask->heads, p.tq, p.tk}))
                         : py::object(py::none());
    } else if (f.name == "bias") {
      d["bias"] = p.bias ? py::object(to_array(p.bias->data,
                                               {p.bias->batch, p.bias->heads, p.tq, p.tk}))
                         : py::object(py::none());
    } else if (f.name == "align") {
      d["align"] = p.align == Align::top_left ? "top_left" : "bottom_right";
    } else if (f.name == "dout") {
      d["dout"] = p.dout.empty() ? py::object(py::none())
                                 : py::object(to_array(p.dout, {p.batch, p.heads, p.tq, p.dv}));
    }
  });
  return d;
}

Problem problem_from_py(const py::dict& d) {
  Problem p;
  // In the walk's order: each field read after those its layout depends on.
  fields::for_each_problem_field(p, [&](const fields::Field& f, auto& m) {
    using M = std::remove_cvref_t<decltype(m)>;
    if (!f.in(fields::kPython)) return;
    if (!fields::named(f.name, kFromPyByHand)) {
      if constexpr (fields::GenericValue<M>) plain_from_py(d, f.name, m);
      return;
    }
    if (f.name == "dtype") {
      p.dtype = parse_dtype(d["dtype"].cast<std::string>());
      // The input formats (SPEC 1.1, 1.2); absent or equal to dtype: uniform.
      const auto input_format = [&](const char* field, bool kv) -> std::optional<DType> {
        if (!d.contains(field) || d[field].is_none()) return std::nullopt;
        const auto name = d[field].cast<std::string>();
        try {
          const DType format = kv ? parse_kv_format(name) : parse_format(name);
          return format == p.dtype ? std::nullopt : std::optional<DType>(format);
        } catch (const InputError& e) {
          throw InputError(fmt::format("problem field '{}': {}", field, e.what()));
        }
      };
      p.q_dtype = input_format("q_dtype", false);
      p.kv_dtype = input_format("kv_dtype", true);
    } else if (f.name == "batch") {
      for (auto [field, x] : {std::pair{"batch", &p.batch}, {"heads", &p.heads},
                              {"kv_heads", &p.kv_heads}, {"tq", &p.tq}, {"tk", &p.tk},
                              {"dk", &p.dk}, {"dv", &p.dv}}) {
        *x = d[field].template cast<int64_t>();
        if (*x < 1) {
          throw InputError(fmt::format("problem field '{}': {} is not a positive size", field, *x));
        }
      }
    } else if (f.name == "q" || f.name == "k" || f.name == "v") {
      const bool is_q = f.name == "q";
      const int64_t h = is_q ? p.heads : p.kv_heads, t = is_q ? p.tq : p.tk;
      const int64_t e = f.name == "v" ? p.dv : p.dk;
      const std::string field(f.name);
      Tensor x;
      x.strides = contiguous_strides(p.batch, h, t, e);
      x.data = values<double>(d[field.c_str()], static_cast<size_t>(p.batch * h * t * e),
                              field.c_str());
      (is_q ? p.q : f.name == "k" ? p.k : p.v) = std::move(x);
    } else if (f.name == "key_valid") {
      if (!d["key_valid"].is_none()) {
        p.key_valid =
            values<uint8_t>(d["key_valid"], static_cast<size_t>(p.batch * p.tk), "key_valid");
      }
    } else if (f.name == "mask") {
      p.mask = broadcast_from_py<uint8_t>(d, "mask", p);
    } else if (f.name == "bias") {
      p.bias = broadcast_from_py<double>(d, "bias", p);
    } else if (f.name == "align") {
      const auto align = d["align"].cast<std::string>();
      if (align != "top_left" && align != "bottom_right") {
        throw InputError(
            fmt::format("problem field 'align': '{}' is not top_left or bottom_right", align));
      }
      p.align = align == "top_left" ? Align::top_left : Align::bottom_right;
    } else if (f.name == "dout") {
      if (!d["dout"].is_none()) {
        p.dout = values<double>(d["dout"], static_cast<size_t>(p.batch * p.heads * p.tq * p.dv),
                                "dout");
      }
    }
  });
  try {
    p.validate();
  } catch (const std::invalid_argument& e) {
    throw InputError(fmt::format("problem: {}", e.what()));
  }
  return p;
}

py::dict oracle_to_py(const Problem& p, const OracleResult& r) {
  py::dict d;
  d["out"] = to_array(r.out, {p.batch, p.heads, p.tq, p.dv});
  d["weights"] = to_array(r.weights, {p.batch, p.heads, p.tq, p.tk});
  d["lse"] = to_array(r.lse, {p.batch, p.heads, p.tq});
  if (!r.dq.empty()) {
    d["dq"] = to_array(r.dq, {p.batch, p.heads, p.tq, p.dk});
    d["dk"] = to_array(r.dk, {p.batch, p.kv_heads, p.tk, p.dk});
    d["dv"] = to_array(r.dv, {p.batch, p.kv_heads, p.tk, p.dv});
  }
  py::list uncertified;
  for (const UncertifiedValue& u : r.uncertified) {
    uncertified.append(py::make_tuple(u.array, py::tuple(py::cast(u.index))));
  }
  d["uncertified"] = uncertified;
  return d;
}

namespace {

// The precision fields read by hand (the formats the declaration names,
// q_cast's "kv"); the walk reads every other: the plain traits, and each
// stage (an optional accumulation format) where declared.
constexpr std::array<std::string_view, 5> kPrecisionByHand{"accum", "p_cast", "s_cast", "q_cast",
                                                           "q_cast_kv"};
static_assert(fields::handled_by(fields::kPrecisionFields, fields::kPython, kPrecisionByHand),
              "a precision field the bridge carries is neither read here nor plain");

}  // namespace

PrecisionTraits precision_from_py(const py::dict& prec) {
  PrecisionTraits t;
  // The declaration checked the formats: P and S may be stored in E4M3,
  // Q rounded to any format; the accumulations are output formats.
  const auto format = [&](const char* key) -> std::optional<DType> {
    if (!prec.contains(key) || prec[key].is_none()) return std::nullopt;
    return parse_format(prec[key].cast<std::string>());
  };
  fields::for_each_precision_field(t, [&](const fields::Field& f, auto& m) {
    using M = std::remove_cvref_t<decltype(m)>;
    if (!f.in(fields::kPython)) return;
    if (!fields::named(f.name, kPrecisionByHand)) {
      if constexpr (std::is_same_v<M, std::optional<DType>>) {
        // A stage (SPEC 4.1); absent in a declaration made before.
        const py::str k = key(f.name);
        if (prec.contains(k) && !prec[k].is_none()) m = parse_dtype(prec[k].cast<std::string>());
      } else if constexpr (fields::GenericValue<M>) {
        plain_from_py(prec, f.name, m);
      }
      return;
    }
    if (f.name == "accum") {
      t.accum = parse_dtype(prec["accum"].cast<std::string>());
      t.p_cast = parse_format(prec["p_cast"].cast<std::string>());
      t.s_cast = format("s_cast");
    } else if (f.name == "q_cast") {
      // Precision by stage (SPEC 4.1); absent in a declaration made before.
      if (prec.contains("q_cast") && !prec["q_cast"].is_none() &&
          prec["q_cast"].cast<std::string>() == "kv") {
        t.q_cast_kv = true;
      } else if (prec.contains("q_cast") && !prec["q_cast"].is_none() &&
                 prec["q_cast"].cast<std::string>() == "q8_0") {
        t.q_cast = DType::q8_0;  // Q in blocks of 32 as ggml rounds it (SPEC 4.1)
      } else {
        t.q_cast = format("q_cast");
      }
    }
  });
  return t;
}

// info_from_py reads a declaration by hand: these fields (kind, origin
// and caught_by are the loader's; paths come inside precision).
constexpr std::array<std::string_view, 9> kInfoByHand{
    "name",   "dtypes",      "features", "empty_rows", "precision",
    "limits", "description", "combos",   "paths"};
static_assert(fields::handled_by(fields::kImplInfoFields, fields::kPython, kInfoByHand),
              "an ImplInfo field the bridge carries is not read here");

ImplInfo info_from_py(const py::dict& d, const std::string& origin) {
  ImplInfo i;
  i.name = d["name"].cast<std::string>();
  i.kind = Kind::plugin;
  i.origin = origin;
  i.description = d["description"].cast<std::string>();
  for (const auto& name : d["dtypes"].cast<std::vector<std::string>>()) {
    i.dtypes |= dtype_bit(parse_dtype(name));
  }
  // Combinations of formats (as the C ABI's combos): when given, they are
  // every combination declared, and dtypes the formats d whose {d, d, d} is
  // among them (attncheck._declare checked both).
  if (d.contains("combos")) {
    for (const auto& text : d["combos"].cast<std::vector<std::string>>()) {
      i.combos.push_back(parse_dtype_combo(text));
    }
  }
  i.features = d["features"].cast<Features>();
  i.empty_rows = d["empty_rows"].cast<std::string>() == "zero" ? EmptyRowPolicy::zero
                                                               : EmptyRowPolicy::error;
  const py::dict prec = d["precision"];
  i.precision = precision_from_py(prec);
  if (prec.contains("paths")) {
    for (const py::handle path : prec["paths"]) {
      const py::dict pd = py::reinterpret_borrow<py::dict>(path);
      ImplPath one;
      one.name = pd["name"].cast<std::string>();
      one.precision = precision_from_py(pd);
      i.paths.push_back(std::move(one));
    }
  }
  // Every limit by the walk, keyed by its name.
  const py::dict lim = d["limits"];
  fields::for_each_limits_field(i.limits, [&](const fields::Field& f, auto& m) {
    static_assert(fields::GenericValue<std::remove_cvref_t<decltype(m)>>,
                  "a limit is of a plain type");
    if (f.in(fields::kPython)) plain_from_py(lim, f.name, m);
  });
  return i;
}

}  // namespace attncheck::python
