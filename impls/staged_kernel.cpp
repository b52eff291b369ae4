// The staged kernel (impls/staged_kernel.h). Values are doubles rounded to
// their stage's format after every operation: a double holds every f32,
// bf16 and f16 product exactly and rounds every sum once more, which the
// declared bounds cover (a second rounding of at most 2^-53 relative).

#include "staged_kernel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "impl_common.h"

namespace attncheck::impls {

PrecisionTraits staged_precision(const StagedArithmetic& a) {
  PrecisionTraits t = kernel_precision(DType::f32, a.softmax, a.key_block);
  DType coarsest = a.score;
  for (DType f : {a.softmax, a.pv}) {
    if (unit_roundoff(f) > unit_roundoff(coarsest)) coarsest = f;
  }
  if (a.q_cast && unit_roundoff(*a.q_cast) > unit_roundoff(coarsest)) coarsest = *a.q_cast;
  t.accum = coarsest;
  t.q_cast = a.q_cast;
  t.score_accum = a.score;
  t.softmax_accum = a.softmax;
  t.pv_accum = a.pv;
  t.s_cast = a.score;  // S stays in the format it was summed in
  return t;
}

ForwardResult staged_forward(const Problem& p, const StagedArithmetic& a) {
  if (const auto e = first_empty_row_error(p)) return ForwardResult::failure(*e);
  const auto rs = [&](double x) { return round_to(a.score, x); };
  const auto rm = [&](double x) { return round_to(a.softmax, x); };
  const auto rp = [&](double x) { return round_to(a.pv, x); };
  const auto r32 = [](double x) { return round_to(DType::f32, x); };
  ForwardResult r;
  r.out.assign(static_cast<size_t>(p.batch * p.heads * p.tq * p.dv), 0.0);
  r.lse.assign(static_cast<size_t>(p.batch * p.heads * p.tq), 0.0);
  const double qd = p.descale ? p.descale->q : 1.0;
  const double kd = p.descale ? p.descale->k : 1.0;
  const double vd = p.descale ? p.descale->v : 1.0;
  const double scale = rs(p.scale * qd * kd);
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> q(static_cast<size_t>(p.dk)), s(static_cast<size_t>(p.tk));
  std::vector<double> acc(static_cast<size_t>(p.dv)), total(static_cast<size_t>(p.dv));
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = p.kv_head(h);
      for (int64_t i = 0; i < p.tq; ++i) {
        for (int64_t d = 0; d < p.dk; ++d) {
          const double x = p.q.at(b, h, i, d);
          q[static_cast<size_t>(d)] = a.q_cast ? round_to(*a.q_cast, x * qd) / qd : x;
        }
        for (int64_t j = 0; j < p.tk; ++j) {
          if (!p.allowed(b, h, i, j)) continue;
          double t = 0, run_sum = 0;
          for (int64_t d = 0; d < p.dk; ++d) {
            run_sum = rs(run_sum + rs(q[static_cast<size_t>(d)] * p.k.at(b, g, j, d)));
            if (a.score_run > 0 && (d + 1) % a.score_run == 0) {
              t = r32(t + run_sum);
              run_sum = 0;
            }
          }
          t = rs(r32(t + run_sum) * scale);
          if (p.softcap > 0) t = rm(p.softcap * rm(std::tanh(rm(t / p.softcap))));
          s[static_cast<size_t>(j)] = rm(t + p.bias_at(b, h, i, j));
        }
        double m = -inf, l = 0;
        if (!p.sink.empty()) {
          m = p.sink[static_cast<size_t>(h)];
          l = 1;
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        std::fill(total.begin(), total.end(), 0.0);
        int64_t run = 0;
        for (int64_t j0 = 0; j0 < p.tk; j0 += a.key_block) {
          const int64_t j1 = std::min(p.tk, j0 + a.key_block);
          double m_new = m;
          for (int64_t j = j0; j < j1; ++j)
            if (p.allowed(b, h, i, j)) m_new = std::max(m_new, s[static_cast<size_t>(j)]);
          if (m_new == -inf) continue;
          if (m_new != m) {
            const double alpha = m == -inf ? 0.0 : rm(std::exp(rm(m - m_new)));
            l = rm(l * alpha);
            for (int64_t d = 0; d < p.dv; ++d) {
              acc[static_cast<size_t>(d)] = rp(acc[static_cast<size_t>(d)] * alpha);
              total[static_cast<size_t>(d)] = r32(total[static_cast<size_t>(d)] * alpha);
            }
            m = m_new;
          }
          for (int64_t j = j0; j < j1; ++j) {
            if (!p.allowed(b, h, i, j)) continue;
            const double w = rm(std::exp(rm(s[static_cast<size_t>(j)] - m)));
            l = rm(l + w);
            const double half_range = max_finite(a.pv) / 2;
            for (int64_t d = 0; d < p.dv; ++d) {
              const double update = rm(w * (p.v.at(b, g, j, d) * vd));
              double& x = acc[static_cast<size_t>(d)];
              if (a.pv_guard && std::fabs(x + update) >= half_range) {
                total[static_cast<size_t>(d)] = r32(total[static_cast<size_t>(d)] + x);
                x = 0;
              }
              x = rp(x + update);
            }
            if (a.pv_run > 0 && ++run == a.pv_run) {
              for (int64_t d = 0; d < p.dv; ++d) {
                total[static_cast<size_t>(d)] =
                    r32(total[static_cast<size_t>(d)] + acc[static_cast<size_t>(d)]);
                acc[static_cast<size_t>(d)] = 0;
              }
              run = 0;
            }
          }
        }
        const size_t row = static_cast<size_t>((b * p.heads + h) * p.tq + i);
        for (int64_t d = 0; d < p.dv; ++d) {
          const double sum = r32(total[static_cast<size_t>(d)] + acc[static_cast<size_t>(d)]);
          r.out[row * static_cast<size_t>(p.dv) + static_cast<size_t>(d)] =
              round_to(p.dtype, r32(sum / l));
        }
        r.lse[row] = r32(m + r32(std::log(l)));
      }
    }
  return r;
}

}  // namespace attncheck::impls
