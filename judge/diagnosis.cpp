// The matching engine: the test of every hypothesis (judge/hypotheses.cpp)
// against an output, an error, and a failure with its confirming problems.
//
// A hypothesis H explains an output o^ of problem p when
//   (1) o^ matches H's result r_H element by element within the tolerance
//       of SPEC 4 computed for H's result (the implementation's traits, or
//       the lower precision H supposes), and
//   (2) r_H is told apart from the correct result r: at some element of a
//       row that is well-conditioned for p, |r_H - r| exceeds the sum of the
//       two tolerances, so no output lies within both. (Precision
//       hypotheses keep r_H = r and need o^ to fail the declared tolerance
//       instead.)
// A correct implementation is within its tolerance of r everywhere, so by
// (2) it is never within H's tolerance of r_H at the telling element: it is
// never given a diagnosis, and a hypothesis that changes nothing on this
// problem (alignment swapped when tq == tk) is never reported.
//
// A reported error is explained by the hypotheses under which the rows the
// message names are empty (diagnose_error), and the runner keeps a name
// only when a second failing problem confirms it (the FailureRecord
// overload of diagnose_failure).

#include "judge/diagnosis.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <exception>
#include <random>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "judge/causes.h"
#include "judge/compare.h"
#include "judge/tolerance.h"
#include "core/transforms.h"

