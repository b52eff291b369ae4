// ggml's q8_0 and q4_0 blocks (attncheck/dtype.h): the canonical
// block of 32 logical values, its bytes, and ggml's reference quantizers.

#include "attncheck/dtype.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>


namespace attncheck {
namespace {

void require_block_format(DType d) {
  if (!is_block_format(d)) {
    throw std::invalid_argument(std::string(dtype_name(d)) + " is not a block format");
  }
}

void require_block_size(std::span<const double> values) {
  if (values.size() != static_cast<size_t>(kBlockValues)) {
    throw std::invalid_argument(fmt::format("a block holds {} values, not {}", kBlockValues,
                                            values.size()));
  }
}

// The block with this scale, when every value is scale times an integer
// the format stores; the scale is an f16 value and nonzero.
std::optional<Block> with_scale(DType d, double scale, std::span<const double> values) {
  Block b;
  b.scale = scale;
  for (size_t t = 0; t < values.size(); ++t) {
    const double r = values[t] / scale;
    if (!(r >= block_int_min(d) && r <= block_int_max(d)) || r != std::trunc(r)) {
      return std::nullopt;
    }
    // r is a small integer; the product with an f16 is exact, so this
    // compares the value itself (the division may have rounded).
    b.ints[t] = static_cast<int>(r);
    if (b.value(t) != values[t]) return std::nullopt;
  }
  return b;
}

// The integers tried for the value of largest magnitude, best first: the
// shapes ggml's quantizers write (q8_0: +-127 with a positive scale; q4_0:
// -8, from d = max / -8), then smaller magnitudes, then the other sign of
// the scale.
std::vector<int> candidate_ints(DType d, bool max_negative) {
  std::vector<int> out;
  const int sign = max_negative ? -1 : 1;
  if (d == DType::q8_0) {
    for (int n = 127; n >= 1; --n) out.push_back(sign * n);  // positive scale
    if (max_negative) out.push_back(-128);
    for (int n = max_negative ? 127 : 128; n >= 1; --n) out.push_back(-sign * n);
  } else {
    out.push_back(-8);
    for (int n = 7; n >= 1; --n) {
      out.push_back(-n);
      out.push_back(n);
    }
  }
  return out;
}

}  // namespace

size_t block_bytes(DType d) {
  require_block_format(d);
  return d == DType::q8_0 ? 34 : 18;
}

int block_int_min(DType d) {
  require_block_format(d);
  return d == DType::q8_0 ? -128 : -8;
}

int block_int_max(DType d) {
  require_block_format(d);
  return d == DType::q8_0 ? 127 : 7;
}

double format_max_value(DType d) {
  if (!is_block_format(d)) return max_finite(d);
  return max_finite(DType::f16) * -block_int_min(d);
}

std::optional<Block> exact_block(DType d, std::span<const double> values) {
  require_block_format(d);
  require_block_size(values);
  bool all_nan = true, all_zero = true;
  size_t largest = 0;
  for (size_t t = 0; t < values.size(); ++t) {
    all_nan = all_nan && std::isnan(values[t]);
    all_zero = all_zero && values[t] == 0;
    if (std::fabs(values[t]) > std::fabs(values[largest])) largest = t;
  }
  if (all_nan) return Block{std::numeric_limits<double>::quiet_NaN(), {}};
  if (all_zero) return Block{};
  for (double x : values) {
    if (!std::isfinite(x)) return std::nullopt;
  }
  const double vmax = values[largest];
  for (int q : candidate_ints(d, vmax < 0)) {
    const double scale = vmax / q;
    if (scale * q != vmax || !representable(DType::f16, scale)) continue;
    if (auto b = with_scale(d, scale, values)) return b;
  }
  return std::nullopt;
}

bool is_exact_block(DType d, std::span<const double> values) {
  return exact_block(d, values).has_value();
}

void encode_block(DType d, const Block& block, unsigned char* out) {
  require_block_format(d);
  const uint16_t scale = f16_bits(block.scale);
  out[0] = static_cast<unsigned char>(scale & 0xff);  // ggml_half, little-endian
  out[1] = static_cast<unsigned char>(scale >> 8);
  for (int t = 0; t < kBlockValues; ++t) {
    if (block.ints[t] < block_int_min(d) || block.ints[t] > block_int_max(d)) {
      throw std::invalid_argument(fmt::format("{} block integer {} out of range",
                                              dtype_name(d), block.ints[t]));
    }
  }
  if (d == DType::q8_0) {
    for (int t = 0; t < kBlockValues; ++t) {
      out[2 + t] = static_cast<unsigned char>(static_cast<int8_t>(block.ints[t]));
    }
    return;
  }
  for (int t = 0; t < kBlockValues / 2; ++t) {
    const auto low = static_cast<unsigned>(block.ints[t] + 8);
    const auto high = static_cast<unsigned>(block.ints[t + kBlockValues / 2] + 8);
    out[2 + t] = static_cast<unsigned char>(low | (high << 4));
  }
}

void encode_values(DType d, std::span<const double> values, unsigned char* out) {
  const std::optional<Block> b = exact_block(d, values);
  if (!b) {
    throw InputError(fmt::format(
        "these 32 values are not one {} block (an f16 scale times integers in [{}, {}]): "
        "first {}, largest magnitude among them {}",
        dtype_name(d), block_int_min(d), block_int_max(d), values[0],
        [&] {
          double m = 0;
          for (double x : values) m = std::fabs(x) > std::fabs(m) ? x : m;
          return m;
        }()));
  }
  encode_block(d, *b, out);
}

Block decode_block(DType d, const unsigned char* in) {
  require_block_format(d);
  Block b;
  b.scale = f16_value(static_cast<uint16_t>(in[0] | (in[1] << 8)));
  if (d == DType::q8_0) {
    for (int t = 0; t < kBlockValues; ++t) b.ints[t] = static_cast<int8_t>(in[2 + t]);
    return b;
  }
  for (int t = 0; t < kBlockValues / 2; ++t) {
    b.ints[t] = (in[2 + t] & 0x0f) - 8;
    b.ints[t + kBlockValues / 2] = (in[2 + t] >> 4) - 8;
  }
  return b;
}

Block round_block(DType d, std::span<const double> values) {
  require_block_format(d);
  require_block_size(values);
  float x[kBlockValues];
  for (int t = 0; t < kBlockValues; ++t) x[t] = static_cast<float>(values[t]);
  Block b;
  if (d == DType::q8_0) {
    // quantize_row_q8_0_ref: d = amax / 127 in f32, the integers from the
    // f32 d (not the stored f16 one), rounded half away from zero.
    float amax = 0.0f;
    for (float v : x) amax = std::fmax(amax, std::fabs(v));
    const float scale = amax / 127.0f;
    const float inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
    b.scale = round_to(DType::f16, scale);
    for (int t = 0; t < kBlockValues; ++t) {
      b.ints[t] = static_cast<int>(std::round(x[t] * inverse));
    }
    return b;
  }
  // quantize_row_q4_0_ref: max is the value of largest magnitude (the first
  // such), d = max / -8, nibble = min(15, (int8_t)(x / d + 8.5)).
  float amax = 0.0f, max = 0.0f;
  for (float v : x) {
    if (amax < std::fabs(v)) {
      amax = std::fabs(v);
      max = v;
    }
  }
  const float scale = max / -8.0f;
  const float inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
  b.scale = round_to(DType::f16, scale);
  for (int t = 0; t < kBlockValues; ++t) {
    const int nibble = std::min(15, static_cast<int>(std::trunc(x[t] * inverse + 8.5f)));
    b.ints[t] = nibble - 8;
  }
  return b;
}

void round_row_to_blocks(DType d, std::span<double> row) {
  for (size_t start = 0; start < row.size(); start += kBlockValues) {
    const size_t n = std::min<size_t>(kBlockValues, row.size() - start);
    // A last partial block is padded with zeros, which change no scale.
    std::array<double, kBlockValues> block{};
    for (size_t t = 0; t < n; ++t) block[t] = row[start + t];
    const Block b = round_block(d, block);
    for (size_t t = 0; t < n; ++t) row[start + t] = b.value(t);
  }
}

}  // namespace attncheck
