#pragma once
// What an implementation under test is: its declaration (name, kind, dtypes,
// features, empty-row policy, precision traits, limits) and its forward pass,
// and the limits its calls get behind a worker process (IsolationOptions).

#include <algorithm>
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

/// Bits of PrecisionTraits::ftz_formats: which formats flush (results below
/// twice their smallest normal may become 0, SPEC 4).
inline constexpr uint32_t kFtzAccum = ATTNCHECK_FTZ_ACCUM;  ///< the accumulation format's
inline constexpr uint32_t kFtzPCast = ATTNCHECK_FTZ_P_CAST;  ///< P's, after its cast
inline constexpr uint32_t kFtzOut = ATTNCHECK_FTZ_OUT;      ///< the output's
inline constexpr uint32_t kFtzPvAccum = ATTNCHECK_FTZ_PV_ACCUM;  ///< pv_accum's, when declared

/// The arithmetic an implementation declares; tolerances derive from it.
/// The version 2 traits (s_cast, ftz_formats) and the stages (SPEC 4.1)
/// default to what a version 1 declaration means: every stage in accum, Q
/// not rounded.
struct PrecisionTraits {
  DType accum = DType::f64;   ///< format of score and sum accumulation
  DType p_cast = DType::f64;  ///< format P is rounded to before P.V
  uint32_t exp_ulps = 0;      ///< error of its exp, in ulps of softmax_accum
  bool flush_to_zero = false; ///< every format flushes (unless ftz_formats says which)
  int64_t key_block = 0;      ///< online-softmax block size; 0 = one pass
  /// Format S is rounded to before softmax; nullopt = not cast (the q.k
  /// sums' format: accum unless score_accum says otherwise).
  std::optional<DType> s_cast;
  /// kFtz* bits of the formats that flush; 0 = flush_to_zero
  /// decides for all of them.
  uint32_t ftz_formats = 0;
  /// Stages (SPEC 4.1). q_cast: the format Q (after its descale) is
  /// rounded to before q.k; nullopt = not rounded.
  std::optional<DType> q_cast;
  /// q_cast is the call's kv format instead (ATTNCHECK_Q_CAST_KV; none
  /// when that is f64, q8_0 when it is a block format). q_cast is then
  /// unset.
  bool q_cast_kv = false;
  /// The q.k sums; nullopt = accum.
  std::optional<DType> score_accum;
  /// Scale, max, exp, the sum l, the rescales; nullopt = accum.
  std::optional<DType> softmax_accum;
  /// The P.V accumulator, its rescales, the final division; nullopt = accum.
  std::optional<DType> pv_accum;

  /// The format S is rounded to before softmax.
  DType s_cast_format() const { return s_cast.value_or(score_format()); }
  DType score_format() const { return score_accum.value_or(accum); }
  DType softmax_format() const { return softmax_accum.value_or(accum); }
  DType pv_format() const { return pv_accum.value_or(accum); }
  /// The format Q is rounded to in a call whose K/V are in `kv`; nullopt
  /// when Q is not rounded.
  std::optional<DType> q_cast_format(DType kv) const {
    if (!q_cast_kv) return q_cast;
    if (kv == DType::f64) return std::nullopt;
    // ggml quantizes Q to q8_0 for q8_0 and q4_0 K alike (SPEC 1.2).
    return is_block_format(kv) ? DType::q8_0 : kv;
  }
  /// Whether the format of kFtz* bit `which` flushes. pv_accum flushes
  /// where kFtzPvAccum says when it is declared, else as accum does.
  bool flushes(uint32_t which) const {
    if (which == kFtzPvAccum && !pv_accum) which = kFtzAccum;
    return ftz_formats ? (ftz_formats & which) != 0 : flush_to_zero;
  }
  /// Whether any stage is declared.
  bool has_stages() const {
    return q_cast || q_cast_kv || score_accum || softmax_accum || pv_accum;
  }
};

/// One dispatch path of a kernel (SPEC 4.1): a named precision. A call
/// that names its path is judged by that path's precision.
struct ImplPath {
  std::string name;  ///< [a-z0-9_.-]+, unique among the implementation's paths
  PrecisionTraits precision;
};