namespace attncheck {
namespace {

// A NaN matches only an alternative's NaN (empty_row_nan predicts them); the
// correct result never has one.
bool within(double got, double expected, double tol) {
  return got == expected || (std::isnan(got) && std::isnan(expected)) ||
         std::fabs(got - expected) <= tol;
}

// One array of an output against a hypothesis.
struct ArrayCheck {
  const std::vector<double>& got;
  const std::vector<double>& correct;
  const std::vector<double>& correct_tol;
  const std::vector<double>& alternative;
  const std::vector<double>& alternative_tol;
  size_t per_row;  // elements per row (b, h, i), for the row's conditioning
};

struct Verdict {
  bool matches = true;      // every element within the alternative's tolerance
  bool told_apart = false;  // condition (2) of the header comment
};

void judge(const ArrayCheck& a, const std::vector<uint8_t>& ill_conditioned, bool same_values,
           Verdict& v) {
  for (size_t k = 0; k < a.got.size(); ++k) {
    if (!within(a.got[k], a.alternative[k], a.alternative_tol[k])) {
      v.matches = false;
      return;
    }
    // The correct tolerance of an ill-conditioned row is not trusted (and
    // not computed): such a row can not tell anything apart.
    if (ill_conditioned[k / a.per_row]) continue;
    const bool apart = same_values ? !within(a.got[k], a.correct[k], a.correct_tol[k])
                                   : a.alternative[k] != a.correct[k] &&
                                         !(std::fabs(a.alternative[k] - a.correct[k]) <=
                                           pairwise_tolerance(a.alternative_tol[k],
                                                              a.correct_tol[k]));
    if (apart) v.told_apart = true;
  }
}


// An error reported on rows that have allowed keys, explained by the
// hypotheses under which exactly those rows are empty: the reported rows R
// (named in the message) are rows H empties, at least one of them has an
// allowed key (else the error is the right answer), and R is every row H
// empties, or the first of them in (b, h, i) order (a front end that stops
// at the first empty row it finds, as attncheck's own do). Whether a row
// is empty depends on the masks alone, so no tolerance takes part.
std::vector<std::string> diagnose_error(const Problem& p, const std::string& message,
                                        const ImplInfo& info) {
  std::vector<std::string> names;
  const std::vector<std::array<int64_t, 3>> reported = reported_rows(message, p);
  if (reported.empty()) return names;
  const OracleResult correct = oracle(p);
  const auto row_of = [&](const std::array<int64_t, 3>& r) {
    return row_index(p, r[0], r[1], r[2]);
  };
  if (std::all_of(reported.begin(), reported.end(),
                  [&](const auto& r) { return correct.row_empty[row_of(r)] != 0; })) {
    return names;
  }
  const auto explains = [&](const Alternative& alt) {
    const std::vector<uint8_t>& empty = alt.result.row_empty;
    if (empty.size() != correct.row_empty.size()) return false;
    if (!std::all_of(reported.begin(), reported.end(),
                     [&](const auto& r) { return empty[row_of(r)] != 0; })) {
      return false;
    }
    std::vector<size_t> all, named;
    for (size_t row = 0; row < empty.size(); ++row)
      if (empty[row]) all.push_back(row);
    for (const auto& r : reported) named.push_back(row_of(r));
    std::sort(named.begin(), named.end());
    return named == all || (reported.size() == 1 && row_of(reported[0]) == all.front());
  };
  for (const Hypothesis& h : hypothesis_table()) {
    const std::vector<Alternative> alts = alternatives_of(h, p, correct, info.precision);
    if (std::any_of(alts.begin(), alts.end(), explains)) names.push_back(h.name);
  }
  return names;
}

}  // namespace

// The alternatives of hypothesis h for p; none where it can not be computed.
std::vector<Alternative> alternatives_of(const Hypothesis& h, const Problem& p,
                                         const OracleResult& correct,
                                         const PrecisionTraits& declared) {
  std::vector<Alternative> alts;
  try {
    if (h.candidates) {
      alts = h.candidates(p, correct, declared);
    } else if (auto alt = h.alternative(p, correct, declared)) {
      alts.push_back(std::move(*alt));
    }
  } catch (const std::exception&) {
    alts.clear();  // a problem the hypothesis can not be computed for explains nothing
  }
  return alts;
}

bool alternative_explains(const Alternative& alt, const Problem& p, const ForwardResult& got,
                          const OracleResult& correct, const Tolerances& tol,
                          const ImplInfo& info) {
  const Tolerances alt_tol = tolerances(alt.problem, alt.result, alt.traits);
  // Beyond the first-order analysis the alternative's tolerance is not
  // trusted: no claim either way.
  if (alt_tol.ill_conditioned_rows > 0) return false;
  const bool weights =
      info.has(ATTNCHECK_FEATURE_WEIGHTS) && got.weights.size() == correct.weights.size() &&
      alt.result.weights.size() == correct.weights.size();
  const bool lse = info.has(ATTNCHECK_FEATURE_LSE) && got.lse.size() == correct.lse.size();
  // Values the oracle reports uncertified are still within an ulp of the
  // exact ones, far inside any tolerance: good enough to name a suspect.
  const OracleResult& r = alt.result;
  if (got.out.size() != r.out.size()) return false;
  Verdict v;
  judge({got.out, correct.out, tol.out, r.out, alt_tol.out, static_cast<size_t>(p.dv)},
        tol.ill_conditioned, alt.same_values, v);
  if (v.matches && weights) {
    judge({got.weights, correct.weights, tol.weights, r.weights, alt_tol.weights,
           static_cast<size_t>(p.tk)},
          tol.ill_conditioned, alt.same_values, v);
  }
  if (v.matches && lse && alt.predicts_lse) {
    judge({got.lse, correct.lse, tol.lse, r.lse, alt_tol.lse, 1}, tol.ill_conditioned,
          alt.same_values, v);
  }
  return v.matches && v.told_apart;
}

std::vector<std::array<int64_t, 3>> reported_rows(std::string_view message, const Problem& p) {
  // "b=1, h=0, i=2" (attncheck's own front ends) or "[1, 0, 2]" (the JSON
  // report's empty_rows), spaces free around '=' and ','.
  static const std::regex named(R"(b\s*=\s*(\d+)\s*,\s*h\s*=\s*(\d+)\s*,\s*i\s*=\s*(\d+))");
  static const std::regex bracketed(R"(\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\])");
  std::vector<std::array<int64_t, 3>> rows;
  const std::string text(message);
  for (const std::regex* re : {&named, &bracketed}) {
    for (auto it = std::sregex_iterator(text.begin(), text.end(), *re);
         it != std::sregex_iterator(); ++it) {
      std::array<int64_t, 3> r{};
      bool fits = true;
      for (size_t k = 0; k < 3; ++k) {
        // More than 9 digits is no row of a problem that fits in memory.
        const std::string digits = (*it)[k + 1].str();
        fits = fits && digits.size() <= 9;
        if (fits) r[k] = std::stoll(digits);
      }
      if (!fits || r[0] >= p.batch || r[1] >= p.heads || r[2] >= p.tq) continue;
      if (std::find(rows.begin(), rows.end(), r) == rows.end()) rows.push_back(r);
    }
  }
  return rows;
}

std::vector<std::string> diagnose(const Problem& p, const ForwardResult& got,
                                  const ImplInfo& info) {
  std::vector<std::string> names;
  // The error path knows dense problems without sinks only (a packed
  // problem's rows are numbered per sequence, a sink fills every row).
  if (got.status == Status::error && !p.varlen() && p.sink.empty()) {
    return diagnose_error(p, got.error, info);
  }
  if (got.status != Status::ok) return names;
  if (p.varlen()) {
    // Packed and paged problems: each sequence is diagnosed as the dense
    // problem it is judged as; the first one a hypothesis explains speaks.
    for (int64_t b = 0; b < p.batch; ++b) {
      if (p.seq_tq(b) == 0) continue;
      names = diagnose(sequence_problem(p, b), sequence_result(p, got, b), info);
      if (!names.empty()) return names;
    }
    return names;
  }
  // The recomputed alternatives know neither sinks nor descales (version
  // 2, SPEC 1.1): no claim there rather than a wrong one; the oracle-based
  // ones (knows_sinks) and the evidence tests hold with sinks. Input
  // formats (fp8, mixed) change no value: the stored values are the
  // logical ones without descales.
  const bool descaled = p.descale && (p.descale->q != 1 || p.descale->k != 1 || p.descale->v != 1);
  if (descaled) return names;
  const OracleResult correct = oracle(p);
  if (got.out.size() != correct.out.size()) return names;
  const Tolerances tol = tolerances(p, correct, info.precision);
  const auto explains = [&](const Alternative& alt) {
    return alternative_explains(alt, p, got, correct, tol, info);
  };
  std::optional<Offence> off;  // computed for the first evidence test
  for (const Hypothesis& h : hypothesis_table()) {
    if (!h.alternative && !h.candidates) {
      if (!h.evidence) continue;
      if (!off) off = offence(p, got, correct, info);
      if (off->any && h.evidence(*off, info)) names.push_back(h.name);
      continue;
    }
    if (!p.sink.empty() && !h.knows_sinks) continue;
    const std::vector<Alternative> alts = alternatives_of(h, p, correct, info.precision);
    if (std::any_of(alts.begin(), alts.end(), explains)) names.push_back(h.name);
  }
  return names;
}

std::vector<std::string> diagnose_failure(const Implementation& impl, const Problem& p) {
  try {
    return diagnose(p, impl.forward(p), impl.info());
  } catch (...) {
    // An implementation that throws, or a problem the oracle refuses, has
    // no output to explain.
    return {};
  }
}

Problem nearby_problem(const Problem& p) {
  Problem n = p;
  // A fixed seed: the same failure gets the same diagnosis every time.
  std::mt19937_64 rng(0x6e65617262795ULL);
  std::uniform_real_distribution<double> u(-1.0 / 8, 1.0 / 8);
  const auto perturb = [&](Tensor& t, DType format, bool relative_only = false) {
    for (double& x : t.data) {
      const double moved = x + u(rng) * std::fabs(x) + (relative_only ? 0.0 : u(rng));
      // A block format's values round with their block, below.
      x = is_block_format(format) ? moved : round_to(format, moved);
    }
  };
  // Q beside block K/V moves by at most 1/8 of itself: kernels quantize it
  // by blocks of 32 too (q8_0), and an absolute move of 1/8 would erase the
  // orders of magnitude between its blocks that their bugs turn on (one
  // scale per row instead of per block, issue 51).
  perturb(n.q, p.q_dtype.value_or(p.dtype), is_block_format(p.kv_dtype.value_or(p.dtype)));
  perturb(n.k, p.kv_dtype.value_or(p.dtype));
  perturb(n.v, p.kv_dtype.value_or(p.dtype));
  // Block K/V (SPEC 1.2): the moved rows some sequence reads rounded back
  // to blocks (gaps of a padded layout stay NaN blocks). Unread paged slots
  // stay moved, no blocks: such a problem is refused and confirms nothing
  // (diagnose_failure's catch).
  round_kv_to_blocks(n);
  return n;
}

namespace {

// Above this size (Problem::score_elements() * (dk + dv)) the unshrunk case
// is not diagnosed (each hypothesis computes the oracle once, some of them
// 16 times): the property generators' small problems stay below 2^17, a
// real-size case far above; the nearby problem stands in for it.
constexpr int64_t kMaxConfirmCost = int64_t{1} << 18;

int64_t cost(const Problem& p) { return p.score_elements() * (p.dk + p.dv); }

}  // namespace

std::vector<std::string> diagnose_failure(const Implementation& impl, const FailureRecord& f) {
  const Problem* diagnosed = &f.shrunk;
  std::vector<std::string> names = diagnose_failure(impl, f.shrunk);
  if (names.empty() && f.shrunk_call) {
    diagnosed = &*f.shrunk_call;
    names = diagnose_failure(impl, *f.shrunk_call);
  }
  Problem magnified;
  if (names.empty() && f.unshrunk && cost(*f.unshrunk) <= kMaxConfirmCost) {
    // A shrunk case can be too small to tell a bug from the correct answer
    // (one key whose score the wrong scale moves by less than the two
    // predictions' tolerances): the first failing case speaks, kept only
    // when a problem near it agrees.
    diagnosed = &*f.unshrunk;
    names = diagnose_failure(impl, *f.unshrunk);
    if (names.empty() && f.unshrunk_call && cost(*f.unshrunk_call) <= kMaxConfirmCost) {
      diagnosed = &*f.unshrunk_call;
      names = diagnose_failure(impl, *f.unshrunk_call);
    }
    if (names.empty()) {
      // Still too small (the first failing case was one key of one
      // dimension): the same problem with Q magnified 4 times (exact in
      // binary formats) widens what a wrong score does, so a scale or
      // mask bug can be told apart; confirmed near it as above.
      magnified = f.shrunk;
      const DType qf = magnified.q_dtype.value_or(magnified.dtype);
      for (double& x : magnified.q.data) x = round_to(qf, 4 * x);
      diagnosed = &magnified;
      names = diagnose_failure(impl, magnified);
    }
    if (names.empty()) return names;
    std::vector<std::string> confirming;
    try {
      confirming = diagnose_failure(impl, nearby_problem(*diagnosed));
    } catch (...) {
      confirming.clear();
    }
    std::erase_if(names, [&](const std::string& n) {
      return std::find(confirming.begin(), confirming.end(), n) == confirming.end();
    });
    return names;
  }
  if (names.empty()) return names;
  // A shrunk problem can be degenerate (one query, one key block): a
  // hypothesis is kept only when a second failing problem agrees.
  std::vector<std::string> confirming;
  if (f.unshrunk && cost(*f.unshrunk) <= kMaxConfirmCost) {
    confirming = diagnose_failure(impl, *f.unshrunk);
    if (f.unshrunk_call && cost(*f.unshrunk_call) <= kMaxConfirmCost) {
      for (std::string& n : diagnose_failure(impl, *f.unshrunk_call))
        confirming.push_back(std::move(n));
    }
  } else {
    try {
      confirming = diagnose_failure(impl, nearby_problem(*diagnosed));
    } catch (...) {
      confirming.clear();  // a format round_to refuses: nothing confirms
    }
  }
  std::erase_if(names, [&](const std::string& n) {
    return std::find(confirming.begin(), confirming.end(), n) == confirming.end();
  });
  return names;
}

std::string describe_diagnosis(const std::vector<std::string>& names) {
  if (names.empty()) return "  diagnosis: no known bug class explains it\n";
  std::string s;
  for (const std::string& name : names) {
    const Hypothesis* h = find_hypothesis(name);
    s += "  diagnosis: " + (h ? h->description : name) + "\n";
  }
  return s;
}

}  // namespace attncheck
