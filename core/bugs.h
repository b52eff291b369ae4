#pragma once
// The bug catalogue: the bug classes attncheck knows by name, defined once
// for the two rooms that speak of them. The diagnosis (judge/hypotheses.cpp)
// has one hypothesis per class, named as here, and phrases its match with the
// class's diagnosis line. The deliberately broken implementations
// (impls/broken/) that have a catalogued bug, its broken twins, take their
// name and description (what they do wrong, as `list` shows it) from their
// entry here. A class may have several twins (the same bug in the output, or
// in a front end's empty-row check) or none (the diagnosis tests make one).
// tests/judge/test_diagnosis.cpp checks that the two rooms and the catalogue
// agree.

#include <span>
#include <string_view>

namespace attncheck::bugs {

// X(NAME, DIAGNOSIS), in the order the report lists them: NAME as the JSON
// report's "diagnosis" lists it, DIAGNOSIS the report's line after
// "diagnosis: " (what the output matches, then the suspected slip).
#define ATTNCHECK_BUG_CLASSES(X) \
  X(scale_one, \
    "output matches attention with scale = 1 (missing 1/sqrt(dk)?)") \
  X(scale_over_dk, \
    "output matches attention with scale = 1/dk (1/dk in place of " \
    "1/sqrt(dk)?)") \
  X(scale_over_sqrt_dv, \
    "output matches attention with scale = 1/sqrt(dv) (the value dim in place " \
    "of dk?)") \
  X(scale_argument_ignored, \
    "output matches attention with the default scale 1/sqrt(dk) (the scale " \
    "argument ignored?)") \
  X(softmax_query_axis, \
    "output matches a softmax over the query axis (each key's column " \
    "normalised instead of each query's row?)") \
  X(alignment_swapped, \
    "output matches the causal mask and window with the other alignment " \
    "(top-left and bottom-right swapped?)") \
  X(causal_strict, \
    "output matches a strict causal mask j < p_i (the diagonal masked?)") \
  X(causal_off_by_one, \
    "output matches a causal mask allowing j <= p_i + 1 (causal mask off by " \
    "one?)") \
  X(window_left_edge_excluded, \
    "output matches a window without its left edge, p_i - left < j (window " \
    "off by one?)") \
  X(window_right_off_by_one, \
    "output matches a window reaching one key further right, j <= p_i + right " \
    "+ 1 (window off by one?)") \
  X(window_right_ignored, \
    "output matches the window without its right bound (right bound ignored?)") \
  X(mask_polarity_inverted, \
    "output matches the explicit mask inverted (1 read as masked, 0 as " \
    "allowed?)") \
  X(key_padding_on_queries, \
    "output matches key padding applied to the queries (key_valid[b][i] " \
    "masking query rows instead of keys?)") \
  X(key_padding_batch0, \
    "output matches batch 0's key padding used for every batch entry (batch " \
    "index of key_valid ignored?)") \
  X(key_padding_ignored, \
    "output matches attention without the key padding (key_valid never read?)") \
  X(kv_head_modulo, \
    "output matches GQA with query head h reading K/V head h % kv_heads " \
    "(instead of h / (heads / kv_heads)?)") \
  X(bias_ignored, \
    "output matches attention without the bias (bias ignored?)") \
  X(softcap_ignored, \
    "output matches attention without the softcap (softcap ignored?)") \
  X(finite_mask_fill, \
    "output matches masking with score -20 at disallowed keys (a finite fill " \
    "in place of -inf?)") \
  X(mask_fill_1e9, \
    "output matches masking by adding -1e9 to disallowed scores (an additive " \
    "mask in place of -inf?)") \
  X(softcap_without_division, \
    "output matches the softcap written as c * tanh(s) (the division by c " \
    "left out?)") \
  X(empty_row_nan, \
    "output is NaN exactly on the rows without allowed keys (softmax over all " \
    "-inf scores, the empty-row policy not applied?)") \
  X(undeclared_flush, \
    "output fits the declared arithmetic with flush-to-zero but not without " \
    "it (results below twice the smallest normal flushed, not declared?)") \
  X(small_exps_dropped, \
    "output matches attention with the weights of keys far below the row's " \
    "max dropped (an exp that returns 0 early, far above the format's " \
    "underflow?)") \
  X(computed_in_f32, \
    "output fits f32 arithmetic's tolerance but not the declared f64 one " \
    "(computed in f32?)") \
  X(computed_in_bf16, \
    "output fits bf16 arithmetic's tolerance but not the declared f32 one " \
    "(computed in bf16?)") \
  X(q_rounded_to_f16, \
    "output matches attention with Q rounded to f16 (Q rounded to K's f16 " \
    "before q.k without declaring q_cast?)") \
  X(f16_pv_sum_overflow, \
    "output is inf or beyond f16's range only where the unnormalised sum of " \
    "exp(s_j - m) v_j leaves f16's range on an f16-V path (the P.V sum kept " \
    "in an f16 accumulator?)") \
  X(f16_pv_sum_rounding, \
    "output errs by no more than one f16 accumulator of the P.V sum over the " \
    "row can lose (the P.V sum kept in f16, stagnating over long rows?)") \
  X(bf16_pv_sum_rounding, \
    "output errs by no more than one bf16 accumulator of the P.V sum over " \
    "the row can lose (the P.V sum kept in bf16, stagnating over long rows?)") \
  X(tiled_softcap_padding, \
    "output matches attention where the last 64-key tile's missing keys " \
    "take score -softcap and the previous tile's values (the key padding " \
    "softcapped into keys?)") \
  X(stale_running_max, \
    "output is NaN or inf only on rows where a key past the first key block " \
    "scores more than ln(the largest finite value) of the softmax format " \
    "above that block's max (the row max taken from the first block only, " \
    "the online rescale skipped?)") \
  X(q8_scale_per_row, \
    "output matches attention with each Q row quantized to q8_0 under one " \
    "scale for the whole row (its largest magnitude / 127) instead of one " \
    "per block of 32 (the block scale computed once per row?)") \
  X(sink_lost_past_first_block, \
    "output matches attention without the sink on exactly the rows whose " \
    "first allowed key lies past the first key block (the sink folded into " \
    "block 0's running state, lost when a window lets the kernel skip that " \
    "block?)") \
  X(illegal_instruction, \
    "the implementation's process died of SIGILL, an instruction this CPU " \
    "or its operating system does not allow (a dispatch or a JIT that chose " \
    "an ISA extension, such as AMX, wrongly?)")

// X(TWIN, BUG, WHAT): the broken implementation TWIN (its registered name),
// the class BUG of its bug, and WHAT it does wrong.
#define ATTNCHECK_BROKEN_TWINS(X) \
  X(broken_unscaled, scale_one, \
    "ignores the scale and uses 1 (missing 1/sqrt(dk))") \
  X(broken_scale_over_dk, scale_over_dk, \
    "uses 1/dk instead of the scale 1/sqrt(dk)") \
  X(broken_softmax_query_axis, softmax_query_axis, \
    "softmax normalised over the query axis (columns) instead of the keys") \
  X(broken_alignment_swapped, alignment_swapped, \
    "causal mask and window use bottom-right alignment when asked for " \
    "top-left and vice versa") \
  X(broken_alignment_swapped_rejects, alignment_swapped, \
    "causal mask and window with the other alignment, in the empty-row check " \
    "too (which lists every empty row): errors on queries that see keys") \
  X(broken_causal_strict_rejects, causal_strict, \
    "a strict causal mask j < p_i, checked for empty rows with the same rule: " \
    "an error on a query whose only key is the diagonal one") \
  X(broken_causal_off_by_one, causal_off_by_one, \
    "the causal mask allows j <= p_i + 1, one future key per query") \
  X(broken_window_off_by_one, window_left_edge_excluded, \
    "the window excludes its left edge (p_i - left < j), so every query loses " \
    "the oldest key of its window") \
  X(broken_window_strict_rejects, window_left_edge_excluded, \
    "the window's left edge excluded (p_i - left < j), checked for empty rows " \
    "with the same rule: an error on a query whose only key is the left edge") \
  X(broken_mask_polarity_inverted, mask_polarity_inverted, \
    "the explicit mask is read with 0 = allowed and 1 = masked") \
  X(broken_key_padding_on_queries, key_padding_on_queries, \
    "key_valid[b][i] masks query rows instead of keys, so padded keys take " \
    "weight and some query rows are zero") \
  X(broken_query_padding_rejects, key_padding_on_queries, \
    "key_valid[b][i] masks query rows instead of keys, in the empty-row check " \
    "too: an error on a query whose index is a padded key's") \
  X(broken_decode_ignores_padding, key_padding_ignored, \
    "decode path (tq = 1, tk >= 256) that ignores key padding (key_valid)") \
  X(broken_wrong_kv_head, kv_head_modulo, \
    "GQA query head h reads K/V head h % kv_heads instead of h / (heads / " \
    "kv_heads)") \
  X(broken_gqa_big_groups, kv_head_modulo, \
    "GQA groups larger than 2 with several K/V heads read K/V head h % " \
    "kv_heads instead of h / (heads / kv_heads)") \
  X(broken_gqa_group8, kv_head_modulo, \
    "GQA groups of 8 or more with several K/V heads (16/2, 64/8) read K/V " \
    "head h % kv_heads instead of h / (heads / kv_heads)") \
  X(broken_finite_mask_fill, finite_mask_fill, \
    "disallowed scores filled with -20 instead of -inf, so masked keys get " \
    "nonzero weight") \
  X(broken_mask_fill_1e9, mask_fill_1e9, \
    "masks by adding -1e9 to disallowed scores, so a masked key with a score " \
    "near 1e9 or above still gets weight") \
  X(broken_empty_row_uniform, mask_fill_1e9, \
    "declares the zero policy, but masks with -1e9 so fully masked rows get " \
    "uniform weights and the mean of the values") \
  X(broken_empty_row_nan, empty_row_nan, \
    "declares the error policy, but fully masked rows silently return NaN " \
    "(softmax over all -inf scores)") \
  X(broken_exp_flushes_tiny, small_exps_dropped, \
    "its exp returns 0 below 2^-100 (e^-69.3) while declaring no flush: " \
    "weights of keys 70 or more below the row's max vanish") \
  X(broken_f64_in_f32, computed_in_f32, \
    "declares f64 and f64 accumulation but computes everything in float") \
  X(broken_q_f16_undeclared, q_rounded_to_f16, \
    "rounds Q to f16 before q.k (K/V in f16) but declares no q_cast") \
  X(broken_q8_scale_per_row, q8_scale_per_row, \
    "quant_kv_q8_f32 quantizing each Q row to q8_0 with one scale for the " \
    "row (its largest magnitude / 127) instead of one per block of 32") \
  X(broken_sink_lost_past_window, sink_lost_past_first_block, \
    "paged_online_f32 that adds the sink in key block 0's state, so rows " \
    "whose window skips that block lose their sink")

/// A bug class of the catalogue.
enum class Bug {
#define ATTNCHECK_BUG_ENUM(name, diagnosis) name,
  ATTNCHECK_BUG_CLASSES(ATTNCHECK_BUG_ENUM)
#undef ATTNCHECK_BUG_ENUM
};

/// A broken twin of the catalogue.
enum class Twin {
#define ATTNCHECK_TWIN_ENUM(twin, bug, what) twin,
  ATTNCHECK_BROKEN_TWINS(ATTNCHECK_TWIN_ENUM)
#undef ATTNCHECK_TWIN_ENUM
};

/// One bug class.
struct BugClass {
  Bug id;
  std::string_view name;       ///< listed in the JSON report's "diagnosis"
  std::string_view diagnosis;  ///< the report's line after "diagnosis: "
};

/// One broken implementation whose bug is catalogued.
struct BrokenTwin {
  Twin id;
  std::string_view name;  ///< the registered name, "broken_..."
  Bug bug;                ///< the class of its bug
  std::string_view what;  ///< what it does wrong: its ImplInfo::description
};

/// Every bug class, in report order.
std::span<const BugClass> bug_classes();

/// Every broken twin, grouped by class in report order.
std::span<const BrokenTwin> broken_twins();

/// The entry of a bug class.
const BugClass& bug_class(Bug bug);

/// The entry of a broken twin.
const BrokenTwin& broken_twin(Twin twin);

/// The bug class with this name, or nullptr.
const BugClass* find_bug_class(std::string_view name);

/// The broken twin with this name, or nullptr (also for a broken
/// implementation whose bug is not catalogued).
const BrokenTwin* find_broken_twin(std::string_view name);

}  // namespace attncheck::bugs
