#include "problem_convert.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <optional>
#include <utility>

#include <fmt/format.h>

#include "attncheck/dtype.h"

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

py::dict problem_to_py(const Problem& p) {
  py::dict d;
  d["dtype"] = std::string(dtype_name(p.dtype));
  const DType kv_format = p.kv_dtype.value_or(p.dtype);
  d["q_dtype"] = std::string(dtype_name(p.q_dtype.value_or(p.dtype)));
  d["kv_dtype"] = std::string(dtype_name(kv_format));
  d["batch"] = p.batch;
  d["heads"] = p.heads;
  d["kv_heads"] = p.kv_heads;
  d["tq"] = p.tq;
  d["tk"] = p.tk;
  d["dk"] = p.dk;
  d["dv"] = p.dv;
  d["q"] = tensor_to_py(p.q);
  d["k"] = tensor_to_py(p.k);
  d["v"] = tensor_to_py(p.v);
  if (is_block_format(kv_format)) {
    d["k_blocks"] = blocks_to_py(p.k, kv_format, p.batch, p.kv_heads, p.tk, p.dk);
    d["v_blocks"] = blocks_to_py(p.v, kv_format, p.batch, p.kv_heads, p.tk, p.dv);
  } else {
    d["k_blocks"] = py::none();
    d["v_blocks"] = py::none();
  }
  d["key_valid"] = p.key_valid.empty() ? py::object(py::none())
                                       : py::object(to_array(p.key_valid, {p.batch, p.tk}));
  d["mask"] = p.mask ? py::object(to_array(p.mask->data, {p.mask->batch, p.mask->heads, p.tq, p.tk}))
                     : py::object(py::none());
  d["bias"] = p.bias ? py::object(to_array(p.bias->data, {p.bias->batch, p.bias->heads, p.tq, p.tk}))
                     : py::object(py::none());
  d["causal"] = p.causal;
  d["align"] = p.align == Align::top_left ? "top_left" : "bottom_right";
  d["window_left"] = p.window_left;
  d["window_right"] = p.window_right;
  d["scale"] = p.scale;
  d["softcap"] = p.softcap;
  d["dout"] = p.dout.empty() ? py::object(py::none())
                             : py::object(to_array(p.dout, {p.batch, p.heads, p.tq, p.dv}));
  return d;
}

Problem problem_from_py(const py::dict& d) {
  Problem p;
  p.dtype = parse_dtype(d["dtype"].cast<std::string>());
  // The input formats (SPEC 1.1, 1.2); absent or equal to dtype: uniform.
  const auto input_format = [&](const char* field, bool kv) -> std::optional<DType> {
    if (!d.contains(field) || d[field].is_none()) return std::nullopt;
    const auto name = d[field].cast<std::string>();
    try {
      const DType f = kv ? parse_kv_format(name) : parse_format(name);
      return f == p.dtype ? std::nullopt : std::optional<DType>(f);
    } catch (const InputError& e) {
      throw InputError(fmt::format("problem field '{}': {}", field, e.what()));
    }
  };
  p.q_dtype = input_format("q_dtype", false);
  p.kv_dtype = input_format("kv_dtype", true);
  for (auto [field, x] : {std::pair{"batch", &p.batch}, {"heads", &p.heads},
                          {"kv_heads", &p.kv_heads}, {"tq", &p.tq}, {"tk", &p.tk},
                          {"dk", &p.dk}, {"dv", &p.dv}}) {
    *x = d[field].cast<int64_t>();
    if (*x < 1) throw InputError(fmt::format("problem field '{}': {} is not a positive size", field, *x));
  }
  const auto tensor = [&](const char* field, int64_t h, int64_t t, int64_t e) {
    Tensor x;
    x.strides = contiguous_strides(p.batch, h, t, e);
    x.data = values<double>(d[field], static_cast<size_t>(p.batch * h * t * e), field);
    return x;
  };
  p.q = tensor("q", p.heads, p.tq, p.dk);
  p.k = tensor("k", p.kv_heads, p.tk, p.dk);
  p.v = tensor("v", p.kv_heads, p.tk, p.dv);
  if (!d["key_valid"].is_none()) {
    p.key_valid = values<uint8_t>(d["key_valid"], static_cast<size_t>(p.batch * p.tk), "key_valid");
  }
  p.mask = broadcast_from_py<uint8_t>(d, "mask", p);
  p.bias = broadcast_from_py<double>(d, "bias", p);
  p.causal = d["causal"].cast<bool>();
  const auto align = d["align"].cast<std::string>();
  if (align != "top_left" && align != "bottom_right") {
    throw InputError(fmt::format("problem field 'align': '{}' is not top_left or bottom_right", align));
  }
  p.align = align == "top_left" ? Align::top_left : Align::bottom_right;
  p.window_left = d["window_left"].cast<int64_t>();
  p.window_right = d["window_right"].cast<int64_t>();
  p.scale = d["scale"].cast<double>();
  p.softcap = d["softcap"].cast<double>();
  if (!d["dout"].is_none()) {
    p.dout = values<double>(d["dout"], static_cast<size_t>(p.batch * p.heads * p.tq * p.dv), "dout");
  }
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

PrecisionTraits precision_from_py(const py::dict& prec) {
  PrecisionTraits t;
  // The declaration checked the formats: P and S may be stored in E4M3,
  // Q rounded to any format; the accumulations are output formats.
  const auto format = [&](const char* key) -> std::optional<DType> {
    if (!prec.contains(key) || prec[key].is_none()) return std::nullopt;
    return parse_format(prec[key].cast<std::string>());
  };
  t.accum = parse_dtype(prec["accum"].cast<std::string>());
  t.p_cast = parse_format(prec["p_cast"].cast<std::string>());
  t.s_cast = format("s_cast");
  t.exp_ulps = prec["exp_ulps"].cast<uint32_t>();
  t.flush_to_zero = prec["flush_to_zero"].cast<bool>();
  t.key_block = prec["key_block"].cast<int64_t>();
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
  for (auto [key, stage] : {std::pair{"score_accum", &t.score_accum},
                            {"softmax_accum", &t.softmax_accum}, {"pv_accum", &t.pv_accum}}) {
    if (prec.contains(key) && !prec[key].is_none()) {
      *stage = parse_dtype(prec[key].cast<std::string>());
    }
  }
  return t;
}

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
  const py::dict lim = d["limits"];
  i.limits.max_tq = lim["max_tq"].cast<int64_t>();
  i.limits.max_tk = lim["max_tk"].cast<int64_t>();
  i.limits.max_batch_heads = lim["max_batch_heads"].cast<int64_t>();
  i.limits.dk_min = lim["dk_min"].cast<int64_t>();
  i.limits.dk_max = lim["dk_max"].cast<int64_t>();
  i.limits.dk_multiple = lim["dk_multiple"].cast<int64_t>();
  i.limits.dv_equals_dk = lim["dv_equals_dk"].cast<bool>();
  return i;
}

}  // namespace attncheck::python
