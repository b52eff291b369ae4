#pragma once
// Generators of whole problems within an implementation's declared features,
// dtypes and limits (SPEC section 3), for RapidCheck.

#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "attncheck/implementation.h"
#include "attncheck/problem.h"
#include "attncheck/properties.h"

namespace attncheck::gen {

/// What a generated problem may use.
struct GenSpec {
  DType dtype = DType::f64;
  Features features = 0;  ///< the implementation's, minus what a property excludes
  Limits limits;
  int64_t max_t = 9;   ///< tq and tk range over [1, max_t]: past blocks of 4 and 8
  int64_t max_d = 5;   ///< dk and dv range over [1, max_d]
  int64_t max_bh = 4;  ///< batch and heads range over [1, max_bh] (4 heads: GQA groups of 2)
  bool require_causal = false;  ///< always causal (needs FEATURE_CAUSAL)
  bool require_window = false;  ///< always windowed (needs FEATURE_WINDOW)
  bool require_gqa = false;     ///< kv_heads < heads (needs FEATURE_GQA)
  /// The format scores are stored in before softmax when it is not the
  /// accumulation format (PrecisionTraits::s_cast): q and k stay small
  /// enough that its rounding keeps scores within the first-order analysis.
  std::optional<DType> score_storage;
};

/// Memory layouts a strided problem can take.
enum class Layout { contiguous, bthd, padded };

/// The same logical tensor in another layout. Gaps of the padded layout
/// hold NaN, so reading outside the logical tensor shows.
Tensor relayout(const Tensor& t, std::array<int64_t, 4> shape, Layout layout);

/// The problem with q, k and v in `layout`.
Problem with_layout(const Problem& p, Layout layout);

/// The spec for an implementation in a dtype.
GenSpec spec_for(const ImplInfo& info, DType dtype);

/// Value regimes of SPEC section 3, simplest first (shrinking goes there).
enum class Regime { small_int, dyadic, normal, large, huge, one_hot, all_equal, near_tied };

/// What the generator drew: "regime X" per tensor, and per problem the
/// constraint kinds ("constraints none", "constraints key_padding", ...,
/// "constraints causal_top_left"), "bias", "softcap", "strided", "gqa",
/// "tq != tk", "tq = 1", "batch != heads".
struct Coverage {
  std::map<std::string, int64_t> counts;
  int64_t problems = 0;
  int64_t tensors = 0;
};

/// While alive, every problem drawn is counted into `c` (single-threaded:
/// one scope at a time).
class CoverageScope {
 public:
  explicit CoverageScope(Coverage& c);
  ~CoverageScope();
  CoverageScope(const CoverageScope&) = delete;
  CoverageScope& operator=(const CoverageScope&) = delete;
};

/// The spec for an implementation in a dtype, with larger sizes under the
/// thorough profile.
GenSpec spec_for(const ImplInfo& info, DType dtype, Profile profile);

/// A problem with at least one allowed key in every row. Dims shrink
/// towards 1, values towards 0 and small integers, masks towards none.
rc::Gen<Problem> problem(const GenSpec& spec);

/// A problem in which at least one row has no allowed key, made through key
/// padding, an explicit mask, bottom-right causal with tq > tk, or a window,
/// whichever the features allow. Requires can_make_empty_rows(spec).
rc::Gen<Problem> problem_with_empty_row(const GenSpec& spec);

/// A random permutation of [0, n) that shrinks to the identity (only inside
/// a RapidCheck property or generator).
std::vector<int64_t> permutation(int64_t n);

/// True when the features offer a way to make a row empty.
bool can_make_empty_rows(const GenSpec& spec);

}  // namespace attncheck::gen

namespace attncheck {
/// RapidCheck's printer for a problem (shapes, masks, values).
void showValue(const Problem& p, std::ostream& os);
}  // namespace attncheck
