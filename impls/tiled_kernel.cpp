#include "tiled_kernel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "impl_common.h"
#include "slice_operands.h"
#include "kernels_simd.h"

namespace attncheck::impls {
namespace {

constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2 = 0.6931471805599453;
constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

// The online state of one row over the keys seen so far: p_j = exp(s_j -
// M ln 2), which the kernel forms as exp((s_j - ref) + shift), ref being the
// score that set M and shift = (fl(ref log2 e) - M) ln 2.
struct RowState {
  double exponent = 0;  // M, an integer
  float ref = 0;
  double shift = 0;
  float l = 0;
  bool any = false;
};

// How a slice turns a score into its exponent M. Rounded down (p in [1, 2]
// at the row's largest score, so l >= 1 as with a kernel whose p is 1
// there, and an absolute rounding error of acc is not enlarged by the
// division by l); rounded up (p in (1/2, 1], never above a max-subtracting
// kernel's p) for a head whose V is so large that p up to 2 could overflow
// the accumulator where p <= 1 would not.
struct Stabiliser {
  bool round_up = false;

  // M for a tile whose largest score is bm (log2 e times bm, in double).
  double exponent(float bm) const {
    const double t = static_cast<double>(bm) * kLog2e;
    return round_up ? std::ceil(t) : std::floor(t);
  }
  // Points st at the tile maximum bm.
  void rebase(RowState& st, float bm) const {
    const double t = static_cast<double>(bm) * kLog2e;
    st.exponent = exponent(bm);
    st.ref = bm;
    st.shift = (t - st.exponent) * kLn2;  // t minus an integer next to it: exact
  }
};

// lse = M ln 2 + log l, formed from ref as the exps were.
double lse_of(const RowState& st) {
  return static_cast<double>(st.ref) - st.shift + std::log(static_cast<double>(st.l));
}

// x[0 .. n) *= 2^k for an integer k <= 0: the product in double is exact,
// its rounding to float too unless it is below float's normal range. k below
// -300 takes every float to 0, as 2^k itself would.
void scale_pow2(float* x, int64_t n, double k) {
  const double f = std::ldexp(1.0, static_cast<int>(k >= -300 ? k : -300));
  for (int64_t d = 0; d < n; ++d) x[d] = static_cast<float>(static_cast<double>(x[d]) * f);
}

// One (b, h) slice's operands in float, contiguous, and the online softmax
// of a query tile over a range of key tiles.
class TiledPass {
 public:
  TiledPass(const Problem& p, const TiledOptions& o)
      : p_(p),
        o_(o),
        s_(static_cast<size_t>(kTiledQueries * kTiledKeys)),
        ok_(static_cast<size_t>(kTiledQueries * kTiledKeys)),
        first_(kTiledQueries),
        last_(kTiledQueries) {}

  // Converts Q of (b, h) and, when h reads another K/V head than the last
  // call, that head's K (packed transposed for Q K^T) and V (packed).
  void load(int64_t b, int64_t h) {
    b_ = b;
    h_ = h;
    if (!x_.load(p_, b, h)) return;
    const std::vector<float>& k = x_.k();
    const std::vector<float>& v = x_.v();
    simd::pack_transposed(k.data(), p_.tk, p_.dk, p_.dk, kt_);
    simd::pack(v.data(), p_.tk, p_.dv, p_.dv, vp_);
    // 0 * inf is NaN: a non-finite value at a key masked for a row would
    // reach that row through the P V GEMM, so such heads add key by key.
    v_finite_ = std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
    // With p <= 2, |acc| <= 2 tk max|v| < 2^127 cannot overflow (float's
    // largest is 2^128 (1 - 2^-24)); a larger V rounds M up instead.
    float v_max = 0;
    for (float x : v) v_max = std::max(v_max, std::fabs(x));
    stabiliser_.round_up = !(2.0 * static_cast<double>(p_.tk) * v_max < 0x1p127);
  }

