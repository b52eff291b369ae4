#include "online_kernel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "impl_common.h"
#include "slice_operands.h"
#include "kernels_simd.h"

namespace attncheck::impls {
namespace {

// One query's pass over its key blocks, with the buffers of one block; the
// forward and backward passes share it so both see the same row.
template <typename T>
class RowPass {
 public:
  RowPass(const Problem& p, const OnlineOptions& o)
      : p_(p),
        o_(o),
        block_(static_cast<size_t>(std::max<int64_t>(1, o.key_block))),
        s_(block_),
        th_(block_),
        ok_(block_),
        acc_(static_cast<size_t>(p.dv)) {}

  // Scores of the allowed keys of the block starting at `start` (s_, th_,
  // ok_); returns the block's max, or nullopt when no key of it is allowed.
  std::optional<T> scores(int64_t b, int64_t h, int64_t i, int64_t start) {
    const T scale = static_cast<T>(p_.scale);
    const T cap = static_cast<T>(p_.softcap);
    const int64_t g = p_.kv_head(h);
    std::optional<T> bm;
    for (int64_t j = start; j < end(start); ++j) {
      const auto jj = static_cast<size_t>(j - start);
      ok_[jj] = p_.allowed(b, h, i, j) ? 1 : 0;
      if (!ok_[jj]) continue;
      T dot = 0;
      for (int64_t d = 0; d < p_.dk; ++d) {
        dot += static_cast<T>(p_.q.at(b, h, i, d)) * static_cast<T>(p_.k.at(b, g, j, d));
      }
      T t = scale * dot;
      if (p_.softcap > 0) {
        th_[jj] = std::tanh(t / cap);
        t = cap * th_[jj];
      }
      if (p_.bias) t += static_cast<T>(p_.bias_at(b, h, i, j));
      s_[jj] = t;
      bm = bm ? std::max(*bm, t) : t;
    }
    return bm;
  }

  // The online softmax of row (b, h, i): fills acc_ with sum_j cast(p_j) v_j
  // relative to the final running max m_, and l_; false for an empty row.
  bool forward(int64_t b, int64_t h, int64_t i) {
    const int64_t g = p_.kv_head(h);
    std::fill(acc_.begin(), acc_.end(), T(0));
    l_ = 0;
    bool any = false;
    for (int64_t start = 0; start < p_.tk; start += static_cast<int64_t>(block_)) {
      const std::optional<T> bm = scores(b, h, i, start);
      // A fully masked block contributes nothing; skipping it is the guard
      // against exp(-inf - -inf) while the running max is still -inf.
      if (!bm) continue;
      if (!any) {
        m_ = *bm;
        any = true;
      } else if (*bm > m_) {
        // Everything accumulated so far was relative to the old max.
        const T alpha = std::exp(m_ - *bm);
        l_ *= alpha;
        for (T& x : acc_) x *= alpha;
        m_ = *bm;
      }
      for (int64_t j = start; j < end(start); ++j) {
        const auto jj = static_cast<size_t>(j - start);
        if (!ok_[jj]) continue;
        const T pj = std::exp(s_[jj] - m_);
        l_ += pj;
        const T pv = o_.p_cast ? static_cast<T>(round_to(*o_.p_cast, static_cast<double>(pj))) : pj;
        for (int64_t d = 0; d < p_.dv; ++d) {
          acc_[static_cast<size_t>(d)] += pv * static_cast<T>(p_.v.at(b, g, j, d));
        }
      }
    }
    return any;
  }

  int64_t block() const { return static_cast<int64_t>(block_); }
  int64_t end(int64_t start) const { return std::min(start + block(), p_.tk); }
  T m() const { return m_; }
  T l() const { return l_; }
  T lse() const { return m_ + std::log(l_); }
  const std::vector<T>& acc() const { return acc_; }
  T s(int64_t j, int64_t start) const { return s_[static_cast<size_t>(j - start)]; }
  T th(int64_t j, int64_t start) const { return th_[static_cast<size_t>(j - start)]; }
  bool ok(int64_t j, int64_t start) const { return ok_[static_cast<size_t>(j - start)] != 0; }

