#include "online_kernel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "impl_common.h"

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

}  // namespace

template <typename T>
ForwardResult online_forward(const Problem& p, const OnlineOptions& o) {
  if (o.empty_rows == EmptyRowPolicy::error) {
    if (auto message = first_empty_row_error(p)) return ForwardResult::failure(*message);
  }
  const auto rows = static_cast<size_t>(p.batch * p.heads * p.tq);
  ForwardResult r;
  r.out.assign(rows * static_cast<size_t>(p.dv), 0.0);
  r.lse.assign(rows, -std::numeric_limits<double>::infinity());
  RowPass<T> pass(p, o);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i) {
        // An empty row (zero policy only) keeps its zeros and -inf.
        if (!pass.forward(b, h, i)) continue;
        for (int64_t d = 0; d < p.dv; ++d) {
          const T x = pass.acc()[static_cast<size_t>(d)] / pass.l();
          r.out[out_index(p, b, h, i, d)] = round_to(p.dtype, static_cast<double>(x));
        }
        r.lse[row_index(p, b, h, i)] = static_cast<double>(pass.lse());
      }
  return r;
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
