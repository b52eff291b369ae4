#include "attncheck/plugin_loader.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <type_traits>
#include <utility>

#include "attncheck/error.h"
#include "attncheck/registry.h"
#include "attncheck/text.h"

namespace attncheck {

namespace {

size_t element_size(DType d) {
  switch (d) {
    case DType::f64:
      return 8;
    case DType::f32:
      return 4;
    case DType::bf16:
    case DType::f16:
      return 2;
    case DType::e4m3:
    case DType::e5m2:
      return 1;
  }
  return 8;
}

// Element bit patterns the harness writes into output buffers: a sentinel
// NaN in every element the plugin must write, and a signalling NaN of
// another payload in the guards and gaps. Computed NaNs carry neither
// payload, so a NaN the plugin writes is not mistaken for "unwritten".
uint64_t sentinel_bits(DType d) {
  switch (d) {
    case DType::f64:
      return 0x7ff8dead0000beefull;
    case DType::f32:
      return 0x7fc0beefu;
    case DType::bf16:
      return 0x7fdau;
    case DType::f16:
      return 0x7e5au;
    // fp8 is never an output format; only NaN patterns would serve, and
    // e4m3 has one.
    case DType::e4m3:
      return 0x7fu;
    case DType::e5m2:
      return 0x7du;
  }
  return 0;
}

uint64_t guard_bits(DType d) {
  switch (d) {
    case DType::f64:
      return 0x7ff4beef0000deadull;
    case DType::f32:
      return 0x7fa0deadu;
    case DType::bf16:
      return 0x7fa5u;
    case DType::f16:
      return 0x7d5au;
    case DType::e4m3:
      return 0xffu;
    case DType::e5m2:
      return 0x7eu;
  }
  return 0;
}

uint64_t load_bits(DType d, const unsigned char* at) {
  uint64_t bits = 0;
  switch (element_size(d)) {
    case 8:
      std::memcpy(&bits, at, 8);
      break;
    case 4: {
      uint32_t u;
      std::memcpy(&u, at, 4);
      bits = u;
      break;
    }
    case 2: {
      uint16_t u;
      std::memcpy(&u, at, 2);
      bits = u;
      break;
    }
    default:
      bits = *at;
      break;
  }
  return bits;
}

void store_bits(DType d, unsigned char* at, uint64_t bits) {
  switch (element_size(d)) {
    case 8:
      std::memcpy(at, &bits, 8);
      break;
    case 4: {
      const auto u = static_cast<uint32_t>(bits);
      std::memcpy(at, &u, 4);
      break;
    }
    case 2: {
      const auto u = static_cast<uint16_t>(bits);
      std::memcpy(at, &u, 2);
      break;
    }
    default:
      *at = static_cast<unsigned char>(bits);
      break;
  }
}

// Values travel as doubles exactly representable in d, so every conversion
// here is exact; one that is not is refused (check_storable), never rounded.
void store_value(DType d, unsigned char* at, double x) {
  switch (d) {
    case DType::f64:
      std::memcpy(at, &x, 8);
      return;
    case DType::f32: {
      check_storable(d, x);
      const auto f = static_cast<float>(x);
      std::memcpy(at, &f, 4);
      return;
    }
    case DType::bf16:
      store_bits(d, at, bf16_bits(x));
      return;
    case DType::f16:
      store_bits(d, at, f16_bits(x));
      return;
    case DType::e4m3:
    case DType::e5m2:
      store_bits(d, at, fp8_bits(d, x));
      return;
  }
}

double load_value(DType d, const unsigned char* at) {
  switch (d) {
    case DType::f64: {
      double x;
      std::memcpy(&x, at, 8);
      return x;
    }
    case DType::f32: {
      float f;
      std::memcpy(&f, at, 4);
      return f;
    }
    case DType::bf16:
      return bf16_value(static_cast<uint16_t>(load_bits(d, at)));
    case DType::f16:
      return f16_value(static_cast<uint16_t>(load_bits(d, at)));
    case DType::e4m3:
    case DType::e5m2:
      return fp8_value(d, static_cast<uint8_t>(load_bits(d, at)));
  }
  return 0;
}

// An input array in the plugin's dtype, element for element (gaps of a
// strided tensor stay NaN).
std::vector<unsigned char> encode(DType d, const std::vector<double>& values) {
  const size_t size = element_size(d);
  std::vector<unsigned char> bytes(std::max<size_t>(1, values.size()) * size);
  for (size_t k = 0; k < values.size(); ++k) store_value(d, bytes.data() + k * size, values[k]);
  return bytes;
}

using Shape = std::array<int64_t, 4>;

// An output buffer of `shape` laid out by `strides`, surrounded by guard
// regions; elements of the layout's gaps count as guard too.
class GuardedArray {
 public:
  GuardedArray(std::string name, DType d, Shape shape, Shape strides)
      : name_(std::move(name)),
        dtype_(d),
        size_(element_size(d)),
        shape_(shape),
        strides_(strides) {
    int64_t last = 0;
    for (int k = 0; k < 4; ++k) last += (shape_[k] - 1) * strides_[k];
    span_ = last + 1;
    const int64_t total = span_ + 2 * kPluginGuardElements;
    storage_.resize(static_cast<size_t>(total) * size_);
    logical_.assign(static_cast<size_t>(span_), 0);
    for (int64_t e = 0; e < total; ++e)
      store_bits(dtype_, element(e - kPluginGuardElements), guard_bits(d));
    for_each_index([&](int64_t off, const Shape&) {
      logical_[static_cast<size_t>(off)] = 1;
      store_bits(dtype_, element(off), sentinel_bits(d));
    });
  }