 private:
  const Problem& p_;
  const OnlineOptions& o_;
  size_t block_;
  std::vector<T> s_, th_;
  std::vector<uint8_t> ok_;
  std::vector<T> acc_;
  T m_ = 0, l_ = 0;
};

// The operands of one (b, h) slice in T, contiguous, and the two products
// of a tile. The generic body forms each allowed score as the sequential
// dot product scale * (q . k) and adds p_j v_j key by key (what the online
// kernel always did); the float body uses kernels_simd.h's packed GEMMs over
// the whole tile (keys aligned to its 16-column panels), so it forms some
// scores it then ignores.
template <typename T>
class Tiles {
 public:
  explicit Tiles(const Problem& p) : p_(p) {}

  // Converts Q of (b, h) and, when h reads another K/V head than the last
  // call, that head's K and V.
  void load(int64_t b, int64_t h) {
    if (!x_.load(p_, b, h)) return;
    if constexpr (std::is_same_v<T, float>) {
      const std::vector<float>& v = x_.v();
      simd::pack_transposed(x_.k().data(), p_.tk, p_.dk, p_.dk, kt_);
      simd::pack(v.data(), p_.tk, p_.dv, p_.dv, vp_);
      // 0 * inf is NaN: the GEMM would let a non-finite value at a key
      // that is masked for a row into that row, so such heads take the
      // key-by-key path, which skips masked keys.
      v_finite_ = std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
    }
  }

  // First key column of the score tile for keys [j0, j1).
  int64_t tile_start(int64_t j0) const {
    if constexpr (std::is_same_v<T, float>) return j0 - j0 % simd::kPanel;
    return j0;
  }

  // s[r * lds + (j - tile_start(j0))] = scale * (q_{i0 + r} . k_j) for rows r
  // < mq and keys j in [j0, j1) (only where ok[r * kb + j - j0] in the
  // generic body).
  void scores(int64_t i0, int64_t mq, int64_t j0, int64_t j1, const uint8_t* ok, int64_t kb,
                 T* s, int64_t lds) const {
    const T scale = static_cast<T>(p_.scale);
    const int64_t dk = p_.dk;
    if constexpr (std::is_same_v<T, float>) {
      (void)ok;
      (void)kb;
      // Up to the panel holding key j1 - 1 (zero columns past tk).
      const int64_t js = tile_start(j0);
      const int64_t n = (j1 + simd::kPanel - 1) / simd::kPanel * simd::kPanel - js;
      simd::gemm(mq, n, dk, x_.q().data() + i0 * dk, dk, kt_, 0, js, s, lds, false);
      for (int64_t r = 0; r < mq; ++r)
        for (int64_t c = 0; c < n; ++c) s[r * lds + c] *= scale;
    } else {
      for (int64_t r = 0; r < mq; ++r) {
        const T* q = x_.q().data() + (i0 + r) * dk;
        for (int64_t j = j0; j < j1; ++j) {
          if (!ok[r * kb + j - j0]) continue;
          const T* k = x_.k().data() + j * dk;
          T dot = 0;
          for (int64_t d = 0; d < dk; ++d) dot += q[d] * k[d];
          s[r * lds + j - j0] = scale * dot;
        }
      }
    }
  }

  // acc[r][:] += sum over keys j in [j0, j1) with ok of pv[r * lds + j - j0]
  // * v_j, for rows r < mq (pv points at key j0's column).
  void accumulate(int64_t mq, int64_t j0, int64_t j1, const uint8_t* ok, int64_t kb, const T* pv,
                  int64_t lds, T* acc) const {
    const int64_t dv = p_.dv;
    if constexpr (std::is_same_v<T, float>) {
      if (v_finite_) {
        // Masked keys carry p = 0 exactly, adding nothing.
        simd::gemm(mq, dv, j1 - j0, pv, lds, vp_, j0, 0, acc, dv, true);
        return;
      }
    }
    for (int64_t r = 0; r < mq; ++r) {
      T* a = acc + r * dv;
      for (int64_t j = j0; j < j1; ++j) {
        if (!ok[r * kb + j - j0]) continue;
        const T w = pv[r * lds + j - j0];
        const T* v = x_.v().data() + j * dv;
        for (int64_t d = 0; d < dv; ++d) a[d] += w * v[d];
      }
    }
  }