  // The online softmax of rows [i0, i0 + mq) of the loaded slice over the
  // keys [jlo, jhi) (jlo a multiple of kTiledKeys), from a fresh state:
  // fills state[0 .. mq) and acc (mq x dv, relative to each row's 2^M).
  void run(int64_t i0, int64_t mq, int64_t jlo, int64_t jhi, RowState* state, float* acc) {
    const int64_t dv = p_.dv;
    std::fill(acc, acc + mq * dv, 0.0f);
    int64_t lo = jhi, hi = jlo - 1;
    for (int64_t r = 0; r < mq; ++r) {
      state[r] = RowState{};
      const KeyBand band = p_.key_band(i0 + r);
      first_[static_cast<size_t>(r)] = std::max(band.first, jlo);
      last_[static_cast<size_t>(r)] = std::min(band.last, jhi - 1);
      if (first_[static_cast<size_t>(r)] <= last_[static_cast<size_t>(r)]) {
        lo = std::min(lo, first_[static_cast<size_t>(r)]);
        hi = std::max(hi, last_[static_cast<size_t>(r)]);
      }
    }
    // Key tiles outside every row's causal and window limits are never
    // visited.
    for (int64_t j0 = lo - lo % kTiledKeys; j0 <= hi; j0 += kTiledKeys) {
      tile(i0, mq, j0, std::min(j0 + kTiledKeys, jhi), state, acc);
    }
  }

 private:
  // One key tile [j0, j1) for rows [i0, i0 + mq).
  void tile(int64_t i0, int64_t mq, int64_t j0, int64_t j1, RowState* state, float* acc) {
    const int64_t n = j1 - j0;
    const int64_t dv = p_.dv;
    bool tile_any = false;
    for (int64_t r = 0; r < mq; ++r) {
      uint8_t* ok = ok_.data() + r * kTiledKeys;
      const int64_t first = first_[static_cast<size_t>(r)], last = last_[static_cast<size_t>(r)];
      for (int64_t c = 0; c < n; ++c) {
        const int64_t j = j0 + c;
        ok[c] = j >= first && j <= last &&
                (p_.key_valid.empty() || p_.key_valid[static_cast<size_t>(b_ * p_.tk + j)]) &&
                (!p_.mask || p_.mask->at(b_, h_, i0 + r, j, p_.tq, p_.tk));
        tile_any = tile_any || ok[c];
      }
    }
    // A tile without an allowed key contributes nothing.
    if (!tile_any) return;
    // The score tile up to the 16-column panel holding key j1 - 1 (K's
    // packing holds zero columns past tk); only n columns are read.
    const int64_t cols = (n + simd::kPanel - 1) / simd::kPanel * simd::kPanel;
    simd::gemm(mq, cols, p_.dk, x_.q().data() + i0 * p_.dk, p_.dk, kt_, 0, j0, s_.data(),
               kTiledKeys, false);
    const float scale = static_cast<float>(p_.scale);
    const float cap = static_cast<float>(p_.softcap);
    for (int64_t r = 0; r < mq; ++r) {
      float* row = s_.data() + r * kTiledKeys;
      const uint8_t* ok = ok_.data() + r * kTiledKeys;
      bool row_any = false;
      for (int64_t c = 0; c < n; ++c) {
        row[c] = ok[c] ? row[c] * scale : kMinusInf;
        row_any = row_any || ok[c];
      }
      if (!row_any) {
        std::fill(row, row + n, 0.0f);
        continue;
      }
      if (p_.softcap > 0) {
        for (int64_t c = 0; c < n; ++c) {
          if (ok[c]) row[c] = cap * static_cast<float>(std::tanh(static_cast<double>(row[c] / cap)));
        }
      }
      if (p_.bias) {
        for (int64_t c = 0; c < n; ++c) {
          if (ok[c]) row[c] += static_cast<float>(p_.bias_at(b_, h_, i0 + r, j0 + c));
        }
      }
      RowState& st = state[r];
      const float bm = simd::max_of(row, n);
      if (!st.any) {
        stabiliser_.rebase(st, bm);
        st.any = true;
      } else if (stabiliser_.exponent(bm) > st.exponent) {
        // Everything accumulated so far was relative to the old 2^M.
        const double old = st.exponent;
        stabiliser_.rebase(st, bm);
        const double k = old - st.exponent;
        scale_pow2(&st.l, 1, k);
        scale_pow2(acc + r * dv, dv, k);
      }
      simd::exp_rebased(row, n, st.ref, st.shift);
      st.l += simd::sum_of(row, n);
      if (o_.p_cast) {
        for (int64_t c = 0; c < n; ++c)
          row[c] = static_cast<float>(round_to(*o_.p_cast, static_cast<double>(row[c])));
      }
    }
    if (v_finite_) {
      // Masked keys carry p = 0 exactly, adding nothing.
      simd::gemm(mq, dv, n, s_.data(), kTiledKeys, vp_, j0, 0, acc, dv, true);
      return;
    }
    for (int64_t r = 0; r < mq; ++r) {
      float* a = acc + r * dv;
      for (int64_t c = 0; c < n; ++c) {
        if (!ok_[static_cast<size_t>(r * kTiledKeys + c)]) continue;
        const float w = s_[static_cast<size_t>(r * kTiledKeys + c)];
        const float* v = x_.v().data() + (j0 + c) * dv;
        for (int64_t d = 0; d < dv; ++d) a[d] += w * v[d];
      }
    }
  }