  void* data() { return element(0); }
  const Shape& strides() const { return strides_; }

  // Throws when an element outside the logical tensor changed.
  void check_guards(const std::string& who) const {
    int64_t changed = 0, first = 0;
    for (int64_t e = -kPluginGuardElements; e < span_ + kPluginGuardElements; ++e) {
      if (e >= 0 && e < span_ && logical_[static_cast<size_t>(e)]) continue;
      if (load_bits(dtype_, element(e)) != guard_bits(dtype_)) {
        if (changed++ == 0) first = e;
      }
    }
    if (changed == 0) return;
    const char* where = first < 0        ? "in the guard region before the buffer"
                        : first >= span_ ? "in the guard region after the buffer"
                                         : "in a gap of the strided layout";
    throw PluginContractError(fmt::format(
        "{} wrote outside its output: {} element at offset {}, {} (the output spans offsets "
        "[0, {})); {} element(s) outside the output changed",
        who, name_, first, where, span_, changed));
  }

  // Throws when an element the plugin had to write still holds the sentinel.
  void check_written(const std::string& who) const {
    int64_t unwritten = 0;
    Shape first{};
    for_each_index([&](int64_t off, const Shape& idx) {
      if (load_bits(dtype_, element(off)) == sentinel_bits(dtype_)) {
        if (unwritten++ == 0) first = idx;
      }
    });
    if (unwritten == 0) return;
    std::string index = fmt::format("{}", fmt::join(first, ", "));
    throw PluginContractError(fmt::format(
        "{} returned ATTNCHECK_OK but left {}[{}] unwritten (still the sentinel NaN); {} of "
        "{} elements unwritten",
        who, name_, index, unwritten, shape_[0] * shape_[1] * shape_[2] * shape_[3]));
  }

  // The logical elements as doubles, row-major.
  std::vector<double> values() const {
    std::vector<double> out;
    out.reserve(static_cast<size_t>(shape_[0] * shape_[1] * shape_[2] * shape_[3]));
    for_each_index(
        [&](int64_t off, const Shape&) { out.push_back(load_value(dtype_, element(off))); });
    return out;
  }

 private:
  unsigned char* element(int64_t e) {
    return storage_.data() + static_cast<size_t>(e + kPluginGuardElements) * size_;
  }
  const unsigned char* element(int64_t e) const {
    return storage_.data() + static_cast<size_t>(e + kPluginGuardElements) * size_;
  }

  template <typename F>
  void for_each_index(F f) const {
    Shape idx{};
    for (idx[0] = 0; idx[0] < shape_[0]; ++idx[0])
      for (idx[1] = 0; idx[1] < shape_[1]; ++idx[1])
        for (idx[2] = 0; idx[2] < shape_[2]; ++idx[2])
          for (idx[3] = 0; idx[3] < shape_[3]; ++idx[3]) {
            f(idx[0] * strides_[0] + idx[1] * strides_[1] + idx[2] * strides_[2] +
                  idx[3] * strides_[3],
              idx);
          }
  }

