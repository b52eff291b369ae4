// Declares arbitrary strides but reads q, k and v as contiguous
// [b][h][t][d] from their data pointers, as a kernel that assumes
// .contiguous() was called does.

#include <algorithm>
#include <cstdint>
#include <memory>

#include "attncheck/registry.h"
#include "naive.h"

namespace attncheck::impls::broken {
namespace {

// t's buffer read as if contiguous; a buffer shorter than that is padded
// with zeros so the misread stays inside memory.
Tensor misread(const Tensor& t, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  Tensor c;
  c.data = t.data;
  c.data.resize(std::max(c.data.size(), static_cast<size_t>(d0 * d1 * d2 * d3)));
  c.strides = contiguous_strides(d0, d1, d2, d3);
  return c;
}

// Identical to the correct result on contiguous inputs.
ForwardResult ignore_strides(const Problem& p) {
  Problem flat = p;
  flat.q = misread(p.q, p.batch, p.heads, p.tq, p.dk);
  flat.k = misread(p.k, p.batch, p.kv_heads, p.tk, p.dk);
  flat.v = misread(p.v, p.batch, p.kv_heads, p.tk, p.dv);
  return naive_forward(flat, p.scale, true, correct_softmax());
}

ATTNCHECK_REGISTER_IMPL(std::make_shared<FunctionImpl>(
    broken_info("broken_strides_ignored", "LayoutInvariance",
                "declares strided inputs but reads q, k and v as contiguous "
                "[b][h][t][d]"),
    ignore_strides));

}  // namespace
}  // namespace attncheck::impls::broken
