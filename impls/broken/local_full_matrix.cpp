// A "local" attention that builds the whole tq x tk score matrix and masks
// it to the window: right values, none of the cost it claims to save
// (exercise 10). Its counter reports what it computed.

#include <memory>

#include "attncheck/registry.h"

#include "../local_kernel.h"
#include "naive.h"

namespace attncheck::impls {

std::shared_ptr<const Implementation> broken_local_full_matrix() {
  return std::make_shared<CountingImpl>(
      broken::broken_info("broken_local_full_matrix",
                          "WindowLocality",
                          "sliding-window attention that computes every score of the tq x tk "
                          "matrix and masks those outside the window"),
      [](const Problem& p, int64_t* n) {
        // naive_forward forms a score at every key, allowed or not.
        *n = p.score_elements();
        return broken::naive_forward(p, p.scale, true, broken::correct_softmax());
      });
}

ATTNCHECK_REGISTER_IMPL(broken_local_full_matrix());

}  // namespace attncheck::impls
