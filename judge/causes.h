#pragma once
// Known causes: whether a failing call's output is explained by a bug class
// of the catalogue (core/bugs.h) that an expected-failures entry names as a
// known finding's cause (docs/cli.md "Expected failures by cause"). The
// rule is the diagnosis's (judge/diagnosis.h), element by element: a call
// is explained when every element outside its tolerance is one the cause
// predicts, so a second bug in the same output is never hidden by the
// first. The evidence tests of the classes that no alternative result can
// state (an accumulator that overflows or stagnates) are here too, beside
// the offence they read.

#include <string>
#include <string_view>
#include <vector>

#include "attncheck/implementation.h"
#include "attncheck/oracle.h"
#include "judge/diagnosis.h"

namespace attncheck {

/// The offending elements of `got` (status ok) for the dense problem p,
/// `correct` = oracle(p) (Offence, judge/diagnosis.h). The result points at
/// its arguments, which must outlive it.
/// `beyond_offends`: a failed case none of whose calls offends otherwise
/// (AsAccurateAsBaseline's judgement beyond the first-order analysis):
/// every inexact out element of a row beyond it offends. Never for a
/// diagnosis, where a correct output must get no name.
Offence offence(const Problem& p, const ForwardResult& got, const OracleResult& correct,
                const ImplInfo& info, bool beyond_offends = false);

/// How one call of a failed case reads against its correct result.
enum class CallReading {
  correct,      ///< within tolerance everywhere (or not judged: UNSUPPORTED)
  explained,    ///< offends, and one of the causes predicts every offending element
  unexplained,  ///< offends where none of the causes predicts it
};

struct CallVerdict {
  CallReading reading = CallReading::correct;
  size_t cause = 0;  ///< explained: the index in `causes` of the one that explains it
};

/// Reads one call: `got` for p (dense or varlen, each sequence read as its
/// dense problem) against the causes, bug class names of the catalogue, in
/// order. An error is correct where p has a row without allowed keys and
/// the implementation's policy is error, explained where a cause's
/// hypothesis explains the error (diagnose()'s error path), else
/// unexplained; a problem the oracle refuses is unexplained (judged by the
/// precision of the path the call took). Never throws.
CallVerdict read_call(const std::vector<std::string>& causes, const Problem& p,
                      const ForwardResult& got, const ImplInfo& info,
                      bool beyond_offends = false);

/// Whether `name` is a bug class the catalogue can give as a cause.
bool is_known_cause(const std::string& name);

/// Whether the cause `name` explains a call whose process died of `signal`
/// (ImplementationDied::signal, 0 when it did not die of one): only a
/// class about a death does (illegal_instruction: SIGILL); a class about an
/// output never explains a death, nor a death with another signal.
bool death_explained(std::string_view name, int signal);

/// The diagnosis of a death by `signal`: the name of the class that
/// explains it, or "" (most deaths, a segfault or an abort, have many
/// causes and get none).
std::string_view death_diagnosis(int signal);

// ---- The evidence tests (Hypothesis::evidence) ----

/// empty_row_nan: every offending element lies on a row without allowed
/// keys and is NaN there (lse: not finite), whatever the rest of the
/// problem's conditioning (its alternative result is not trusted on rows
/// beyond the first-order analysis, so it cannot say this).
bool nan_on_empty_rows(const Offence& o, const ImplInfo& info);

/// f16_pv_sum_overflow: V stored in f16; no weight or lse offends; every
/// offending out element is non-finite or beyond f16's largest finite value
/// (65504), at a column where the unnormalised sum of |v_j| exp(s_j - m),
/// taken over the allowed keys in order as an online softmax takes it (m the
/// running max) in one accumulator over the row or over any of the chunks
/// 1 to 16 threads split it into (ggml's split_kv), reaches the first value
/// f16 rounds to inf (65520) within its first-order rounding growth.
bool f16_pv_sum_overflows(const Offence& o, const ImplInfo& info);

/// f16_pv_sum_rounding and bf16_pv_sum_rounding: no weight or lse offends;
/// every offending out element is finite and within its tolerance plus what
/// one accumulator of that format can lose over the row (V stored in that
/// format; for bf16 only on a row beyond the declared first-order analysis,
/// which covers a declared bf16 accumulator below it): first order, each of the two
/// roundings per key (the update and the rescale) errs by at most u times
/// the exact partial sum of |v_j| exp(s_j - m) up to that key, and each
/// term once more, divided by the row's sum of exp(s_j - m).
bool pv_sum_rounding_explains(const Offence& o, DType accumulator);

/// stale_running_max: the implementation declares a key_block B; every
/// offending element (out, weights, lse) is NaN or inf, on a row whose
/// allowed keys in the block of its first allowed key have a max score more
/// than ln(max_finite) of the softmax format below the row's max: exp of a
/// later key's score shifted by that block's max overflows, as in a kernel
/// that never updates the running max after the first block.
bool stale_running_max_explains(const Offence& o, const ImplInfo& info);

}  // namespace attncheck