 private:
  const Problem& p_;
  SliceOperands<T> x_;
  simd::Packed kt_, vp_;
  bool v_finite_ = true;
};

}  // namespace

// The forward pass runs on tiles of kQueryBlock queries x one key block:
// the tile's scores at once, then per row the same online update as
// RowPass::forward (a block without an allowed key skipped; when the
// block's max exceeds the running max, l and the accumulator multiplied by
// exp(m - m_new) once; p_j = exp(s_j - m), l += p_j, acc += cast(p_j) v_j),
// so the rescales, and the precision traits, are the same. A key block
// outside every row's causal and window limits is never visited.
template <typename T>
ForwardResult online_forward(const Problem& p, const OnlineOptions& o) {
  if (o.empty_rows == EmptyRowPolicy::error) {
    if (auto message = first_empty_row_error(p)) return ForwardResult::failure(*message);
  }
  constexpr int64_t kQueryBlock = 64;
  const auto rows = static_cast<size_t>(p.batch * p.heads * p.tq);
  ForwardResult result;
  result.out.assign(rows * static_cast<size_t>(p.dv), 0.0);
  result.lse.assign(rows, -std::numeric_limits<double>::infinity());
  const int64_t kb = std::max<int64_t>(1, o.key_block);
  const int64_t dv = p.dv;
  // Tile rows are wide enough for a block plus its alignment to panels.
  const int64_t lds = kb + 2 * simd::kPanel;
  const T cap = static_cast<T>(p.softcap);
  const T minus_inf = -std::numeric_limits<T>::infinity();
  std::vector<T> s(static_cast<size_t>(kQueryBlock * lds)), acc(static_cast<size_t>(kQueryBlock * dv));
  std::vector<uint8_t> ok(static_cast<size_t>(kQueryBlock * kb));
  std::vector<int64_t> first(kQueryBlock), last(kQueryBlock);
  std::vector<T> m(kQueryBlock), l(kQueryBlock);
  std::vector<uint8_t> any(kQueryBlock), row_ok(kQueryBlock);
  Tiles<T> tiles(p);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      tiles.load(b, h);
      for (int64_t i0 = 0; i0 < p.tq; i0 += kQueryBlock) {
        const int64_t mq = std::min(kQueryBlock, p.tq - i0);
        int64_t lo = p.tk, hi = -1;
        for (int64_t r0 = 0; r0 < mq; ++r0) {
          const auto r = static_cast<size_t>(r0);
          const int64_t pos = p.position(i0 + r0);
          first[r] = 0;
          last[r] = p.tk - 1;
          if (p.window_left >= 0) first[r] = std::max<int64_t>(0, pos - p.window_left);
          if (p.window_right >= 0) last[r] = std::min(last[r], pos + p.window_right);
          if (p.causal) last[r] = std::min(last[r], pos);
          if (first[r] <= last[r]) {
            lo = std::min(lo, first[r]);
            hi = std::max(hi, last[r]);
          }
          any[r] = 0;
          l[r] = 0;
          m[r] = 0;
        }
        std::fill(acc.begin(), acc.end(), T(0));
        for (int64_t j0 = lo - lo % kb; j0 <= hi; j0 += kb) {
          const int64_t j1 = std::min(j0 + kb, p.tk);
          bool tile_any = false;
          for (int64_t r0 = 0; r0 < mq; ++r0) {
            const auto r = static_cast<size_t>(r0);
            uint8_t* okr = ok.data() + r0 * kb;
            bool found = false;
            for (int64_t j = j0; j < j1; ++j) {
              const bool a = j >= first[r] && j <= last[r] &&
                             (p.key_valid.empty() || p.key_valid[static_cast<size_t>(b * p.tk + j)]) &&
                             (!p.mask || p.mask->at(b, h, i0 + r0, j, p.tq, p.tk));
              okr[j - j0] = a ? 1 : 0;
              found = found || a;
            }
            row_ok[r] = found ? 1 : 0;
            tile_any = tile_any || found;
          }
          // A fully masked block contributes nothing; skipping it is the
          // guard against exp(-inf - -inf) while a running max is -inf.
          if (!tile_any) continue;
          tiles.scores(i0, mq, j0, j1, ok.data(), kb, s.data(), lds);
          const int64_t off = j0 - tiles.tile_start(j0);
          for (int64_t r0 = 0; r0 < mq; ++r0) {
            const auto r = static_cast<size_t>(r0);
            T* row = s.data() + r0 * lds + off;
            const uint8_t* okr = ok.data() + r0 * kb;
            const int64_t n = j1 - j0;
            if (!row_ok[r]) {
              std::fill(row, row + n, T(0));
              continue;
            }
            T bm = minus_inf;
            bool seen = false;
            for (int64_t c = 0; c < n; ++c) {
              if (!okr[c]) {
                row[c] = minus_inf;
                continue;
              }
              T t = row[c];
              if (p.softcap > 0) t = cap * std::tanh(t / cap);
              if (p.bias) t += static_cast<T>(p.bias_at(b, h, i0 + r0, j0 + c));
              row[c] = t;
              bm = seen ? std::max(bm, t) : t;
              seen = true;
            }
            if (!any[r]) {
              m[r] = bm;
              any[r] = 1;
            } else if (bm > m[r]) {
              // Everything accumulated so far was relative to the old max.
              const T alpha = std::exp(m[r] - bm);
              l[r] *= alpha;
              for (int64_t d = 0; d < dv; ++d) acc[static_cast<size_t>(r0 * dv + d)] *= alpha;
              m[r] = bm;
            }
            if constexpr (std::is_same_v<T, float>) {
              simd::exp_shifted(row, n, m[r]);
              l[r] += simd::sum_of(row, n);
            } else {
              for (int64_t c = 0; c < n; ++c) {
                if (!okr[c]) {
                  row[c] = 0;
                  continue;
                }
                row[c] = std::exp(row[c] - m[r]);
                l[r] += row[c];
              }
            }
            if (o.p_cast) {
              for (int64_t c = 0; c < n; ++c)
                row[c] = static_cast<T>(round_to(*o.p_cast, static_cast<double>(row[c])));
            }
          }
          tiles.accumulate(mq, j0, j1, ok.data(), kb, s.data() + off, lds, acc.data());
        }
        for (int64_t r0 = 0; r0 < mq; ++r0) {
          const auto r = static_cast<size_t>(r0);
          // An empty row (zero policy only) keeps its zeros and -inf.
          if (!any[r]) continue;
          const int64_t i = i0 + r0;
          for (int64_t d = 0; d < dv; ++d) {
            const T x = acc[static_cast<size_t>(r0 * dv + d)] / l[r];
            result.out[out_index(p, b, h, i, d)] = round_to(p.dtype, static_cast<double>(x));
          }
          result.lse[row_index(p, b, h, i)] = static_cast<double>(m[r] + std::log(l[r]));
        }
      }
    }
  }
  return result;
}

