#pragma once
// Generators of whole problems within an implementation's declared features,
// dtypes and limits (SPEC section 3), for RapidCheck.

#include <limits>
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

/// The value regime of a draw at a real size (SPEC 3: "Values come from
/// regimes too, not only N(0, 1)"), simplest first (the size search drops
/// a regime to `plain` before it tries small integers):
/// - plain: normal-like, a 2^-6 grid or small integers per tensor;
/// - near_flat: q on a 2^-12 grid within 2^-6, so every score of a row is
///   within a few hundredths of the others: weights near 1/n, sums of n
///   terms near 1 that stagnate in a narrow accumulator over long rows;
/// - far_below: q > 0 and k < 0 elementwise, every score of every row
///   between about -230 and -100 (an exp without max subtraction, or a
///   running max that starts at 0, underflows);
/// - large: near-flat scores and v of one sign per column at the largest
///   magnitude whose unnormalised sum over tk keys stays within 1/4 of the
///   declared pv_accum format's range (GenSpec::pv_range) and v's and the
///   output's formats: an accumulator near its format's range;
/// - dominant_key: q > 0 elementwise and one key per (batch, K/V head)
///   whose score is about +96 to +125 over scores near 0 (its weight is 1
///   within e^-90; a max taken before it is seen overflows exp in f32).
enum class SizeRegime { plain, near_flat, far_below, large, dominant_key };
inline constexpr int kSizeRegimes = 5;

/// "near-flat scores", "scores far below 0", ...
const char* size_regime_name(SizeRegime r);

/// A real-size shape (SPEC 3 "Real sizes"): the dims of a problem and the
/// structure that matters at size. Values are drawn from one seed, each
/// element a function of the seed and its position, so a shorter tk or a
/// smaller dk keeps the other elements' values (the size search relies on
/// it).
struct SizeShape {
  int64_t batch = 1, heads = 1, kv_heads = 1, tq = 1, tk = 1, dk = 1, dv = 1;
  bool causal = false;
  Align align = Align::top_left;
  bool key_padding = false;  ///< a padded tail of keys per batch
  /// The rest of SPEC 3's covering set at size, each dropped by fit_shape
  /// where the implementation (or the property) does not declare it, and
  /// by the size search where the failure does not need it. A window in
  /// Problem's convention (-1 = unbounded on that side; a window when
  /// either is >= 0), its edges inside key blocks for most queries; an
  /// explicit random non-prefix mask (about one key in eight disallowed,
  /// per batch and head); an additive bias per head; a softcap (0 = none).
  int64_t window_left = -1, window_right = -1;
  bool explicit_mask = false;
  bool bias = false;
  double softcap = 0;
  /// Simpler values, for the search's last step (real_sizes.cpp): every
  /// element a small integer in [-3, 3] (exact sums), and q = 0 (every
  /// allowed key the same score: uniform weights).
  bool small_values = false, zero_queries = false;
  /// The value regime of its draws (ignored under small_values, which the
  /// search tries after `plain`).
  SizeRegime regime = SizeRegime::plain;
  /// Which version 2 parts a draw at this shape takes, where the spec
  /// allows them (problem_gen.cpp: SizeParts): the real-size phase numbers
  /// its shapes, so that one run's shapes cover the declared combinations,
  /// sinks, descales and layouts deterministically (SPEC 3), and the size
  /// search keeps the number, and with it the parts, while it shrinks.
  int64_t variant = 0;
  /// Sequences of a packed or paged draw at this shape; 0 = 5 to 16, by
  /// the variant. The size search shrinks it as it shrinks batch.
  int64_t sequences = 0;
  std::string label;         ///< what the shape is for ("tk 4097 decode, padded")

  /// Member by member (the size search asks whether a step changed the
  /// shape); the real-size phase drops duplicate shapes with their variant
  /// and label set aside (run/real_sizes.cpp).
  bool operator==(const SizeShape&) const = default;
  /// Cost of a case (SPEC 3): score elements B H tq tk times dk + dv.
  int64_t cost() const { return batch * heads * tq * tk * (dk + dv); }
  /// True when the shape has a window.
  bool windowed() const { return window_left >= 0 || window_right >= 0; }
  /// "B 1 H 8/2 tq 1 tk 4097 dk 128 dv 128 causal bottom-right padded",
  /// then ", window 100/-1", ", mask", ", bias", ", softcap 5" where present.
  std::string describe() const;
};