/// The first component in which `tight` is tighter than `loose` (a smaller
/// unit roundoff in a stage, fewer exp ulps, fewer rescales, fewer flushing
/// formats), as a phrase; "" when `loose` is at least as loose in every
/// one (core/precision.cpp).
std::string tighter_component(const PrecisionTraits& loose, const PrecisionTraits& tight);

/// The loosest of two precisions, component by component, for calls whose
/// K/V are in `kv` (q_cast_kv is resolved to it): a precision at least as
/// loose as both, which judges two calls that took different paths
/// together (core/precision.cpp).
PrecisionTraits loosest(const PrecisionTraits& a, const PrecisionTraits& b, DType kv);

/// The tightest of two precisions, component by component, for calls whose
/// K/V are in `kv`: no call of either path is judged more tightly.
PrecisionTraits tightest(const PrecisionTraits& a, const PrecisionTraits& b, DType kv);

/// A combination of formats an implementation supports: q, k / v, and the
/// output (out, dout and the gradients).
struct DTypeCombo {
  DType q = DType::f64;
  DType kv = DType::f64;
  DType out = DType::f64;
  friend bool operator==(const DTypeCombo&, const DTypeCombo&) = default;
};

/// Parses SPEC 5.2's spelling of a combination: one output format (f64,
/// f32, bf16, f16: q = kv = out) or "q=F,kv=F,out=F" with every part once
/// (any order), q and kv any format, out an output format. Throws
/// InputError naming the text (core/combo.cpp).
DTypeCombo parse_dtype_combo(std::string_view text);

/// The spelling parse_dtype_combo reads: the single name when q = kv = out,
/// else "q=F,kv=F,out=F".
std::string combo_name(const DTypeCombo& c);

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
  uint32_t dtypes = 0;  ///< dtype_bit() of each d with q = kv = out = d supported
  Features features = 0;
  EmptyRowPolicy empty_rows = EmptyRowPolicy::error;
  PrecisionTraits precision;
  Limits limits;
  std::string description;  ///< one line for `attncheck list`
  /// For kind broken: the property made to catch it.
  std::string caught_by;
  /// For kind plugin: the path of the shared object it came from.
  std::string origin;
  /// Every supported combination of formats; empty: {d, d, d} for each
  /// dtypes bit, as before version 2.
  std::vector<DTypeCombo> combos;
  /// The dispatch paths (SPEC 4.1); `precision` is at least as loose as
  /// each of theirs. Empty: one arithmetic.
  std::vector<ImplPath> paths;
  /// The threads one call keeps busy (its own pool: ggml's _mt adapters
  /// use 3). `check --jobs N` counts them against N, so N processes never
  /// run more than N threads of implementations at once.
  uint32_t threads = 1;

  bool has(Features f) const { return (features & f) == f; }
  bool supports(DType d) const { return (dtypes & dtype_bit(d)) != 0; }
  /// Whether some declared combination has output format d (the formats a
  /// run iterates: each run draws its inputs' formats among them).
  bool supports_output(DType d) const {
    if (combos.empty()) return supports(d);
    return std::any_of(combos.begin(), combos.end(), [d](const DTypeCombo& c) { return c.out == d; });
  }
  /// The declared combinations whose output format is d ({d, d, d} when
  /// combos is empty and d is a dtypes bit; none otherwise).
  std::vector<DTypeCombo> combos_with_output(DType d) const {
    if (combos.empty()) return supports(d) ? std::vector<DTypeCombo>{{d, d, d}} : std::vector<DTypeCombo>{};
    std::vector<DTypeCombo> v;
    for (const DTypeCombo& c : combos)
      if (c.out == d) v.push_back(c);
    return v;
  }
  /// Whether the combination of formats c is declared.
  bool supports(const DTypeCombo& c) const {
    if (combos.empty()) return c.q == c.out && c.kv == c.out && supports(c.out);
    return std::find(combos.begin(), combos.end(), c) != combos.end();
  }
};

/// The precision a call that took path `path` (ForwardResult::path) is
/// judged by: that path's, or the declaration's own for -1 (or an index
/// the declaration does not have, which the loaders refuse before).
inline const PrecisionTraits& precision_of(const ImplInfo& info, int path) {
  if (path >= 0 && static_cast<size_t>(path) < info.paths.size())
    return info.paths[static_cast<size_t>(path)].precision;
  return info.precision;
}

