#pragma once
// What the deliberately broken implementations share: a plain double
// computation of SPEC section 1 whose softmax step each of them replaces with
// its bug, so every file holds only the bug and its declaration.

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "../impl_common.h"
#include "attncheck/implementation.h"
#include "attncheck/problem.h"
#include "core/bugs.h"

namespace attncheck::impls::broken {

/// Scores of one (b, h) slice, row-major tq x tk, in double.
struct SliceScores {
  int64_t tq = 0, tk = 0;
  std::vector<double> s;    ///< scale * (q . k), softcapped, plus bias, at
                            ///< every key (allowed or not)
  std::vector<uint8_t> ok;  ///< 1 where Problem::allowed
};

/// Weights (row-major tq x tk) and lse (tq) of one slice.
struct SliceWeights {
  std::vector<double> a;
  std::vector<double> lse;
};

/// The softmax step of one slice: where the bugs live.
using SliceSoftmax = std::function<SliceWeights(const SliceScores&)>;

/// The softmax step of one row: fills `a` (tk entries, zero-initialised)
/// from the row's scores and allowed flags, returns lse. `i` is the query
/// index, for position-dependent bugs.
using RowSoftmax =
    std::function<double(std::span<const double> s, std::span<const uint8_t> ok,
                         int64_t i, std::span<double> a)>;

/// A slice softmax applying `row` to each row.
SliceSoftmax by_rows(RowSoftmax row);

/// The correct stable softmax over the allowed keys of a non-empty row
/// (max subtraction, std::exp, division); returns lse. Bugs that only
/// change the scores call it after changing them.
double stable_softmax(std::span<const double> s, std::span<const uint8_t> ok,
                      std::span<double> a);

// The steps of stable_softmax, for bugs that replace one of them.

/// The largest allowed score of a row, -inf when none is allowed.
double allowed_max(std::span<const double> s, std::span<const uint8_t> ok);

/// a_j = exp(s_j - m) at each allowed key; returns `start` plus the a_j,
/// added in key order.
double exp_and_sum(std::span<const double> s, std::span<const uint8_t> ok,
                   double m, std::span<double> a, double start = 0);

/// a_j /= l at each allowed key.
void normalise(std::span<const uint8_t> ok, double l, std::span<double> a);

/// The steps after the max in f32, as a float kernel computes them: a_j =
/// expf(s_j - m) at each allowed key, summed in key order in a float, then
/// a_j / l in float; returns m + log l. For the twins whose bug is the max
/// a float kernel starts from.
double f32_softmax_from_max(std::span<const double> s, std::span<const uint8_t> ok, float m,
                            std::span<double> a);

/// Masking by a score instead of by leaving keys out: stable_softmax over
/// every key, a disallowed key j with score fill(s_j).
double softmax_masked_by_fill(std::span<const double> s,
                              std::span<const uint8_t> ok, std::span<double> a,
                              const std::function<double(double)>& fill);

/// The online (flash-style) softmax of one row over blocks of keys, and the
/// steps the online bugs get wrong. With the defaults it is correct: per
/// block, the running max grows to the block's allowed max, what was
/// accumulated is rescaled by exp(m_old - m_new), the block's allowed keys
/// add exp(s_j - m_new), and a block while the max is still -inf is
/// skipped; the weights are divided by the sum at the end.
struct OnlineSoftmax {
  size_t block = 1;                ///< keys per block
  bool drop_partial_block = false; ///< the loop runs tk / block times,
                                   ///< rounding down
  bool rescale = true;  ///< rescale earlier weights and the sum when the
                        ///< max grows
  /// Skip a block while the running max is -inf. Without the guard every
  /// key of a block is computed as a tiled kernel does, a disallowed one
  /// as exp(-inf - m_new), and every weight is divided by the sum.
  bool guard_masked_blocks = true;
};

/// Fills `a` with the online softmax of the row; returns lse.
double online_softmax(std::span<const double> s, std::span<const uint8_t> ok,
                      std::span<double> a, const OnlineSoftmax& steps);

/// The correct softmax as a slice softmax, for bugs outside the softmax.
SliceSoftmax correct_softmax();

/// Whether key j is allowed for query i of slice (b, h): Problem::allowed,
/// or a bug's version of it.
using KeyRule =
    std::function<bool(int64_t b, int64_t h, int64_t i, int64_t j)>;

/// One of the constraints Problem::allowed AND-s (SPEC section 1).
enum class Constraint { key_valid, causal, window, mask };

/// Problem::allowed without `dropped`: the other constraints, for a key rule
/// that replaces one constraint with its buggy version.
bool allowed_except(const Problem& p, Constraint dropped, int64_t b, int64_t h,
                    int64_t i, int64_t j);

/// Runs the naive computation with `softmax` as its softmax step and
/// `scale` instead of p.scale: scores as the loop kernel computes them in
/// double, then out_i = sum_j a_ij v_j over every key whose weight is
/// nonzero (so a bug that gives masked keys weight shows in the output, and
/// NaN weights make NaN outputs). `softmax` is called once per (b, h) slice
/// in b-major order. The allowed flags come from `rule`, Problem::allowed
/// when it is empty. With `reject_empty`, a problem with an empty row (by
/// Problem::allowed, as a correct front end checks) gets the error of an
/// `error`-policy implementation first; a row that only `rule` empties
/// reaches `softmax` with no allowed key.
ForwardResult naive_forward(const Problem& p, double scale, bool reject_empty,
                            const SliceSoftmax& softmax,
                            const KeyRule& rule = {});

/// The error of a front end that checks for empty rows with a bug's key
/// rule instead of Problem::allowed: it names the first row (in b, h, i
/// order) `rule` leaves without keys, or with `all` every such row, in
/// first_empty_row_error's wording; nullopt when `rule` empties none.
/// Dense problems (no varlen), as the twins that use it declare.
std::optional<std::string> empty_rows_error_under(const Problem& p, const KeyRule& rule,
                                                  bool all = false);

/// What a kernel's load reads for lane t (0 <= t < the loaded head dim) of
/// row r of slice (a, c) of a [d0][d1][rows][dk] tensor x (p.q or p.k).
using LaneLoad = std::function<double(const Tensor& x, int64_t a, int64_t c, int64_t r,
                                      int64_t rows, int64_t dk, int64_t t)>;

/// `p` with Q and K replaced by what a kernel with buggy loads reads: head
/// dim `loaded_dk`, each lane from `load`. naive_forward of it with p.scale
/// computes that kernel's scores; V, masks and everything else are kept.
Problem with_loaded_qk(const Problem& p, int64_t loaded_dk, const LaneLoad& load);

/// Declaration of a broken implementation: f64 with loop_f64's traits,
/// `features` and `empty_rows` as given.
ImplInfo broken_info(std::string name, std::string caught_by,
                     std::string description, Features features = kLoopFeatures,
                     EmptyRowPolicy empty_rows = EmptyRowPolicy::error);

/// Declaration of a broken twin whose bug is in the bug catalogue
/// (core/bugs.h): broken_info with the twin's name and description from its
/// catalogue entry.
ImplInfo broken_info(bugs::Twin twin, std::string caught_by, Features features = kLoopFeatures,
                     EmptyRowPolicy empty_rows = EmptyRowPolicy::error);

}  // namespace attncheck::impls::broken
