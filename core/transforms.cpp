#include "attncheck/transforms.h"

namespace attncheck {

Problem expand_kv_heads(const Problem& p, const KvHeadMap& map) {
  Problem a = p.contiguous();
  a.kv_heads = p.heads;
  a.k = make_tensor(p.batch, p.heads, p.tk, p.dk);
  a.v = make_tensor(p.batch, p.heads, p.tk, p.dv);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = map ? map(p, h) : p.kv_head(h);
      for (int64_t j = 0; j < p.tk; ++j) {
        for (int64_t d = 0; d < p.dk; ++d) a.k.at(b, h, j, d) = p.k.at(b, g, j, d);
        for (int64_t d = 0; d < p.dv; ++d) a.v.at(b, h, j, d) = p.v.at(b, g, j, d);
      }
    }
  return a;
}

Problem with_identity_values(const Problem& p) {
  Problem q = p;
  q.dv = p.tk;
  q.v = make_tensor(p.batch, p.kv_heads, p.tk, p.tk);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t g = 0; g < p.kv_heads; ++g)
      for (int64_t j = 0; j < p.tk; ++j) q.v.at(b, g, j, j) = 1;
  q.dout.clear();
  return q;
}

}  // namespace attncheck
