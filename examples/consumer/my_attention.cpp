// A user's attention implementation, registered with attncheck: one query
// at a time in double, a stable softmax over the keys key padding and the
// causal mask allow (either alignment), any scale; weights and lse.

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "attncheck/implementation.h"
#include "attncheck/registry.h"

namespace {

using namespace attncheck;

class MyAttention : public Implementation {
 public:
  MyAttention() {
    info_.name = "my_attention_f64";
    info_.kind = Kind::reference;
    info_.dtypes = dtype_bit(DType::f64);
    info_.features = ATTNCHECK_FEATURE_KEY_VALID | ATTNCHECK_FEATURE_CAUSAL |
                     ATTNCHECK_FEATURE_ALIGN_TOP_LEFT | ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT |
                     ATTNCHECK_FEATURE_SCALE | ATTNCHECK_FEATURE_WEIGHTS | ATTNCHECK_FEATURE_LSE;
    info_.empty_rows = EmptyRowPolicy::error;
    // One pass in double with glibc's exp (within 1 ulp).
    info_.precision.accum = DType::f64;
    info_.precision.p_cast = DType::f64;
    info_.precision.exp_ulps = 1;
    info_.description = "the consumer example's attention";
  }

  const ImplInfo& info() const override { return info_; }

  ForwardResult forward(const Problem& p) const override {
    ForwardResult r;
    r.out.assign(static_cast<size_t>(p.batch * p.heads * p.tq * p.dv), 0.0);
    r.weights.assign(static_cast<size_t>(p.score_elements()), 0.0);
    r.lse.assign(static_cast<size_t>(p.batch * p.heads * p.tq), 0.0);
    std::vector<double> s(static_cast<size_t>(p.tk));
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads; ++h) {
        // K and V are [batch][kv_heads][tk][d]: query head h reads the K/V
        // head of its group (grouped-query attention, SPEC 1.1), never h.
        const int64_t kv = p.kv_head(h);
        for (int64_t i = 0; i < p.tq; ++i) {
          double m = -std::numeric_limits<double>::infinity();
          for (int64_t j = 0; j < p.tk; ++j) {
            if (!p.allowed(b, h, i, j)) continue;
            double dot = 0;
            for (int64_t d = 0; d < p.dk; ++d) dot += p.q.at(b, h, i, d) * p.k.at(b, kv, j, d);
            s[static_cast<size_t>(j)] = p.scale * dot;
            m = std::max(m, s[static_cast<size_t>(j)]);
          }
          if (m == -std::numeric_limits<double>::infinity()) {
            return ForwardResult::failure("a query has no allowed key");
          }
          double l = 0;
          for (int64_t j = 0; j < p.tk; ++j) {
            if (p.allowed(b, h, i, j))
              l += (s[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - m));
          }
          for (int64_t j = 0; j < p.tk; ++j) {
            if (!p.allowed(b, h, i, j)) continue;
            const double a = s[static_cast<size_t>(j)] / l;
            r.weights[weight_index(p, b, h, i, j)] = a;
            for (int64_t d = 0; d < p.dv; ++d)
              r.out[out_index(p, b, h, i, d)] += a * p.v.at(b, kv, j, d);
          }
          r.lse[row_index(p, b, h, i)] = m + std::log(l);
        }
      }
    return r;
  }

 private:
  ImplInfo info_;
};

ATTNCHECK_REGISTER_IMPL(std::make_shared<MyAttention>());

}  // namespace