template <typename T>
BackwardResult online_backward(const Problem& p, const OnlineOptions& o) {
  const auto rows = static_cast<size_t>(p.batch * p.heads * p.tq);
  const auto dk = static_cast<size_t>(p.dk);
  const auto dv = static_cast<size_t>(p.dv);
  if (p.dout.size() != rows * dv) {
    return BackwardResult::failure("dout has " + std::to_string(p.dout.size()) + " elements, expected " +
                            std::to_string(rows * dv));
  }
  if (o.empty_rows == EmptyRowPolicy::error) {
    if (auto message = first_empty_row_error(p)) return BackwardResult::failure(*message);
  }
  OnlineOptions unrounded = o;
  unrounded.p_cast.reset();
  const auto tk = static_cast<size_t>(p.tk);
  const auto kv_rows = static_cast<size_t>(p.batch * p.kv_heads) * tk;
  std::vector<T> dk_acc(kv_rows * dk, T(0)), dv_acc(kv_rows * dv, T(0));
  std::vector<T> dq(dk), dout(dv), q(dk);
  BackwardResult r;
  r.dq.assign(rows * dk, 0.0);
  const T scale = static_cast<T>(p.scale);
  RowPass<T> pass(p, unrounded);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = p.kv_head(h);
      const auto kv_base = static_cast<size_t>(b * p.kv_heads + g) * tk;
      for (int64_t i = 0; i < p.tq; ++i) {
        // An empty row (zero policy only) contributes nothing.
        if (!pass.forward(b, h, i)) continue;
        const T lse = pass.lse();
        // delta = dO_i . out_i, from the recomputed output as flash-style
        // passes take it from the forward's.
        T delta = 0;
        for (size_t d = 0; d < dv; ++d) {
          dout[d] = static_cast<T>(p.dout[out_index(p, b, h, i, static_cast<int64_t>(d))]);
          delta += dout[d] * (pass.acc()[d] / pass.l());
        }
        for (size_t d = 0; d < dk; ++d)
          q[d] = static_cast<T>(p.q.at(b, h, i, static_cast<int64_t>(d)));
        std::fill(dq.begin(), dq.end(), T(0));
        for (int64_t start = 0; start < p.tk; start += pass.block()) {
          if (!pass.scores(b, h, i, start)) continue;
          for (int64_t j = start; j < pass.end(start); ++j) {
            if (!pass.ok(j, start)) continue;
            const T pj = std::exp(pass.s(j, start) - lse);
            T da = 0;
            for (size_t d = 0; d < dv; ++d)
              da += dout[d] * static_cast<T>(p.v.at(b, g, j, static_cast<int64_t>(d)));
            T x = pj * (da - delta);
            // d(c tanh(t / c)) / dt = 1 - tanh^2.
            if (p.softcap > 0) x *= T(1) - pass.th(j, start) * pass.th(j, start);
            T* dk_row = &dk_acc[(kv_base + static_cast<size_t>(j)) * dk];
            T* dv_row = &dv_acc[(kv_base + static_cast<size_t>(j)) * dv];
            for (size_t d = 0; d < dk; ++d) {
              dq[d] += x * static_cast<T>(p.k.at(b, g, j, static_cast<int64_t>(d)));
              dk_row[d] += x * q[d];
            }
            for (size_t d = 0; d < dv; ++d) dv_row[d] += pj * dout[d];
          }
        }
        for (size_t d = 0; d < dk; ++d) {
          r.dq[row_index(p, b, h, i) * dk + d] =
              round_to(p.dtype, static_cast<double>(scale * dq[d]));
        }
      }
    }
  }
  r.dk.resize(dk_acc.size());
  for (size_t k = 0; k < dk_acc.size(); ++k) {
    r.dk[k] = round_to(p.dtype, static_cast<double>(scale * dk_acc[k]));
  }
  r.dv.resize(dv_acc.size());
  for (size_t k = 0; k < dv_acc.size(); ++k)
    r.dv[k] = round_to(p.dtype, static_cast<double>(dv_acc[k]));
  return r;
}

template ForwardResult online_forward<double>(const Problem&, const OnlineOptions&);
template ForwardResult online_forward<float>(const Problem&, const OnlineOptions&);
template BackwardResult online_backward<double>(const Problem&, const OnlineOptions&);
template BackwardResult online_backward<float>(const Problem&, const OnlineOptions&);

}  // namespace attncheck::impls