  std::string name_;
  DType dtype_;
  size_t size_;
  Shape shape_, strides_;
  int64_t span_ = 0;
  std::vector<unsigned char> storage_;
  std::vector<uint8_t> logical_;
};

Shape contiguous(const Shape& s) { return contiguous_strides(s[0], s[1], s[2], s[3]); }

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
void copy_strides(int64_t (&dst)[4], const std::array<T, 4>& src) {
  for (int k = 0; k < 4; ++k) dst[k] = src[k];
}

template <typename T>
Shape broadcast_strides(const Broadcast<T>& m, int64_t tq, int64_t tk) {
  return {m.batch == 1 ? 0 : m.heads * tq * tk, m.heads == 1 ? 0 : tq * tk, tk, 1};
}

// A read-only input handed to a plugin: its bytes between guard regions
// of kPluginGuardElements elements each, and a copy of the whole to check
// after the call that the plugin wrote neither into the input nor past it.
class GuardedInput {
 public:
  GuardedInput(std::string name, const void* data, size_t bytes, size_t element)
      : name_(std::move(name)),
        element_(element),
        guard_(static_cast<size_t>(kPluginGuardElements) * element),
        size_(bytes) {
    storage_.assign(guard_ + size_ + guard_, 0xa5);
    if (size_) std::memcpy(storage_.data() + guard_, data, size_);
    pristine_ = storage_;
  }

  void* data() { return storage_.data() + guard_; }

  // Throws when any byte of the input or its guards changed.
  void check(const std::string& who) const {
    size_t first = 0, changed = 0;
    for (size_t b = 0; b < storage_.size(); ++b) {
      if (storage_[b] != pristine_[b] && changed++ == 0) first = b;
    }
    if (changed == 0) return;
    const auto element = static_cast<int64_t>(first / element_) - kPluginGuardElements;
    const char* where = first < guard_           ? "in the guard region before it"
                        : first >= guard_ + size_ ? "in the guard region after it"
                                                   : "inside it (inputs are read-only)";
    throw PluginContractError(fmt::format(
        "{} wrote to its input {}: element at offset {}, {} (the input spans offsets [0, {})); "
        "{} byte(s) changed",
        who, name_, element, where, size_ / element_, changed));
  }

 private:
  std::string name_;
  size_t element_, guard_, size_;
  std::vector<unsigned char> storage_, pristine_;
};

// Where a forward pass writes: out as the harness holds it (shape and
// strides of its GuardedArray, whose values() are then in out_index order)
// and the strides the plugin is given (indexed b, h, i, d); lse's shape.
// Dense queries: out [b][h][tq][dv] (in q's layout family for STRIDES
// implementations), lse [b][h][tq]. Packed queries (SPEC 1.1): out packed
// like q, [total_q][heads][dv] with out_strides {0, dv, heads * dv, 1} (or
// q's layout family), and lse [heads][total_q].
struct OutputLayout {
  Shape out_shape, out_strides, abi_out_strides, lse_shape;
};

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

// The two layouts of the C ABI, as the code below uses them: the frozen
// version 1 structs and plugin.h's version 2 ones. Every version 1 field
// has the same name in both, so one template body serves the two.
struct AbiV1 {
  static constexpr uint32_t kVersion = ATTNCHECK_V1_ABI_VERSION;
  using Descriptor = attncheck_v1_impl;
  using CProblemT = attncheck_v1_problem;
  using Outputs = attncheck_v1_outputs;
  using Grads = attncheck_v1_grads;
};
struct AbiV2 {
  static constexpr uint32_t kVersion = ATTNCHECK_ABI_VERSION;
  using Descriptor = attncheck_impl;
  using CProblemT = attncheck_problem;
  using Outputs = attncheck_outputs;
  using Grads = attncheck_grads;
};
static_assert(AbiV2::kVersion == 2, "plugin.h and this loader speak version 2");

// The C problem of p, and the guarded buffers it points into. A version 1
// problem ends at softcap (its abi_version is 1); a version 2 one carries
// the formats, descales, sink and sequence layout of p.
template <typename Abi>
struct CProblem {
  typename Abi::CProblemT c{};
  std::vector<GuardedInput> inputs;

