// Both directions of the C ABI (host/abi_marshal.h): descriptors read into
// ImplInfo, problems written into the C structs of either version, and the
// layout of the outputs a plugin writes.

#include "host/abi_marshal.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <type_traits>

#include "attncheck/dtype.h"
#include "core/text.h"
#include "host/descriptor_validation.h"

namespace attncheck::host_detail {
namespace {

// Strides for an output of `shape` in the layout family of `like` (of
// shape `like_shape`): the same axis order, and one element of padding
// between levels when `like` is not dense. A plugin declaring
// FEATURE_STRIDES thus writes its output through strides whenever it reads
// its inputs through them, and a write into a gap shows.
Shape layout_like(const Tensor& like, const Shape& like_shape, const Shape& shape) {
  std::array<int, 4> order{0, 1, 2, 3};
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return like.strides[a] > like.strides[b]; });
  const int64_t dense_size = like_shape[0] * like_shape[1] * like_shape[2] * like_shape[3];
  const int64_t pad = static_cast<int64_t>(like.data.size()) == dense_size ? 0 : 1;
  Shape strides{};
  int64_t next = 1;
  for (int k = 3; k >= 0; --k) {
    strides[order[k]] = next;
    next = next * shape[order[k]] + pad;
  }
  return strides;
}

template <typename T>
Shape broadcast_strides(const Broadcast<T>& m, int64_t tq, int64_t tk) {
  return {m.batch == 1 ? 0 : m.heads * tq * tk, m.heads == 1 ? 0 : tq * tk, tk, 1};
}

// The stages a version 2 descriptor or path declares (SPEC 4.1): a field
// whose bit is clear stays unset (accum; q_cast: Q not rounded), so a
// zero-filled attncheck_stages is the version 1 reading.
void read_stages(const attncheck_stages& s, PrecisionTraits& t) {
  if (s.set & ATTNCHECK_STAGE_Q_CAST) {
    if (s.q_cast == ATTNCHECK_Q_CAST_KV) {
      t.q_cast_kv = true;
    } else {
      t.q_cast = static_cast<DType>(s.q_cast);
    }
  }
  if (s.set & ATTNCHECK_STAGE_SCORE_ACCUM) t.score_accum = static_cast<DType>(s.score_accum);
  if (s.set & ATTNCHECK_STAGE_SOFTMAX_ACCUM)
    t.softmax_accum = static_cast<DType>(s.softmax_accum);
  if (s.set & ATTNCHECK_STAGE_PV_ACCUM) t.pv_accum = static_cast<DType>(s.pv_accum);
}

// The precision of a descriptor of either version or of a path: their
// serving parts (s_cast, ftz_formats, stages) have the same names.
// `stages` is NULL where a descriptor's struct_size does not cover them.
template <typename Declaration>
PrecisionTraits precision_of(const Declaration& d, const attncheck_stages* stages) {
  const auto& p = d.precision;
  PrecisionTraits t;
  t.accum = static_cast<DType>(p.accum);
  t.p_cast = static_cast<DType>(p.p_cast);
  t.exp_ulps = p.exp_ulps;
  t.flush_to_zero = p.flush_to_zero != 0;
  t.key_block = p.key_block;
  t.s_cast = t.accum;
  uint32_t ftz = 0;
  if constexpr (!std::is_same_v<Declaration, attncheck_v1_impl>) {
    t.s_cast = static_cast<DType>(d.s_cast);
    ftz = d.ftz_formats;
  }
  if (stages) read_stages(*stages, t);
  // flush_to_zero alone flushes every format: pv_accum's too when it is
  // declared (undeclared, it flushes as accum does and needs no bit, so a
  // declaration without stages keeps its bits).
  const uint32_t every = kFtzAccum | kFtzPCast | kFtzOut | (t.pv_accum ? kFtzPvAccum : 0u);
  t.ftz_formats = ftz ? ftz : t.flush_to_zero ? every : 0;
  return t;
}

template <typename CLimits>
Limits limits_of(const CLimits& l) {
  Limits out;
  out.max_tq = l.max_tq;
  out.max_tk = l.max_tk;
  out.max_batch_heads = l.max_batch_heads;
  out.dk_min = l.dk_min;
  out.dk_max = l.dk_max;
  out.dk_multiple = l.dk_multiple;
  out.dv_equals_dk = l.dv_equals_dk != 0;
  return out;
}

template <typename Descriptor>
std::vector<DTypeCombo> combos_of(const Descriptor& d) {
  std::vector<DTypeCombo> combos;
  if constexpr (std::is_same_v<Descriptor, attncheck_impl>) {
    for (uint32_t k = 0; k < d.n_combos; ++k) {
      const attncheck_dtype_combo& c = d.combos[k];
      combos.push_back({static_cast<DType>(c.q_dtype), static_cast<DType>(c.kv_dtype),
                        static_cast<DType>(c.out_dtype)});
    }
    if (!combos.empty()) return combos;
  }
  for (DType t : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    if (d.dtypes & dtype_bit(t)) combos.push_back({t, t, t});
  }
  return combos;
}