/// What a generated problem may use.
struct GenSpec {
  DType dtype = DType::f64;
  Features features = 0;  ///< the implementation's, minus what a property excludes
  Limits limits;
  int64_t max_t = 9;   ///< tq and tk range over [1, max_t]: past blocks of 4 and 8
  int64_t max_d = 5;   ///< dk and dv range over [1, max_d]
  int64_t max_bh = 4;  ///< batch and heads range over [1, max_bh] (4 heads: GQA groups of 2)
  /// Sequences of a packed or paged batch range over [1, max_sequences]
  /// (batch entries of a dense problem over [1, max_bh]): past 4, where a
  /// kernel that stages cu_seqlens or block-table rows for 4 sequences
  /// goes wrong.
  int64_t max_sequences = 16;
  bool require_causal = false;  ///< always causal (needs FEATURE_CAUSAL)
  bool require_window = false;  ///< always windowed (needs FEATURE_WINDOW)
  bool require_gqa = false;     ///< kv_heads < heads (needs FEATURE_GQA)
  /// When set, problem() draws exactly this shape (within the features and
  /// the require_* above) with seeded values: the real-size phase.
  std::optional<SizeShape> size;
  /// The format scores are stored in before softmax when it is not the
  /// accumulation format (PrecisionTraits::s_cast): q and k stay small
  /// enough that its rounding keeps scores within the first-order analysis.
  std::optional<DType> score_storage;
  /// The largest finite value of the narrowest format the declaration or
  /// any of its paths keeps the P.V accumulator in (pv_accum, SPEC 4.1):
  /// the large regime at size keeps unnormalised sums within it.
  double pv_range = std::numeric_limits<double>::max();
  /// The version 2 parts (ATTNCHECK_FEATURE_SINK, _PACKED, _PAGED_KV,
  /// _DESCALE) a property takes in its problems, among those declared;
  /// 0 = version 1 problems only (the default: a property opts in where its
  /// statement holds for them, SPEC 2).
  Features v2 = 0;
  /// Version 2 parts every problem has (a subset of v2): a sink, a packed
  /// or a paged layout, descales.
  Features v2_required = 0;
  /// The property takes version 2 problems (with_v2, with_sinks): the
  /// declared mixed format combinations are drawn then, whether or not
  /// the implementation declares any version 2 feature (v2 may be 0).
  bool v2_problems = false;
  /// The input formats a problem may take, each {q, kv, out = dtype}: the
  /// implementation's declared combinations with this output format (empty:
  /// q = kv = dtype). Each problem draws one; without v2_problems only
  /// {dtype, dtype, dtype} is drawn (where declared).
  std::vector<DTypeCombo> combos;
};

/// Every version 2 feature bit.
inline constexpr Features kV2Features = ATTNCHECK_FEATURE_SINK | ATTNCHECK_FEATURE_PACKED |
                                        ATTNCHECK_FEATURE_PAGED_KV | ATTNCHECK_FEATURE_DESCALE;

/// The spec with every version 2 part the implementation declares allowed
/// (spec.v2 = its declared v2 bits).
inline GenSpec with_v2(GenSpec spec) {
  spec.v2 = spec.features & kV2Features;
  spec.v2_problems = true;
  return spec;
}

/// The spec with a sink allowed where the implementation declares one and
/// no other version 2 part: the sink forms of the version 1 properties
/// (SPEC 2, "With a sink the version 1 properties read").
inline GenSpec with_sinks(GenSpec spec) {
  spec.v2 = spec.features & ATTNCHECK_FEATURE_SINK;
  spec.v2_problems = true;
  return spec;
}

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
/// fp8_edges (fp8 formats only): values at the format's ends, the
/// largest finite values the tensor's limit allows and the subnormals
/// (E4M3: 448 and 2^-9).
enum class Regime { small_int, dyadic, normal, large, huge, one_hot, all_equal, near_tied, fp8_edges };

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

/// The lengths real kernels branch at: 1..16 and 2^k - 1, 2^k, 2^k + 1 for
/// k = 4..14, ascending. The size search reports a failing length n with
/// n - 1 and every grid length below n passing.
std::vector<int64_t> length_grid();

/// Head dims real kernels specialise and the odd ones just past them
/// (SPEC 3): 1..8 and 16, 32, 40, 48, 59, 64, 65, 72, 80, 96, 111, 112,
/// 128, 129, 160, 192, 256, ascending.
std::vector<int64_t> head_dim_grid();

/// The cost cap of one real-size case under a profile (SPEC 3), in the
/// units of SizeShape::cost times the reference's weight (see fit_shape).
int64_t size_cost_cap(Profile profile);

/// The reference's cost per unit of SizeShape::cost, relative to the
/// enclosure's (1): the certified oracle judges f64 implementations (the
/// enclosure is too wide for them, SPEC 4) and costs this much more.
int64_t reference_weight(const ImplInfo& info);

/// The shape fitted to the spec: inside the implementation's limits and
/// features (dims clamped and rounded to the allowed multiples, GQA,
/// causal, padding, window, mask, bias and softcap dropped where not
/// declared), then shrunk until
/// cost() * reference_weight is within `cap`: batch first, then heads, tq,
/// dv and dk, tk last (never discarded).
SizeShape fit_shape(SizeShape s, const GenSpec& spec, int64_t cap, int64_t reference_weight);

/// The profile's fixed real-size shapes (SPEC 3's CI minimum: tk 63, 64,
/// 65, 257, 1025, 4097; dk 59, 128, 256, 192 with dv 128; GQA 8/2 and
/// 12/4; decode with key padding; chunked prefill bottom-right), unfitted.
/// The properties that judge a share of the list take it from these.
std::vector<SizeShape> fixed_real_shapes(Profile profile);

/// The structural covering set of SPEC 3, the same under every profile,
/// unfitted: causal top-left over several 64-query tiles and bottom-right,
/// windows with left edges inside key blocks, an explicit mask with key
/// padding, bias at an odd head dim past 64, softcap with no mask at all
/// over 64 queries and with causal, a mask and bias. The properties that
/// judge every fixed shape (MatchesOracle) judge these too.
std::vector<SizeShape> structural_real_shapes();

/// A random real-size shape (lengths from the grid or arbitrary up to 4096
/// under ci, 16384 under thorough; real head dims and head configurations;
/// batch up to 3; decode and chunked prefill among them; half of them
/// with one structure of the covering set: causal either way, a window,
/// an explicit mask, bias, softcap with or without a mask), unfitted.
SizeShape random_real_shape(Profile profile, uint64_t seed);

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
