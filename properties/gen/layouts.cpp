#include "properties/gen/layouts.h"

#include <limits>

#include "attncheck/dtype.h"

namespace attncheck::gen {
namespace detail {

Tensor lay_out(const std::vector<double>& x, std::array<int64_t, 4> shape, Layout layout,
               int64_t pad) {
  const auto [d0, d1, d2, d3] = shape;
  Tensor t;
  if (layout == Layout::bthd) {
    t.strides = {d2 * d1 * d3, d3, d1 * d3, 1};
  } else if (layout == Layout::padded) {
    const int64_t s2 = d3 + pad, s1 = d2 * s2 + 2 * pad, s0 = d1 * s1 + 3 * pad;
    t.strides = {s0, s1, s2, 1};
  } else {
    t.strides = contiguous_strides(d0, d1, d2, d3);
  }
  const int64_t size = (d0 - 1) * t.strides[0] + (d1 - 1) * t.strides[1] +
                       (d2 - 1) * t.strides[2] + (d3 - 1) * t.strides[3] + 1;
  t.data.assign(static_cast<size_t>(size), std::numeric_limits<double>::quiet_NaN());
  size_t k = 0;
  for (int64_t a = 0; a < d0; ++a)
    for (int64_t b = 0; b < d1; ++b)
      for (int64_t c = 0; c < d2; ++c)
        for (int64_t d = 0; d < d3; ++d) t.at(a, b, c, d) = x[k++];
  return t;
}

}  // namespace detail

namespace {

// relayout with a padded layout's gaps in units of `pad` (lay_out).
Tensor relayout_by(const Tensor& t, std::array<int64_t, 4> shape, Layout layout, int64_t pad) {
  std::vector<double> x;
  x.reserve(static_cast<size_t>(shape[0] * shape[1] * shape[2] * shape[3]));
  for (int64_t a = 0; a < shape[0]; ++a)
    for (int64_t b = 0; b < shape[1]; ++b)
      for (int64_t c = 0; c < shape[2]; ++c)
        for (int64_t d = 0; d < shape[3]; ++d) x.push_back(t.at(a, b, c, d));
  return detail::lay_out(x, shape, layout, pad);
}

}  // namespace

Tensor relayout(const Tensor& t, std::array<int64_t, 4> shape, Layout layout) {
  return relayout_by(t, shape, layout, 1);
}

Problem with_layout(const Problem& p, Layout layout) {
  Problem c = p;
  // Block formats pad by whole blocks (SPEC 1.2).
  const int64_t pad = is_block_format(p.kv_dtype.value_or(p.dtype)) ? kBlockValues : 1;
  c.q = relayout(p.q, {p.batch, p.heads, p.tq, p.dk}, layout);
  c.k = relayout_by(p.k, {p.batch, p.kv_heads, p.tk, p.dk}, layout, pad);
  c.v = relayout_by(p.v, {p.batch, p.kv_heads, p.tk, p.dv}, layout, pad);
  return c;
}

}  // namespace attncheck::gen
