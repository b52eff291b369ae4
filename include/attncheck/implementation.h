#pragma once
// What an implementation under test is: its declaration (name, kind, dtypes,
// features, empty-row policy, precision traits, limits) and its forward pass.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attncheck/problem.h"

namespace attncheck {

/// Where an implementation comes from (SPEC 5.2).
enum class Kind { reference, adapter, layer, broken, plugin };

/// "reference", "adapter", "layer", "broken" or "plugin".
std::string_view kind_name(Kind k);

/// What an implementation does with a query that has no allowed key.
enum class EmptyRowPolicy : uint32_t {
  error = ATTNCHECK_EMPTY_ROW_ERROR,  ///< reports an error
  zero = ATTNCHECK_EMPTY_ROW_ZERO,    ///< zero output and weights, lse = -inf
};

/// Feature bits (ATTNCHECK_FEATURE_* of plugin.h).
using Features = uint32_t;

/// The arithmetic an implementation declares; tolerances derive from it.
struct PrecisionTraits {
  DType accum = DType::f64;   ///< format of score and sum accumulation
  DType p_cast = DType::f64;  ///< format P is rounded to before P.V
  uint32_t exp_ulps = 0;      ///< error of its exp, in ulps of accum
  bool flush_to_zero = false; ///< subnormals flushed
  int64_t key_block = 0;      ///< online-softmax block size; 0 = one pass
};

/// Shape limits; 0 = no limit.
struct Limits {
  int64_t max_tq = 0, max_tk = 0, max_batch_heads = 0;
  int64_t dk_min = 0, dk_max = 0, dk_multiple = 0;
  bool dv_equals_dk = false;
};

/// Everything an implementation declares about itself.
struct ImplInfo {
  std::string name;  ///< unique, [a-z0-9_.-]+
  Kind kind = Kind::reference;
  uint32_t dtypes = 0;  ///< dtype_bit() per supported dtype
  Features features = 0;
  EmptyRowPolicy empty_rows = EmptyRowPolicy::error;
  PrecisionTraits precision;
  Limits limits;
  std::string description;  ///< one line for `attncheck list`
  /// For kind broken: the property made to catch it.
  std::string caught_by;
  /// For kind plugin: the path of the shared object it came from.
  std::string origin;

  bool has(Features f) const { return (features & f) == f; }
  bool supports(DType d) const { return (dtypes & dtype_bit(d)) != 0; }
};

/// Outcome of one call.
enum class Status { ok, error, unsupported };

/// What a forward pass returns. Arrays are contiguous; `out` holds the
/// output format's values as doubles.
struct ForwardResult {
  Status status = Status::ok;
  std::string error;            ///< message when status is error
  std::vector<double> out;      ///< [b][h][tq][dv]
  std::vector<double> weights;  ///< [b][h][tq][tk], empty if not returned
  std::vector<double> lse;      ///< [b][h][tq], empty if not returned

  static ForwardResult failure(std::string message) {
    ForwardResult r;
    r.status = Status::error;
    r.error = std::move(message);
    return r;
  }
  static ForwardResult unsupported() {
    ForwardResult r;
    r.status = Status::unsupported;
    return r;
  }
};

/// What a backward pass returns: gradients for the problem's dout, each
/// contiguous, in the output format's values as doubles.
struct BackwardResult {
  Status status = Status::ok;
  std::string error;       ///< message when status is error
  std::vector<double> dq;  ///< [b][h][tq][dk]
  std::vector<double> dk;  ///< [b][kv_h][tk][dk]
  std::vector<double> dv;  ///< [b][kv_h][tk][dv]

  static BackwardResult failure(std::string message) {
    BackwardResult r;
    r.status = Status::error;
    r.error = std::move(message);
    return r;
  }
  static BackwardResult unsupported() {
    BackwardResult r;
    r.status = Status::unsupported;
    return r;
  }
};

/// An attention implementation under test. The harness never calls one
/// instance from two threads at once, and only with problems inside its
/// declared features, dtypes and limits.
class Implementation {
 public:
  virtual ~Implementation() = default;

  /// The declaration.
  virtual const ImplInfo& info() const = 0;

  /// Computes out (and weights / lse where declared) for `p`.
  virtual ForwardResult forward(const Problem& p) const = 0;

  /// Computes dQ, dK, dV for p.dout (SPEC section 1). Called only for
  /// implementations declaring ATTNCHECK_FEATURE_BACKWARD.
  virtual BackwardResult backward(const Problem& p) const {
    (void)p;
    return BackwardResult::unsupported();
  }

  /// Instrumentation for cost claims (exercise 10): the number of score
  /// elements q_i . k_j the last forward() computed, summed over batch and
  /// heads, for implementations that count them; nullopt for the rest. A
  /// sliding-window kernel that only visits its window reports about
  /// B * H * tq * w, one that masks the full matrix B * H * tq * tk.
  virtual std::optional<int64_t> score_elements_computed() const { return std::nullopt; }
};

}  // namespace attncheck