template <typename Descriptor>
ImplInfo common_info_of(const Descriptor& d, const std::string& origin) {
  ImplInfo info;
  info.name = d.name;
  info.kind = Kind::plugin;
  info.combos = combos_of(d);
  info.dtypes = uniform_dtypes(info.combos);
  info.features = d.features;
  info.empty_rows = static_cast<EmptyRowPolicy>(d.empty_rows);
  info.precision = declared_precision(d);
  info.limits = limits_of(d.limits);
  info.description = "from " + origin;
  info.origin = origin;
  return info;
}

ImplInfo info_of(const attncheck_v1_impl& d, const std::string& origin) {
  return common_info_of(d, origin);
}

ImplInfo info_of(const attncheck_impl& d, const std::string& origin) {
  ImplInfo info = common_info_of(d, origin);
  for (const attncheck_path& p : declared_paths(d)) {
    ImplPath path;
    path.name = p.name ? p.name : "";
    path.precision = declared_precision(p);
    info.paths.push_back(std::move(path));
  }
  return info;
}

}  // namespace

PrecisionTraits declared_precision(const attncheck_v1_impl& d) {
  return precision_of(d, nullptr);
}

PrecisionTraits declared_precision(const attncheck_impl& d) {
  const bool staged = covers(d, offsetof(attncheck_impl, stages), sizeof d.stages);
  return precision_of(d, staged ? &d.stages : nullptr);
}

PrecisionTraits declared_precision(const attncheck_path& p) {
  // A path is at least its first layout (validation), which has stages.
  return precision_of(p, &p.stages);
}

std::vector<attncheck_path> declared_paths(const attncheck_impl& d) {
  std::vector<attncheck_path> paths;
  if (!covers(d, offsetof(attncheck_impl, paths), sizeof d.paths) || d.n_paths == 0 || !d.paths)
    return paths;
  const auto* base = reinterpret_cast<const unsigned char*>(d.paths);
  uint32_t stride = 0;
  std::memcpy(&stride, base + offsetof(attncheck_path, struct_size), sizeof stride);
  if (stride < kFirstPathSize || stride > kMaxStructSize) return paths;
  for (uint32_t k = 0; k < d.n_paths; ++k) {
    attncheck_path p{};
    std::memcpy(&p, base + size_t{k} * stride, std::min<size_t>(stride, sizeof p));
    paths.push_back(p);
  }
  return paths;
}

std::vector<DTypeCombo> declared_combos(const attncheck_impl& d) { return combos_of(d); }
std::vector<DTypeCombo> declared_combos(const attncheck_v1_impl& d) { return combos_of(d); }

uint32_t uniform_dtypes(const std::vector<DTypeCombo>& combos) {
  uint32_t bits = 0;
  for (const DTypeCombo& c : combos) {
    if (c.q == c.out && c.kv == c.out) bits |= dtype_bit(c.out);
  }
  return bits;
}

ImplInfo declared_info(const attncheck_impl& d, const std::string& origin) {
  return info_of(d, origin);
}

ImplInfo declared_info(const attncheck_v1_impl& d, const std::string& origin) {
  return info_of(d, origin);
}

void copy_strides(int64_t (&dst)[4], const Shape& src) {
  for (int k = 0; k < 4; ++k) dst[k] = src[k];
}

OutputLayout output_layout(const Problem& p, bool strided) {
  OutputLayout l;
  if (!p.packed_q()) {
    l.out_shape = {p.batch, p.heads, p.tq, p.dv};
    l.out_strides = strided ? layout_like(p.q, {p.batch, p.heads, p.tq, p.dk}, l.out_shape)
                            : contiguous(l.out_shape);
    l.abi_out_strides = l.out_strides;
    l.lse_shape = {p.batch, p.heads, p.tq, 1};
    return l;
  }
  const int64_t rows = p.total_q();
  // Axes (1, row, head, d): q's strides in that order, axis 0 outermost.
  l.out_shape = {1, rows, p.heads, p.dv};
  if (strided) {
    Tensor like;
    like.strides = {std::numeric_limits<int64_t>::max() / 4, p.q.strides[2], p.q.strides[1],
                    p.q.strides[3]};
    like.data.resize(p.q.data.size());
    l.out_strides = layout_like(like, {1, rows, p.heads, p.dk}, l.out_shape);
  } else {
    l.out_strides = contiguous(l.out_shape);
  }
  l.abi_out_strides = {0, l.out_strides[2], l.out_strides[1], l.out_strides[3]};
  l.lse_shape = {1, p.heads, rows, 1};
  return l;
}