/// The formats a problem uses: {q, k / v, output}.
inline DTypeCombo combo_of(const Problem& p) {
  return {p.q_dtype.value_or(p.dtype), p.kv_dtype.value_or(p.dtype), p.dtype};
}

/// The first serving part of `p` that `info` does not declare, as a
/// phrase naming the feature bit or the formats ("" when it declares all
/// of them). Version 1 parts (masks, strides, limits, ...) are not judged
/// here. Whoever hands a problem to an implementation checks this first:
/// the harness never asks for a serving feature an implementation did
/// not declare.
inline std::string undeclared_serving_part(const ImplInfo& info, const Problem& p) {
  const std::pair<Features, const char*> bits[] = {
      {ATTNCHECK_FEATURE_SINK, "ATTNCHECK_FEATURE_SINK (a sink)"},
      {ATTNCHECK_FEATURE_PACKED, "ATTNCHECK_FEATURE_PACKED (packed sequences)"},
      {ATTNCHECK_FEATURE_PAGED_KV, "ATTNCHECK_FEATURE_PAGED_KV (paged keys and values)"},
      {ATTNCHECK_FEATURE_DESCALE, "ATTNCHECK_FEATURE_DESCALE (descales)"},
  };
  const Features needed = p.serving_features();
  for (const auto& [bit, phrase] : bits) {
    if ((needed & bit) && !info.has(bit)) return phrase;
  }
  const DTypeCombo c = combo_of(p);
  if (!info.supports(c)) {
    return std::string("the formats q ") + std::string(dtype_name(c.q)) + ", k/v " +
           std::string(dtype_name(c.kv)) + ", out " + std::string(dtype_name(c.out));
  }
  return "";
}

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
  /// The index into info().paths of the path this call took; -1 = not
  /// said (judged by info().precision).
  int path = -1;

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
  std::vector<double> dsink;  ///< [heads] when the problem has a sink, else empty

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

// ---- Isolation (SPEC 5.2 --timeout-ms, --memory-limit-mb) ----
// The limits an implementation's calls get when a session runs it behind a
// worker process (SessionConfig::isolation): the options a library
// consumer sets; the workers themselves are the host room's
// (host/isolation.h).

/// Default per-call limit of CPU time (--timeout-ms): generous, as the
/// properties' problems take a correct kernel well under a millisecond,
/// and measured in CPU time, so a loaded machine or a sanitizer build (2-5x
/// slower) does not turn a slow call into a false hang.
inline constexpr int64_t kDefaultCallTimeoutMs = 10000;

/// IsolationOptions::memory_limit_mb's default: half of the machine's
/// physical memory, so that one runaway worker never reaches the OOM killer
/// while a real-size problem (at most a few GiB with the harness's own
/// copy) still fits.
inline constexpr int64_t kMemoryLimitHalfOfMachine = -1;

/// Workers for every implementation of a session (SessionConfig::isolation).
struct IsolationOptions {
  /// CPU time per call; loading a plugin in a worker may take
  /// kWallTimeoutFactor times this in wall time (100 s by default: a plugin
  /// that links a large framework, LibTorch, takes seconds to load).
  int64_t timeout_ms = kDefaultCallTimeoutMs;
  /// Memory a worker may allocate (--memory-limit-mb), in MiB:
  /// kMemoryLimitHalfOfMachine for half of this machine's physical memory,
  /// 0 for no limit. A worker past it cannot allocate more (RLIMIT_DATA:
  /// heap, anonymous mappings, thread stacks): the call fails, reported as
  /// out of memory, and the machine's other processes are untouched. Not
  /// applied in sanitizer builds, whose shadow memory it would count.
  int64_t memory_limit_mb = kMemoryLimitHalfOfMachine;
};

/// Sequence b's part of a forward result for p, laid out as the result for
/// sequence_problem(p, b): out [1][heads][tq_b][dv], lse [1][heads][tq_b],
/// weights [1][heads][tq_b][tk_b] (when returned; one zero key for a
/// sequence without keys, as sequence_problem has). A failed result is
/// returned as it is.
ForwardResult sequence_result(const Problem& p, const ForwardResult& r, int64_t b);

/// Sequence b's part of a backward result for p: dq, and dk / dv of its
/// keys (packed keys; dense ones are batch entry b). dsink is a sum over
/// every sequence and is left empty.
BackwardResult sequence_result(const Problem& p, const BackwardResult& r, int64_t b);

}  // namespace attncheck
