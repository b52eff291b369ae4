#pragma once
// What the version 2 broken twins share: paged_online_f32 (the serving
// kernel of ../paged_online_kernel.h) with one bug of PagedOptions switched on,
// declared exactly as paged_online_f32 is, so each twin's file holds only
// its bug and the property that catches it.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../impl_common.h"
#include "../paged_online_kernel.h"
#include "attncheck/implementation.h"

namespace attncheck::impls::broken {

/// paged_online_f32 with `o`: kind broken, `caught_by` the property made
/// to catch it, paged_online_f32's features, traits and combos (or `combos`
/// when given: a bug that needs E4M3 K/V declares only those).
inline std::shared_ptr<const Implementation> paged_twin(std::string name, std::string caught_by,
                                                        std::string description, PagedOptions o,
                                                        std::vector<DTypeCombo> combos = {}) {
  ImplInfo info;
  info.name = std::move(name);
  info.kind = Kind::broken;
  info.features = kPagedOnlineFeatures;
  info.empty_rows = EmptyRowPolicy::error;
  info.precision = kernel_precision(DType::f32, DType::f32, kPagedKeyBlock);
  info.combos = combos.empty() ? paged_online_combos() : std::move(combos);
  for (const DTypeCombo& c : info.combos) {
    if (c.q == c.out && c.kv == c.out) info.dtypes |= dtype_bit(c.out);
  }
  info.description = std::move(description);
  info.caught_by = std::move(caught_by);
  return std::make_shared<FunctionImpl>(
      std::move(info), [o](const Problem& p) { return paged_online_forward(p, o); });
}

}  // namespace attncheck::impls::broken
