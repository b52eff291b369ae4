#pragma once
// Building an explicit mask or bias (Broadcast, SPEC 1) element by element,
// written once for the generators, the properties' rewrites and the
// real-size draws.

#include <cstddef>
#include <cstdint>

#include "attncheck/problem.h"

namespace attncheck {

/// A [batch][heads][tq][tk] mask or bias (batch and heads 1 or the
/// problem's) whose element (b, h, i, j) is value(b, h, i, j). `value` is
/// called once per element in row-major order (b, then h, i, j), so a
/// generator that draws inside it draws in the data's order.
template <typename T, typename F>
Broadcast<T> make_broadcast(int64_t batch, int64_t heads, int64_t tq, int64_t tk, F&& value) {
  Broadcast<T> m;
  m.batch = batch;
  m.heads = heads;
  m.data.resize(static_cast<size_t>(batch * heads * tq * tk));
  size_t k = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < tq; ++i)
        for (int64_t j = 0; j < tk; ++j) m.data[k++] = static_cast<T>(value(b, h, i, j));
  return m;
}

}  // namespace attncheck
