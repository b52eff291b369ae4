#pragma once
// The real-size model of SPEC 3: a real-size shape and its value regimes,
// the grids the size search walks, the cost cap, the profiles' fixed and
// structural shapes and random ones, and fitting a shape to an
// implementation. The draw of a problem at a shape is real_size_draw.cpp's.

#include <cstdint>
#include <string>
#include <vector>

#include "attncheck/implementation.h"
#include "attncheck/properties.h"

namespace attncheck::gen {

struct GenSpec;

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
  /// Which serving parts a draw at this shape takes, where the spec
  /// allows them (real_size_draw.cpp: size_plan): the real-size phase numbers
  /// its shapes, so that one run's shapes cover the declared combinations,
  /// sinks, descales and layouts deterministically (SPEC 3), and the size
  /// search keeps the number, and with it the parts, while it shrinks.
  int64_t variant = 0;
  /// A sink where the property and declaration allow one: -1 = by the
  /// variant (odd variants), 0 = none, 1 = always. The covering set's
  /// shapes that need a sink (a window that skips key block 0 with and
  /// without one) set it, so that which shape takes one does not depend on
  /// where fitting and duplicates leave it in the list.
  int sink = -1;
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

/// The structural features of the covering rule (issue 51), as bits of a
/// set: each a factor that is on or off in a shape.
enum CoverFactor : uint32_t {
  kCoverCausal = 1u << 0,
  kCoverWindow = 1u << 1,
  kCoverMask = 1u << 2,
  kCoverKeyPadding = 1u << 3,
  kCoverBias = 1u << 4,
  kCoverSoftcap = 1u << 5,
  kCoverSink = 1u << 6,
  kCoverGqa = 1u << 7,
};
inline constexpr int kCoverFactors = 8;

/// "causal", "window", "mask", "key padding", "bias", "softcap", "sink",
/// "GQA": factor k (bit 1 << k).
const char* cover_factor_name(int k);

/// The factors a fitted shape has on (its sink: set, or by its variant as
/// real_size_draw.cpp takes one where the spec allows it).
uint32_t cover_factors(const SizeShape& s, const GenSpec& spec);

/// The factors the spec lets a real-size shape turn on.
uint32_t declared_cover_factors(const GenSpec& spec);

/// The covering rule: for every pair of declared factors, each of its four
/// on/off combinations in some shape of the run (strength-2 coverage),
/// given the fitted shapes already planned. Returns the shapes to add
/// (unfitted, greedy: each the factor set covering the most combinations
/// still missing, fitted to see what it covers), numbered from
/// `first_variant` in turn, at most `max_shapes`. Empty when the plan
/// covers every pair already.
std::vector<SizeShape> covering_shapes(const std::vector<SizeShape>& planned, const GenSpec& spec,
                                       int64_t cap, int64_t reference_weight,
                                       int64_t first_variant, size_t max_shapes = 8);

/// The pair combinations the shapes leave uncovered ("mask on, sink off"),
/// for a test and for the run's trace.
std::vector<std::string> uncovered_pairs(const std::vector<SizeShape>& shapes,
                                         const GenSpec& spec);

/// A random real-size shape (lengths from the grid or arbitrary up to 4096
/// under ci, 16384 under thorough; real head dims and head configurations;
/// batch up to 3; decode and chunked prefill among them; half of them
/// with one structure of the covering set: causal either way, a window,
/// an explicit mask, bias, softcap with or without a mask), unfitted.
SizeShape random_real_shape(Profile profile, uint64_t seed);

}  // namespace attncheck::gen
