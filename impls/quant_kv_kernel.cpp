#include "quant_kv_kernel.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "attncheck/dtype.h"
#include "impl_common.h"

namespace attncheck::impls {
namespace {

// One block as the kernel reads it from its bytes: the f16 scale in float
// and the 32 integers.
struct ReadBlock {
  float d = 0;
  std::array<int, kBlockValues> n{};
};

// Block c of a row of nb blocks stored at `row`, read from ggml's layout
// (the f16 scale little-endian, then q8_0's int8 or q4_0's nibbles), with
// the slips of `o` that concern K/V bytes.
ReadBlock read_block(DType kv, const unsigned char* row, int64_t c, int64_t nb,
                     const QuantKvOptions& o) {
  const size_t bytes = block_bytes(kv);
  const unsigned char* in = row + static_cast<size_t>(c) * bytes;
  const int64_t scale_block = o.kv_scale_from_next_block && c + 1 < nb ? c + 1 : c;
  const unsigned char* s = row + static_cast<size_t>(scale_block) * bytes;
  ReadBlock r;
  r.d = static_cast<float>(f16_value(static_cast<uint16_t>(s[0] | (s[1] << 8))));
  if (kv == DType::q8_0) {
    for (int t = 0; t < kBlockValues; ++t) r.n[t] = static_cast<int8_t>(in[2 + t]);
    return r;
  }
  const int offset = o.q4_offset_forgotten ? 0 : 8;
  for (int t = 0; t < kBlockValues / 2; ++t) {
    const int low = in[2 + t] & 0x0f, high = in[2 + t] >> 4;
    r.n[t] = (o.nibbles_swapped ? high : low) - offset;
    r.n[t + kBlockValues / 2] = (o.nibbles_swapped ? low : high) - offset;
  }
  return r;
}

// The blocks of a row the kernel reads: all, or all but the last of a row
// of several (the bug).
int64_t blocks_read(int64_t nb, const QuantKvOptions& o) {
  return o.last_block_dropped && nb > 1 ? nb - 1 : nb;
}

// K or V of p in ggml's layout: row (b, g, j) at ((b kv_heads + g) tk + j)
// times the row's bytes, every block the canonical encoding of its 32
// logical values (encode_values; a value set no block holds is an error
// of the problem, which validation refuses first).
std::vector<unsigned char> encode_rows(const Problem& p, DType kv, bool values) {
  const int64_t width = values ? p.dv : p.dk;
  const size_t row_bytes = static_cast<size_t>(width / kBlockValues) * block_bytes(kv);
  std::vector<unsigned char> out(static_cast<size_t>(p.batch * p.kv_heads * p.tk) * row_bytes);
  std::array<double, kBlockValues> block{};
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t g = 0; g < p.kv_heads; ++g)
      for (int64_t j = 0; j < p.tk; ++j) {
        unsigned char* row =
            out.data() + static_cast<size_t>((b * p.kv_heads + g) * p.tk + j) * row_bytes;
        for (int64_t c = 0; c < width / kBlockValues; ++c) {
          for (int64_t t = 0; t < kBlockValues; ++t)
            block[static_cast<size_t>(t)] = values ? p.v_at(b, g, j, c * kBlockValues + t)
                                                   : p.k_at(b, g, j, c * kBlockValues + t);
          encode_values(kv, block, row + static_cast<size_t>(c) * block_bytes(kv));
        }
      }
  return out;
}

// Q row quantized to q8_0 as ggml does (quantize_row_q8_0_ref), kept as
// its bytes' parts: the stored f16 scales in float and the integers.
std::vector<ReadBlock> quantize_query(const std::vector<float>& q, bool per_row) {
  const auto nb = static_cast<int64_t>(q.size()) / kBlockValues;
  std::vector<ReadBlock> blocks(static_cast<size_t>(nb));
  if (per_row) {  // q_scale_per_row: d = amax / 127 over the row, as ggml computes it per block
    float amax = 0;
    for (float x : q) amax = std::max(amax, std::fabs(x));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    for (int64_t c = 0; c < nb; ++c) {
      ReadBlock& r = blocks[static_cast<size_t>(c)];
      r.d = static_cast<float>(round_to(DType::f16, d));
      for (int64_t t = 0; t < kBlockValues; ++t)
        r.n[static_cast<size_t>(t)] = static_cast<int>(
            std::lround(q[static_cast<size_t>(c * kBlockValues + t)] * id));
    }
    return blocks;
  }
  std::array<double, kBlockValues> x{};
  for (int64_t c = 0; c < nb; ++c) {
    for (int64_t t = 0; t < kBlockValues; ++t)
      x[static_cast<size_t>(t)] = q[static_cast<size_t>(c * kBlockValues + t)];
    const Block qb = round_block(DType::q8_0, x);
    ReadBlock& r = blocks[static_cast<size_t>(c)];
    r.d = static_cast<float>(qb.scale);
    for (int t = 0; t < kBlockValues; ++t)
      r.n[static_cast<size_t>(t)] = qb.ints[static_cast<size_t>(t)];
  }
  return blocks;
}

}  // namespace