  const Problem& p_;
  const TiledOptions& o_;
  SliceOperands<float> x_;
  simd::Packed kt_, vp_;
  bool v_finite_ = true;
  Stabiliser stabiliser_;
  int64_t b_ = -1, h_ = -1;
  std::vector<float> s_;
  std::vector<uint8_t> ok_;
  std::vector<int64_t> first_, last_;
};

// Writes row (b, h, i)'s output acc / l, rounded to p.dtype, and its lse.
void finish(const Problem& p, int64_t b, int64_t h, int64_t i, const RowState& st,
            const float* acc, ForwardResult& result) {
  for (int64_t d = 0; d < p.dv; ++d) {
    const float x = acc[d] / st.l;
    result.out[out_index(p, b, h, i, d)] = round_to(p.dtype, static_cast<double>(x));
  }
  result.lse[row_index(p, b, h, i)] = static_cast<double>(static_cast<float>(lse_of(st)));
}

}  // namespace

ForwardResult tiled_forward(const Problem& p, const TiledOptions& o) {
  if (auto message = first_empty_row_error(p)) return ForwardResult::failure(*message);
  const auto rows = static_cast<size_t>(p.batch * p.heads * p.tq);
  const int64_t dv = p.dv;
  ForwardResult result;
  result.out.assign(rows * static_cast<size_t>(dv), 0.0);
  result.lse.assign(rows, -std::numeric_limits<double>::infinity());
  TiledPass pass(p, o);
  const bool split = tiled_splits(p);
  const int64_t chunks = split ? (p.tk + kSplitChunk - 1) / kSplitChunk : 1;
  // Per chunk, the partial state and accumulators of up to kTiledQueries
  // rows (one chunk, the whole row, without a split).
  std::vector<RowState> state(static_cast<size_t>(chunks * kTiledQueries));
  std::vector<float> acc(static_cast<size_t>(chunks * kTiledQueries * dv));
  std::vector<float> combined(static_cast<size_t>(dv)), part(static_cast<size_t>(dv));
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      pass.load(b, h);
      if (!split) {
        for (int64_t i0 = 0; i0 < p.tq; i0 += kTiledQueries) {
          const int64_t mq = std::min(kTiledQueries, p.tq - i0);
          pass.run(i0, mq, 0, p.tk, state.data(), acc.data());
          for (int64_t r = 0; r < mq; ++r)
            finish(p, b, h, i0 + r, state[static_cast<size_t>(r)], acc.data() + r * dv, result);
        }
        continue;
      }
      // Split-K/V: each chunk's partials on their own (as separate thread
      // blocks would), then the combine.
      for (int64_t c = 0; c < chunks; ++c) {
        pass.run(0, p.tq, c * kSplitChunk, std::min((c + 1) * kSplitChunk, p.tk),
                 state.data() + c * kTiledQueries, acc.data() + c * kTiledQueries * dv);
      }
      for (int64_t i = 0; i < p.tq; ++i) {
        // The largest chunk exponent; a chunk without an allowed key of
        // this row has no partial.
        const RowState* top = nullptr;
        for (int64_t c = 0; c < chunks; ++c) {
          const RowState& st = state[static_cast<size_t>(c * kTiledQueries + i)];
          if (st.any && (!top || st.exponent > top->exponent)) top = &st;
        }
        // first_empty_row_error ruled out rows without any allowed key.
        RowState total = *top;
        total.l = 0;
        std::fill(combined.begin(), combined.end(), 0.0f);
        for (int64_t c = 0; c < chunks; ++c) {
          const RowState& st = state[static_cast<size_t>(c * kTiledQueries + i)];
          if (!st.any) continue;
          // The chunk's sums were relative to its own 2^M_chunk.
          const double k = st.exponent - top->exponent;
          float l = st.l;
          scale_pow2(&l, 1, k);
          total.l += l;
          const float* a = acc.data() + (c * kTiledQueries + i) * dv;
          std::copy(a, a + dv, part.begin());
          scale_pow2(part.data(), dv, k);
          for (int64_t d = 0; d < dv; ++d) combined[static_cast<size_t>(d)] += part[static_cast<size_t>(d)];
        }
        finish(p, b, h, i, total, combined.data(), result);
      }
    }
  }
  return result;
}

}  // namespace attncheck::impls