  explicit CProblem(const Problem& p) {
    c.abi_version = Abi::kVersion;
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
    const std::vector<unsigned char> q = encode(formats.q, p.q.data),
                                     k = encode(formats.kv, p.k.data),
                                     v = encode(formats.kv, p.v.data);
    c.q = add("q", q.data(), q.size(), element_size(formats.q));
    c.k = add("k", k.data(), k.size(), element_size(formats.kv));
    c.v = add("v", v.data(), v.size(), element_size(formats.kv));
    copy_strides(c.q_strides, p.q.strides);
    copy_strides(c.k_strides, p.k.strides);
    copy_strides(c.v_strides, p.v.strides);
    if (!p.key_valid.empty()) {
      c.key_valid = static_cast<const uint8_t*>(
          add("key_valid", p.key_valid.data(), p.key_valid.size(), 1));
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
    if constexpr (Abi::kVersion >= 2) {
      c.q_dtype = static_cast<uint32_t>(formats.q);
      c.kv_dtype = static_cast<uint32_t>(formats.kv);
      const Descales descale = p.descale.value_or(Descales{});
      c.q_descale = descale.q;
      c.k_descale = descale.k;
      c.v_descale = descale.v;
      const auto add_all = [&](const char* name, const auto& values) {
        using T = typename std::decay_t<decltype(values)>::value_type;
        return values.empty() ? nullptr
                              : static_cast<const T*>(add(name, values.data(),
                                                          values.size() * sizeof(T), sizeof(T)));
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

  // Adds dout (backward) as one more guarded input; returns its data.
  const void* add_dout(const std::vector<unsigned char>& bytes, DType d) {
    return inputs.emplace_back("dout", bytes.data(), bytes.size(), element_size(d)).data();
  }

  void check_inputs(const std::string& who) const {
    for (const GuardedInput& in : inputs) in.check(who);
  }
};

template <typename Outputs>
std::string error_message(const Outputs& o) {
  const std::string m(o.error, strnlen(o.error, sizeof o.error));
  // The plugin's text: one line, no raw control characters (an ESC would
  // reach the terminal).
  return m.empty() ? "(the plugin returned ATTNCHECK_ERROR without a message)" : printable(m);
}

std::string bad_code(const std::string& who, const char* call, int code) {
  return fmt::format(
      "{} returned {} from {}, which is none of ATTNCHECK_OK (0), "
      "ATTNCHECK_ERROR (1) and ATTNCHECK_UNSUPPORTED (2)",
      who, code, call);
}

// A version 1 descriptor is widened to the version 2 model: S is not cast
// (s_cast = accum), flush_to_zero speaks for every format, and the dtypes
// bits are the combinations {d, d, d}.
template <typename Descriptor>
PrecisionTraits precision_of(const Descriptor& d) {
  const auto& p = d.precision;
  PrecisionTraits t;
  t.accum = static_cast<DType>(p.accum);
  t.p_cast = static_cast<DType>(p.p_cast);
  t.exp_ulps = p.exp_ulps;
  t.flush_to_zero = p.flush_to_zero != 0;
  t.key_block = p.key_block;
  t.s_cast = t.accum;
  uint32_t ftz = 0;
  if constexpr (std::is_same_v<Descriptor, attncheck_impl>) {
    t.s_cast = static_cast<DType>(d.s_cast);
    ftz = d.ftz_formats;
  }
  t.ftz_formats = ftz ? ftz : t.flush_to_zero ? kFtzAccum | kFtzPCast | kFtzOut : 0;
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

// The formats d with {d, d, d} among combos, as dtypes bits.
uint32_t uniform_dtypes(const std::vector<DTypeCombo>& combos) {
  uint32_t bits = 0;
  for (const DTypeCombo& c : combos) {
    if (c.q == c.out && c.kv == c.out) bits |= dtype_bit(c.out);
  }
  return bits;
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

template <typename Abi>
class PluginImpl : public Implementation {
 public:
  PluginImpl(const typename Abi::Descriptor& d, const std::string& origin,
             std::shared_ptr<void> keep_alive)
      : desc_(d), keep_alive_(std::move(keep_alive)) {
    info_.name = d.name;
    info_.kind = Kind::plugin;
    info_.combos = combos_of(d);
    info_.dtypes = uniform_dtypes(info_.combos);
    info_.features = d.features;
    info_.empty_rows = static_cast<EmptyRowPolicy>(d.empty_rows);
    info_.precision = precision_of(d);
    info_.limits = limits_of(d.limits);
    info_.description = "from " + origin;
    info_.origin = origin;
    who_ = fmt::format("plugin implementation '{}' ({})", info_.name, origin);
  }

  const ImplInfo& info() const override { return info_; }

  ForwardResult forward(const Problem& given) const override {
    check_declared(given);
    std::lock_guard lock(mutex_);
    Problem packed;
    const bool strided = info_.has(ATTNCHECK_FEATURE_STRIDES);
    const Problem& p = strided ? given : (packed = given.contiguous());
    CProblem<Abi> cp(p);
    const OutputLayout layout = output_layout(p, strided);
    GuardedArray out("out", p.dtype, layout.out_shape, layout.out_strides);
    std::optional<GuardedArray> weights, lse;
    // SPEC 1.1: packed queries return no weights.
    if (info_.has(ATTNCHECK_FEATURE_WEIGHTS) && !p.packed_q()) {
      const Shape s{p.batch, p.heads, p.tq, p.tk};
      weights.emplace("weights", DType::f64, s, contiguous(s));
    }
    if (info_.has(ATTNCHECK_FEATURE_LSE)) {
      lse.emplace("lse", DType::f64, layout.lse_shape, contiguous(layout.lse_shape));
    }
    typename Abi::Outputs co;
    std::memset(&co, 0, sizeof co);
    co.out = out.data();
    copy_strides(co.out_strides, layout.abi_out_strides);
    co.weights = weights ? static_cast<double*>(weights->data()) : nullptr;
    co.lse = lse ? static_cast<double*>(lse->data()) : nullptr;

    const int code = desc_.forward(desc_.ctx, &cp.c, &co);

    cp.check_inputs(who_);
    out.check_guards(who_);
    if (weights) weights->check_guards(who_);
    if (lse) lse->check_guards(who_);
    switch (code) {
      case ATTNCHECK_OK:
        break;
      case ATTNCHECK_ERROR:
        return ForwardResult::failure(error_message(co));
      case ATTNCHECK_UNSUPPORTED:
        return ForwardResult::unsupported();
      default:
        throw PluginContractError(bad_code(who_, "forward", code));
    }
    out.check_written(who_);
    if (weights) weights->check_written(who_);
    if (lse) lse->check_written(who_);
    ForwardResult r;
    r.out = out.values();
    if (weights) r.weights = weights->values();
    if (lse) r.lse = lse->values();
    return r;
  }

  BackwardResult backward(const Problem& given) const override {
    if (!info_.has(ATTNCHECK_FEATURE_BACKWARD) || !desc_.backward) {
      return Implementation::backward(given);
    }
    check_declared(given);
    std::lock_guard lock(mutex_);
    Problem packed;
    const bool strided = info_.has(ATTNCHECK_FEATURE_STRIDES);
    const Problem& p = strided ? given : (packed = given.contiguous());
    CProblem<Abi> cp(p);
    typename Abi::Grads grads;
    std::memset(&grads, 0, sizeof grads);
    grads.dout = cp.add_dout(encode(p.dtype, p.dout), p.dtype);
    // SPEC 1.1: dout and dq packed like q, dk and dv like k.
    const int64_t q_rows = p.total_q();
    const int64_t k_rows = p.packed_k() ? p.packed->cu_seqlens_k.back() : 0;
    copy_strides(grads.dout_strides, p.packed_q() ? Shape{0, p.dv, p.heads * p.dv, 1}
                                                  : contiguous({p.batch, p.heads, p.tq, p.dv}));
    const Shape q_shape =
        p.packed_q() ? Shape{1, q_rows, p.heads, p.dk} : Shape{p.batch, p.heads, p.tq, p.dk};
    const Shape k_shape =
        p.packed_k() ? Shape{1, k_rows, p.kv_heads, p.dk} : Shape{p.batch, p.kv_heads, p.tk, p.dk};
    const Shape v_shape =
        p.packed_k() ? Shape{1, k_rows, p.kv_heads, p.dv} : Shape{p.batch, p.kv_heads, p.tk, p.dv};
    GuardedArray dq("dq", p.dtype, q_shape, contiguous(q_shape));
    GuardedArray dk("dk", p.dtype, k_shape, contiguous(k_shape));
    GuardedArray dv("dv", p.dtype, v_shape, contiguous(v_shape));
    grads.dq = dq.data();
    grads.dk = dk.data();
    grads.dv = dv.data();
    std::vector<const GuardedArray*> written{&dq, &dk, &dv};
    std::optional<GuardedArray> dsink;
    if constexpr (Abi::kVersion >= 2) {
      if (!p.sink.empty()) {
        const Shape s{1, 1, 1, p.heads};
        dsink.emplace("dsink", DType::f64, s, contiguous(s));
        grads.dsink = static_cast<double*>(dsink->data());
        written.push_back(&*dsink);
      }
    }
    // Backward's outputs carry only the error message.
    typename Abi::Outputs co;
    std::memset(&co, 0, sizeof co);

    const int code = desc_.backward(desc_.ctx, &cp.c, &grads, &co);

    cp.check_inputs(who_);
    for (const GuardedArray* g : written) g->check_guards(who_);
    BackwardResult r;
    switch (code) {
      case ATTNCHECK_OK:
        break;
      case ATTNCHECK_ERROR:
        r.status = Status::error;
        r.error = error_message(co);
        return r;
      case ATTNCHECK_UNSUPPORTED:
        r.status = Status::unsupported;
        return r;
      default:
        throw PluginContractError(bad_code(who_, "backward", code));
    }
    for (const GuardedArray* g : written) g->check_written(who_);
    r.dq = dq.values();
    r.dk = dk.values();
    r.dv = dv.values();
    if (dsink) r.dsink = dsink->values();
    return r;
  }

 private:
  // SPEC 5.1: the harness never hands an implementation a version 2 part it
  // did not declare, and a version 1 plugin none at all (its problem has no
  // field for it).
  void check_declared(const Problem& p) const {
    const std::string part = undeclared_v2_part(info_, p);
    if (part.empty()) return;
    if (Abi::kVersion == 1) {
      throw InputError(fmt::format(
          "{} speaks ABI version 1, whose problem has no field for {}; it is not asked", who_,
          part));
    }
    throw InputError(fmt::format("{} does not declare {}, which the problem needs", who_, part));
  }

  typename Abi::Descriptor desc_;
  std::shared_ptr<void> keep_alive_;
  ImplInfo info_;
  std::string who_;
  // SPEC 5.1: one implementation is never entered from two threads at once.
  mutable std::mutex mutex_;
};

constexpr uint32_t kKnownDtypes =
    (1u << ATTNCHECK_F64) | (1u << ATTNCHECK_F32) | (1u << ATTNCHECK_BF16) | (1u << ATTNCHECK_F16);
constexpr uint32_t kKnownFeaturesV1 = (ATTNCHECK_FEATURE_NONDETERMINISTIC << 1) - 1;
constexpr uint32_t kKnownFeaturesV2 = (ATTNCHECK_FEATURE_DESCALE << 1) - 1;
constexpr uint32_t kKnownFtz = ATTNCHECK_FTZ_ACCUM | ATTNCHECK_FTZ_P_CAST | ATTNCHECK_FTZ_OUT;
// Bounds that only a garbage descriptor exceeds.
constexpr uint32_t kMaxStructSize = 4096;
constexpr uint32_t kMaxCombos = 256;

// Reads a NUL-terminated C string of at most 255 characters, or nullopt.
std::optional<std::string> bounded_string(const char* s) {
  const size_t n = strnlen(s, 256);
  if (n == 256) return std::nullopt;
  return std::string(s, n);
}

// dlerror()'s text, without the file name dlopen already put in front.
std::string dl_message(const std::string& opened) {
  const char* e = dlerror();
  std::string m = e ? e : "unknown dlopen error";
  if (m.rfind(opened + ": ", 0) == 0) m.erase(0, opened.size() + 2);
  std::replace(m.begin(), m.end(), '\n', ' ');
  return m;
}

std::string unknown_version(uint32_t version) {
  return fmt::format(
      "abi_version is {}, but this attncheck speaks ATTNCHECK_ABI_VERSION 1 and 2 (rebuild the "
      "plugin against its plugin.h)",
      version);
}

// Which fp8 formats a descriptor field takes (SPEC 1.1 and 4): q_dtype and
// kv_dtype both; p_cast and s_cast E4M3 (u = 2^-4, inside the first-order
// limit 0.1) but not E5M2 (u = 2^-3, past it); an accumulation and the
// output neither.
enum class FormatField { input, cast, other };

// What is wrong with format code `code` in a descriptor field of
// `version`, or "": every field takes f64, f32, bf16 and f16; version 2's
// fields take the fp8 formats `field` allows.
std::string format_defect(uint32_t code, uint32_t version, FormatField field) {
  const uint32_t last_known = version >= 2 ? ATTNCHECK_E5M2 : ATTNCHECK_F16;
  if (code > last_known) return fmt::format("{} is no dtype", code);
  if (code <= ATTNCHECK_F16 || field == FormatField::input) return "";
  const std::string_view name = dtype_name(static_cast<DType>(code));
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

template <typename Abi>
void validate_descriptor(const typename Abi::Descriptor& d, size_t index,
                         const std::string& origin) {
  constexpr uint32_t version = Abi::kVersion;
  std::string where = fmt::format("{}: descriptor {}", origin, index);
  const auto fail = [&](const std::string& what) { throw InputError(where + ": " + what); };
  // Nothing past abi_version is read from a descriptor of another version:
  // its layout may differ.
  if (d.abi_version != version) {
    if (d.abi_version == 1 || d.abi_version == 2) {
      fail(fmt::format("abi_version is {}, but the descriptor was read as version {}",
                       d.abi_version, version));
    }
    fail(unknown_version(d.abi_version));
  }
  bool has_combos = false;
  if constexpr (version >= 2) {
    if (d.struct_size < sizeof(attncheck_impl)) {
      fail(fmt::format(
          "struct_size is {}, smaller than version 2's attncheck_impl ({} bytes): set it to "
          "sizeof(attncheck_impl)",
          d.struct_size, sizeof(attncheck_impl)));
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
  if (d.dtypes & ~kKnownDtypes)
    fail(fmt::format("unknown dtype bits {:#x}", d.dtypes & ~kKnownDtypes));
  const uint32_t known_features = version >= 2 ? kKnownFeaturesV2 : kKnownFeaturesV1;
  if (d.features & ~known_features) {
    fail(fmt::format("unknown feature bits {:#x}", d.features & ~known_features));
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
  if (const std::string e = format_defect(d.precision.accum, version, other); !e.empty())
    fail("precision.accum " + e);
  if (const std::string e = format_defect(d.precision.p_cast, version, cast); !e.empty())
    fail("precision.p_cast " + e);
  if (d.precision.flush_to_zero > 1) fail("precision.flush_to_zero must be 0 or 1");
  if (d.precision.key_block < 0) fail("precision.key_block is negative");
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
    if (const std::string e = format_defect(d.s_cast, version, cast); !e.empty())
      fail("s_cast " + e);
    if (d.ftz_formats & ~kKnownFtz)
      fail(fmt::format("unknown ftz_formats bits {:#x}", d.ftz_formats & ~kKnownFtz));
    if (d.n_combos > kMaxCombos) fail(fmt::format("implausible n_combos {}", d.n_combos));
    if (d.n_combos > 0 && !d.combos) fail(fmt::format("n_combos is {} but combos is NULL", d.n_combos));
    for (uint32_t k = 0; k < d.n_combos; ++k) {
      const attncheck_dtype_combo& c = d.combos[k];
      const std::pair<const char*, std::string> fields[] = {
          {"q_dtype", format_defect(c.q_dtype, version, input)},
          {"kv_dtype", format_defect(c.kv_dtype, version, input)},
          {"out_dtype", format_defect(c.out_dtype, version, other)}};
      for (const auto& [field, e] : fields) {
        if (!e.empty()) fail(fmt::format("combos[{}].{} {}", k, field, e));
      }
    }
    if (has_combos && d.dtypes != 0) {
      const uint32_t uniform = uniform_dtypes(combos_of(d));
      if (d.dtypes != uniform) {
        fail(fmt::format(
            "dtypes {:#x} does not match combos: with combos, dtypes is 0 or the formats d "
            "whose {{d, d, d}} is listed ({:#x})",
            d.dtypes, uniform));
      }
    }
  }
}

// The descriptors of one plugin's array, read at the stride of their
// version; throws InputError naming the first defect.
template <typename Abi>
std::vector<std::shared_ptr<const Implementation>> load_descriptors(
    const unsigned char* base, size_t count, size_t stride, const std::string& path,
    const std::shared_ptr<void>& keep_alive) {
  std::map<std::string, size_t> seen;
  std::vector<std::shared_ptr<const Implementation>> impls;
  for (size_t i = 0; i < count; ++i) {
    const unsigned char* at = base + i * stride;
    uint32_t version = 0;
    std::memcpy(&version, at, sizeof version);
    if (version != Abi::kVersion) {
      throw InputError(fmt::format(
          "{}: descriptor {}: abi_version is {}, but descriptor 0's is {} (all descriptors of a "
          "plugin share one ABI version)",
          path, i, version, Abi::kVersion));
    }
    typename Abi::Descriptor d;
    std::memcpy(&d, at, sizeof d);
    if constexpr (Abi::kVersion >= 2) {
      if (d.struct_size != stride) {
        throw InputError(fmt::format(
            "{}: descriptor {}: struct_size is {}, but descriptor 0's is {} (the array stride)",
            path, i, d.struct_size, stride));
      }
    }
    validate_descriptor<Abi>(d, i, path);
    const std::string name = d.name;
    if (const auto [it, fresh] = seen.emplace(name, i); !fresh) {
      throw InputError(fmt::format("{}: descriptor {} (name '{}'): descriptor {} has the same name",
                                   path, i, name, it->second));
    }
    impls.push_back(std::make_shared<PluginImpl<Abi>>(d, path, keep_alive));
  }
  return impls;
}

}  // namespace

void validate_plugin_descriptor(const attncheck_impl& d, size_t index, const std::string& origin) {
  validate_descriptor<AbiV2>(d, index, origin);
}

void validate_plugin_descriptor(const attncheck_v1_impl& d, size_t index,
                                const std::string& origin) {
  validate_descriptor<AbiV1>(d, index, origin);
}

std::shared_ptr<const Implementation> make_plugin_impl(const attncheck_impl& d,
                                                       const std::string& origin,
                                                       std::shared_ptr<void> keep_alive) {
  return std::make_shared<PluginImpl<AbiV2>>(d, origin, std::move(keep_alive));
}

std::shared_ptr<const Implementation> make_plugin_impl(const attncheck_v1_impl& d,
                                                       const std::string& origin,
                                                       std::shared_ptr<void> keep_alive) {
  return std::make_shared<PluginImpl<AbiV1>>(d, origin, std::move(keep_alive));
}

std::vector<std::shared_ptr<const Implementation>> load_plugin(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw InputError(path + ": no such file");
  if (std::filesystem::is_directory(path, ec))
    throw InputError(path + ": is a directory, not a shared object");
  // Without a slash dlopen searches the library path instead of the file.
  const std::string opened = path.find('/') == std::string::npos ? "./" + path : path;
  dlerror();
  void* handle = dlopen(opened.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    throw InputError(
        fmt::format("{}: cannot load it as a shared object: {}", path, dl_message(opened)));
  }
  std::shared_ptr<void> keep_alive(handle, [](void* h) { dlclose(h); });
  void* symbol = dlsym(handle, "attncheck_plugin_impls");
  if (!symbol) {
    throw InputError(path + ": does not export attncheck_plugin_impls (see attncheck/plugin.h)");
  }
  // The array's element type depends on its version, so it is read as
  // bytes: POSIX guarantees a data pointer from dlsym converts to a
  // function pointer, and the returned pointer is read through memcpy.
  using ListFn = const void* (*)(size_t*);
  ListFn list = nullptr;
  static_assert(sizeof list == sizeof symbol);
  std::memcpy(&list, &symbol, sizeof list);
  size_t count = 0;
  const auto* descriptors = static_cast<const unsigned char*>(list(&count));
  if (!descriptors) throw InputError(path + ": attncheck_plugin_impls returned NULL");
  if (count == 0)
    throw InputError(path + ": attncheck_plugin_impls exports no implementation (count 0)");
  if (count > 4096) {
    throw InputError(
        fmt::format("{}: attncheck_plugin_impls gave an implausible count {}", path, count));
  }
  // SPEC 5.1: abi_version first, then the array at that version's stride.
  uint32_t version = 0;
  std::memcpy(&version, descriptors, sizeof version);
  if (version == ATTNCHECK_V1_ABI_VERSION) {
    return load_descriptors<AbiV1>(descriptors, count, sizeof(attncheck_v1_impl), path,
                                   keep_alive);
  }
  if (version != ATTNCHECK_ABI_VERSION) {
    throw InputError(fmt::format("{}: descriptor 0: {}", path, unknown_version(version)));
  }
  uint32_t stride = 0;
  std::memcpy(&stride, descriptors + offsetof(attncheck_impl, struct_size), sizeof stride);
  if (stride < sizeof(attncheck_impl)) {
    throw InputError(fmt::format(
        "{}: descriptor 0: struct_size is {}, smaller than version 2's attncheck_impl ({} "
        "bytes): set it to sizeof(attncheck_impl)",
        path, stride, sizeof(attncheck_impl)));
  }
  if (stride > kMaxStructSize) {
    throw InputError(
        fmt::format("{}: descriptor 0: implausible struct_size {}", path, stride));
  }
  return load_descriptors<AbiV2>(descriptors, count, stride, path, keep_alive);
}

std::vector<std::shared_ptr<const Implementation>> load_plugins(
    const std::vector<std::string>& paths, const PluginLoader& loader) {
  std::vector<std::shared_ptr<const Implementation>> all;
  std::map<std::string, std::string> origin;  // name -> path
  for (const std::string& path : paths) {
    for (auto& impl : loader(path)) {
      const std::string& name = impl->info().name;
      if (find_impl(name)) {
        throw InputError(
            fmt::format("{}: implementation '{}' has the name of a built-in "
                        "implementation (see attncheck list); rename it",
                        path, name));
      }
      if (const auto [it, fresh] = origin.emplace(name, path); !fresh) {
        throw InputError(
            fmt::format("{}: implementation '{}' is also exported by {}", path, name, it->second));
      }
      all.push_back(std::move(impl));
    }
  }
  return all;
}

}  // namespace attncheck
