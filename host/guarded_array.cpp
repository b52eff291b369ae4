// The buffers a plugin call reads and writes (host/guarded_array.h): an
// element's bytes in each format, the guard and sentinel patterns, and the
// checks after a call.

#include "host/guarded_array.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "attncheck/dtype.h"
#include "host/plugin_loader.h"

namespace attncheck::host_detail {
namespace {

// Element bit patterns the harness writes into output buffers: a sentinel
// NaN in every element the plugin must write, and a signalling NaN of
// another payload in the guards and gaps. Computed NaNs carry neither
// payload, so a NaN the plugin writes is not mistaken for "unwritten".
struct Patterns {
  uint64_t sentinel = 0, guard = 0;
};

Patterns patterns(DType d) {
  switch (d) {
    case DType::f64:
      return {0x7ff8dead0000beefull, 0x7ff4beef0000deadull};
    case DType::f32:
      return {0x7fc0beefu, 0x7fa0deadu};
    case DType::bf16:
      return {0x7fdau, 0x7fa5u};
    case DType::f16:
      return {0x7e5au, 0x7d5au};
    // fp8 is never an output format; only NaN patterns would serve, and
    // e4m3 has one (0x7f, and 0xff its negative).
    case DType::e4m3:
      return {0x7fu, 0xffu};
    case DType::e5m2:
      return {0x7du, 0x7eu};
    // Block formats are never outputs, and their inputs travel as blocks
    // (host/abi_marshal.cpp), never through element buffers.
    case DType::q8_0:
    case DType::q4_0:
      break;
  }
  return {};
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
    case DType::q8_0:
    case DType::q4_0:
      break;
  }
  throw std::invalid_argument(std::string(dtype_name(d)) +
                              " values are stored 32 to a block, not one by one");
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
    case DType::q8_0:
    case DType::q4_0:
      break;
  }
  throw std::invalid_argument(std::string(dtype_name(d)) +
                              " values are read 32 to a block, not one by one");
}

}  // namespace

Shape contiguous(const Shape& s) { return contiguous_strides(s[0], s[1], s[2], s[3]); }

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
    // A block buffer is bytes (host/abi_marshal.cpp lays the blocks out).
    case DType::q8_0:
    case DType::q4_0:
      return 1;
  }
  return 8;
}

std::vector<unsigned char> encode(DType d, const std::vector<double>& values) {
  const size_t size = element_size(d);
  std::vector<unsigned char> bytes(std::max<size_t>(1, values.size()) * size);
  for (size_t k = 0; k < values.size(); ++k) store_value(d, bytes.data() + k * size, values[k]);
  return bytes;
}

std::vector<unsigned char> encode_blocks(DType d, const std::vector<double>& values) {
  const size_t chunks = std::max<size_t>(1, (values.size() + kBlockValues - 1) / kBlockValues);
  const size_t size = block_bytes(d);
  std::vector<unsigned char> bytes(chunks * size);
  Block poison;
  poison.scale = std::numeric_limits<double>::quiet_NaN();
  std::array<double, kBlockValues> chunk{};
  for (size_t c = 0; c < chunks; ++c) {
    chunk.fill(std::numeric_limits<double>::quiet_NaN());
    for (size_t t = 0; t < chunk.size() && c * kBlockValues + t < values.size(); ++t)
      chunk[t] = values[c * kBlockValues + t];
    const std::optional<Block> b = exact_block(d, chunk);
    encode_block(d, b ? *b : poison, bytes.data() + c * size);
  }
  return bytes;
}

GuardedArray::GuardedArray(std::string name, DType d, Shape shape, Shape strides)
    : name_(std::move(name)), dtype_(d), size_(element_size(d)), shape_(shape), strides_(strides) {
  int64_t last = 0;
  for (int k = 0; k < 4; ++k) last += (shape_[k] - 1) * strides_[k];
  span_ = last + 1;
  const int64_t total = span_ + 2 * kPluginGuardElements;
  storage_.resize(static_cast<size_t>(total) * size_);
  logical_.assign(static_cast<size_t>(span_), 0);
  for (int64_t e = 0; e < total; ++e)
    store_bits(dtype_, element(e - kPluginGuardElements), patterns(d).guard);
  for_each_index([&](int64_t off, const Shape&) {
    logical_[static_cast<size_t>(off)] = 1;
    store_bits(dtype_, element(off), patterns(d).sentinel);
  });
}

void GuardedArray::check_guards(const std::string& who) const {
  int64_t changed = 0, first = 0;
  for (int64_t e = -kPluginGuardElements; e < span_ + kPluginGuardElements; ++e) {
    if (e >= 0 && e < span_ && logical_[static_cast<size_t>(e)]) continue;
    if (load_bits(dtype_, element(e)) != patterns(dtype_).guard) {
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

void GuardedArray::check_frozen(const std::string& who) const {
  size_t first = 0, changed = 0;
  for (size_t b = 0; b < storage_.size() && b < frozen_.size(); ++b) {
    if (storage_[b] != frozen_[b] && changed++ == 0) first = b;
  }
  if (changed == 0) return;
  throw PluginContractError(fmt::format(
      "{} wrote to {}, an output of that call: element at offset {}; {} byte(s) changed", who,
      name_, static_cast<int64_t>(first / size_) - kPluginGuardElements, changed));
}

void GuardedArray::check_written(const std::string& who) const {
  int64_t unwritten = 0;
  Shape first{};
  for_each_index([&](int64_t off, const Shape& idx) {
    if (load_bits(dtype_, element(off)) == patterns(dtype_).sentinel) {
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

std::vector<double> GuardedArray::values() const {
  std::vector<double> out;
  out.reserve(static_cast<size_t>(shape_[0] * shape_[1] * shape_[2] * shape_[3]));
  for_each_index(
      [&](int64_t off, const Shape&) { out.push_back(load_value(dtype_, element(off))); });
  return out;
}

unsigned char* GuardedArray::element(int64_t e) {
  return storage_.data() + static_cast<size_t>(e + kPluginGuardElements) * size_;
}

const unsigned char* GuardedArray::element(int64_t e) const {
  return storage_.data() + static_cast<size_t>(e + kPluginGuardElements) * size_;
}

GuardedInput::GuardedInput(std::string name, const void* data, size_t bytes, size_t element)
    : name_(std::move(name)),
      element_(element),
      guard_(static_cast<size_t>(kPluginGuardElements) * element),
      size_(bytes) {
  storage_.assign(guard_ + size_ + guard_, 0xa5);
  if (size_) std::memcpy(storage_.data() + guard_, data, size_);
  pristine_ = storage_;
}

void GuardedInput::check(const std::string& who) const {
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

}  // namespace attncheck::host_detail