ForwardResult quant_kv_forward(const Problem& p, const QuantKvOptions& o) {
  const DType kv = p.kv_dtype.value_or(p.dtype);
  if (!is_block_format(kv) || p.packed || p.paged) return ForwardResult::unsupported();
  if (auto message = first_empty_row_error(p)) return ForwardResult::failure(*message);
  const std::vector<unsigned char> k_bytes = encode_rows(p, kv, false);
  const std::vector<unsigned char> v_bytes = encode_rows(p, kv, true);
  const int64_t nbk = p.dk / kBlockValues, nbv = p.dv / kBlockValues;
  const size_t k_row = static_cast<size_t>(nbk) * block_bytes(kv);
  const size_t v_row = static_cast<size_t>(nbv) * block_bytes(kv);

  const auto rows = static_cast<size_t>(p.batch * p.heads * p.tq);
  ForwardResult r;
  r.out.assign(rows * static_cast<size_t>(p.dv), 0.0);
  r.weights.assign(rows * static_cast<size_t>(p.tk), 0.0);
  r.lse.assign(rows, -std::numeric_limits<double>::infinity());
  const auto scale = static_cast<float>(p.scale);
  const auto cap = static_cast<float>(p.softcap);
  std::vector<float> q(static_cast<size_t>(p.dk)), s(static_cast<size_t>(p.tk)),
      a(static_cast<size_t>(p.tk)), acc(static_cast<size_t>(p.dv));
  std::vector<uint8_t> ok(static_cast<size_t>(p.tk));
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = p.kv_head(h);
      const auto row_of = [&](int64_t j) {
        return static_cast<size_t>((b * p.kv_heads + g) * p.tk + j);
      };
      for (int64_t i = 0; i < p.tq; ++i) {
        for (int64_t t = 0; t < p.dk; ++t)
          q[static_cast<size_t>(t)] = static_cast<float>(p.q_at(b, h, i, t));
        std::vector<ReadBlock> qb;
        if (o.quantize_q) qb = quantize_query(q, o.q_scale_per_row);
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < p.tk; ++j) {
          const auto jj = static_cast<size_t>(j);
          ok[jj] = p.allowed(b, h, i, j) ? 1 : 0;
          if (!ok[jj]) continue;
          const unsigned char* krow = k_bytes.data() + row_of(j) * k_row;
          float dot = 0;
          for (int64_t c = 0; c < blocks_read(nbk, o); ++c) {
            const ReadBlock kb = read_block(kv, krow, c, nbk, o);
            if (o.quantize_q) {
              // vec_dot_q8_0_q8_0: the integer sum times d_q * d_k in float.
              const ReadBlock& y = qb[static_cast<size_t>(c)];
              int sum = 0;
              for (int t = 0; t < kBlockValues; ++t)
                sum += kb.n[static_cast<size_t>(t)] * y.n[static_cast<size_t>(t)];
              const float dq = o.q_scale_from_k_block ? kb.d : y.d;
              dot += static_cast<float>(sum) * (kb.d * dq);
            } else {
              for (int t = 0; t < kBlockValues; ++t)
                dot += q[static_cast<size_t>(c * kBlockValues + t)] *
                       (kb.d * static_cast<float>(kb.n[static_cast<size_t>(t)]));
            }
          }
          float x = scale * dot;
          if (p.softcap > 0) x = cap * std::tanh(x / cap);
          if (p.bias) x += static_cast<float>(p.bias_at(b, h, i, j));
          s[jj] = x;
          m = std::max(m, x);
        }
        float l = 0;
        for (int64_t j = 0; j < p.tk; ++j) {
          const auto jj = static_cast<size_t>(j);
          a[jj] = ok[jj] ? std::exp(s[jj] - m) : 0.0f;
          l += a[jj];
        }
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j = 0; j < p.tk; ++j) {
          const auto jj = static_cast<size_t>(j);
          if (!ok[jj]) continue;
          a[jj] /= l;
          r.weights[weight_index(p, b, h, i, j)] = a[jj];
          const unsigned char* vrow = v_bytes.data() + row_of(j) * v_row;
          for (int64_t c = 0; c < blocks_read(nbv, o); ++c) {
            const ReadBlock vb = read_block(kv, vrow, c, nbv, o);
            for (int t = 0; t < kBlockValues; ++t)
              acc[static_cast<size_t>(c * kBlockValues + t)] +=
                  a[jj] * (vb.d * static_cast<float>(vb.n[static_cast<size_t>(t)]));
          }
        }
        for (int64_t d = 0; d < p.dv; ++d)
          r.out[out_index(p, b, h, i, d)] = acc[static_cast<size_t>(d)];
        r.lse[row_index(p, b, h, i)] = static_cast<double>(m + std::log(l));
      }
    }
  return r;
}

}  // namespace attncheck::impls