template <uint32_t Version>
MarshalledProblem<Version>::MarshalledProblem(const Problem& p) {
  c.abi_version = Abi<Version>::kVersion;
  c.dtype = static_cast<uint32_t>(p.dtype);
  c.batch = p.batch;
  c.heads = p.heads;
  c.kv_heads = p.kv_heads;
  c.tq = p.tq;
  c.tk = p.tk;
  c.dk = p.dk;
  c.dv = p.dv;
  // Every input is one guarded buffer; reserving keeps their addresses.
  inputs.reserve(14);
  const auto add = [&](const char* name, const void* data, size_t bytes, size_t element) {
    return inputs.emplace_back(name, data, bytes, element).data();
  };
  const DTypeCombo formats = combo_of(p);
  const bool blocks = is_block_format(formats.kv);
  const std::vector<unsigned char> q = encode(formats.q, p.q.data),
                                   k = blocks ? encode_blocks(formats.kv, p.k.data)
                                              : encode(formats.kv, p.k.data),
                                   v = blocks ? encode_blocks(formats.kv, p.v.data)
                                              : encode(formats.kv, p.v.data);
  const size_t kv_unit = blocks ? block_bytes(formats.kv) : element_size(formats.kv);
  c.q = add("q", q.data(), q.size(), element_size(formats.q));
  c.k = add("k", k.data(), k.size(), kv_unit);
  c.v = add("v", v.data(), v.size(), kv_unit);
  copy_strides(c.q_strides, p.q.strides);
  copy_strides(c.k_strides, p.k.strides);
  copy_strides(c.v_strides, p.v.strides);
  if (!p.key_valid.empty()) {
    c.key_valid =
        static_cast<const uint8_t*>(add("key_valid", p.key_valid.data(), p.key_valid.size(), 1));
  }
  if (p.mask) {
    c.mask = static_cast<const uint8_t*>(add("mask", p.mask->data.data(), p.mask->data.size(), 1));
    copy_strides(c.mask_strides, broadcast_strides(*p.mask, p.tq, p.tk));
  }
  if (p.bias) {
    c.bias = static_cast<const double*>(
        add("bias", p.bias->data.data(), p.bias->data.size() * sizeof(double), sizeof(double)));
    copy_strides(c.bias_strides, broadcast_strides(*p.bias, p.tq, p.tk));
  }
  c.causal = p.causal ? 1 : 0;
  c.align = static_cast<uint32_t>(p.align);
  c.window_left = p.window_left;
  c.window_right = p.window_right;
  c.scale = p.scale;
  c.softcap = p.softcap;
  if constexpr (Version >= 2) {
    c.q_dtype = static_cast<uint32_t>(formats.q);
    c.kv_dtype = static_cast<uint32_t>(formats.kv);
    const Descales descale = p.descale.value_or(Descales{});
    c.q_descale = descale.q;
    c.k_descale = descale.k;
    c.v_descale = descale.v;
    const auto add_all = [&](const char* name, const auto& values) {
      using T = typename std::decay_t<decltype(values)>::value_type;
      return values.empty() ? nullptr
                            : static_cast<const T*>(
                                  add(name, values.data(), values.size() * sizeof(T), sizeof(T)));
    };
    c.sink = add_all("sink", p.sink);
    if (p.packed) {
      c.cu_seqlens_q = add_all("cu_seqlens_q", p.packed->cu_seqlens_q);
      c.cu_seqlens_k = add_all("cu_seqlens_k", p.packed->cu_seqlens_k);
    }
    if (p.paged) {
      c.seqlens_k = add_all("seqlens_k", p.paged->seqlens_k);
      c.block_table = add_all("block_table", p.paged->block_table);
      c.block_table_stride = p.paged->block_table_stride;
      c.page_size = p.paged->page_size;
      c.num_pages = p.paged->num_pages;
    }
  }
}

template <uint32_t Version>
const void* MarshalledProblem<Version>::add_dout(const std::vector<unsigned char>& bytes,
                                                 DType d) {
  return inputs.emplace_back("dout", bytes.data(), bytes.size(), element_size(d)).data();
}

template <uint32_t Version>
void MarshalledProblem<Version>::check_inputs(const std::string& who) const {
  for (const GuardedInput& in : inputs) in.check(who);
}

template struct MarshalledProblem<1>;
template struct MarshalledProblem<2>;

std::string plugin_error_message(const char* error, size_t capacity) {
  const std::string m(error, strnlen(error, capacity));
  // The plugin's text: one line, no raw control characters (an ESC would
  // reach the terminal).
  return m.empty() ? "(the plugin returned ATTNCHECK_ERROR without a message)" : printable(m);
}

std::string bad_return_code(const std::string& who, const char* call, int code) {
  return fmt::format(
      "{} returned {} from {}, which is none of ATTNCHECK_OK (0), "
      "ATTNCHECK_ERROR (1) and ATTNCHECK_UNSUPPORTED (2)",
      who, code, call);
}

}  // namespace attncheck::host_detail
