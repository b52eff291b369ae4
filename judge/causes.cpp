// Known causes (judge/causes.h): the offence of a call, its reading against
// a list of causes, and the evidence tests of the accumulator classes.

#include "judge/causes.h"

#include <algorithm>
#include <csignal>
#include <cmath>
#include <exception>
#include <limits>
#include <optional>

#include "attncheck/dtype.h"
#include "core/bugs.h"

namespace attncheck {
namespace {

// The recomputations below work in long double, as the hypotheses' do
// (judge/hypotheses.cpp): 2^11 times finer than f64.
using Real = long double;

const Tolerances* row_tolerance(size_t row, const Tolerances& t, const std::optional<Tolerances>& at_limit) {
  if (!t.ill_conditioned[row]) return &t;
  if (at_limit && !at_limit->ill_conditioned[row]) return &*at_limit;
  return nullptr;  // beyond both: only a non-finite answer offends
}

// Whether got offends at one element with expected value e and tolerance
// tol (infinite: only a non-finite answer offends).
bool offends(double got, double e, double tol) {
  // An exact answer never offends (as compare.h judges it), whatever the
  // tolerance: a sink-only row's can come out below zero.
  if (got == e) return false;
  if (!std::isfinite(got)) return true;
  return !(std::fabs(got - e) <= tol);
}

// The allowed keys of row (b, h, i) in order, with their exact scores.
struct RowKeys {
  std::vector<int64_t> keys;
  std::vector<Real> scores;
  Real max = -std::numeric_limits<Real>::infinity();
};

RowKeys row_keys(const Problem& p, const OracleResult& c, int64_t b, int64_t h, int64_t i) {
  RowKeys r;
  for (int64_t j = 0; j < p.tk; ++j) {
    if (!p.allowed(b, h, i, j)) continue;
    r.keys.push_back(j);
    r.scores.push_back(static_cast<Real>(c.scores[weight_index(p, b, h, i, j)]));
    r.max = std::max(r.max, r.scores.back());
  }
  return r;
}

// f16's largest finite value and the smallest value that rounds to inf
// (65504 + half an ulp of 32): an accumulator that reaches it overflows.
constexpr double kF16Max = 65504;
constexpr double kF16Overflow = 65520;

// The columns of row (b, h, i) where an f16 accumulator of the online
// softmax's unnormalised sum can overflow: over the whole row and over each
// chunk of a split into 1 to 16 chunks of ceil(tk / T) keys (ggml's split_kv,
// ops.cpp: chunk_size = (nek1 + nth - 1) / nth), the partial sum of
// |v_j| exp(s_j - m_k) (m_k the running max of the chunk) times its
// first-order rounding growth 1 + 2 n u (two roundings per key: the update
// and the rescale) reaches kF16Overflow.
std::vector<uint8_t> overflowing_columns(const Problem& p, const RowKeys& r, int64_t b,
                                         int64_t h) {
  std::vector<uint8_t> pred(static_cast<size_t>(p.dv), 0);
  const Real u = unit_roundoff(DType::f16);
  const int64_t g = p.kv_head(h);
  constexpr int64_t kMaxChunks = 16;
  std::vector<Real> acc(static_cast<size_t>(p.dv));
  for (int64_t chunks = 1; chunks <= kMaxChunks; ++chunks) {
    const int64_t size = (p.tk + chunks - 1) / chunks;
    size_t next = 0;  // the first key of r at or after the chunk's start
    for (int64_t start = 0; start < p.tk; start += size) {
      std::fill(acc.begin(), acc.end(), Real{0});
      Real m = -std::numeric_limits<Real>::infinity();
      int64_t n = 0;
      for (; next < r.keys.size() && r.keys[next] < start + size; ++next) {
        const Real s = r.scores[next];
        if (s > m) {
          const Real rescale = std::isinf(m) ? Real{0} : std::exp(m - s);
          for (Real& a : acc) a *= rescale;
          m = s;
        }
        const Real w = std::exp(s - m);
        const Real growth = 1 + 2 * static_cast<Real>(++n) * u;
        for (int64_t d = 0; d < p.dv; ++d) {
          Real& a = acc[static_cast<size_t>(d)];
          a += std::fabs(static_cast<Real>(p.v.at(b, g, r.keys[next], d))) * w;
          if (a * growth >= kF16Overflow) pred[static_cast<size_t>(d)] = 1;
        }
      }
    }
  }
  return pred;
}

// What one accumulator in a format of unit roundoff u can lose over row
// (b, h, i), per column, relative to the output (see causes.h).
std::vector<Real> accumulator_loss(const Problem& p, const RowKeys& r, int64_t b, int64_t h,
                                   Real u) {
  const int64_t g = p.kv_head(h);
  Real sum = 0;
  for (Real s : r.scores) sum += std::exp(s - r.max);
  if (!p.sink.empty()) sum += std::exp(static_cast<Real>(p.sink[static_cast<size_t>(h)]) - r.max);
  std::vector<Real> loss(static_cast<size_t>(p.dv), 0);
  for (int64_t d = 0; d < p.dv; ++d) {
    Real partial = 0, partials = 0;
    for (size_t k = 0; k < r.keys.size(); ++k) {
      partial += std::fabs(static_cast<Real>(p.v.at(b, g, r.keys[k], d))) *
                 std::exp(r.scores[k] - r.max);
      partials += partial;
    }
    loss[static_cast<size_t>(d)] = u * (2 * partials + partial) / sum;
  }
  return loss;
}

// Calls f(b, h, i, row) for each row of p that has an offending out element.
template <typename F>
bool every_offending_row(const Offence& o, F f) {
  const Problem& p = *o.p;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i) {
        const size_t row = row_index(p, b, h, i);
        const size_t first = row * static_cast<size_t>(p.dv);
        if (std::none_of(o.out.begin() + static_cast<std::ptrdiff_t>(first),
                         o.out.begin() + static_cast<std::ptrdiff_t>(first + p.dv),
                         [](uint8_t x) { return x != 0; })) {
          continue;
        }
        if (!f(b, h, i, row)) return false;
      }
  return true;
}

DType v_format(const Problem& p) { return p.kv_dtype.value_or(p.dtype); }

}  // namespace

Offence offence(const Problem& p, const ForwardResult& got, const OracleResult& correct,
                const ImplInfo& info, bool beyond_offends) {
  Offence o;
  o.p = &p;
  o.got = &got;
  o.correct = &correct;
  const Tolerances t = tolerances(p, correct, info.precision);
  std::optional<Tolerances> at_limit;
  if (t.ill_conditioned_rows > 0) at_limit = tolerances(p, correct, info.precision, true);
  o.beyond = t.ill_conditioned;
  const double inf = std::numeric_limits<double>::infinity();
  const bool error_policy = info.empty_rows == EmptyRowPolicy::error;
  const auto judge = [&](const std::vector<double>& g, const std::vector<double>& e,
                         const std::vector<double> Tolerances::*tol, size_t per_row,
                         std::vector<uint8_t>& bad, std::vector<double>* tols) {
    bad.assign(e.size(), 0);
    if (tols) tols->assign(e.size(), 0);
    if (g.size() != e.size()) {
      std::fill(bad.begin(), bad.end(), 1);
      o.any = true;
      return;
    }
    for (size_t k = 0; k < e.size(); ++k) {
      const size_t row = k / per_row;
      bool b = false;
      if (correct.row_empty[row]) {
        // An error was due, or zeros (lse -inf) under the zero policy.
        b = error_policy || !(g[k] == e[k]);
      } else {
        const Tolerances* rt = row_tolerance(row, t, at_limit);
        const double tk = rt ? ((*rt).*tol)[k] : inf;
        if (tols) (*tols)[k] = tk;
        b = offends(g[k], e[k], tk);
      }
      bad[k] = b ? 1 : 0;
      o.any = o.any || b;
    }
  };
  judge(got.out, correct.out, &Tolerances::out, static_cast<size_t>(p.dv), o.out, &o.out_tol);
  const bool any_out = o.any;
  o.any = false;
  if (info.has(ATTNCHECK_FEATURE_WEIGHTS) && !correct.weights.empty()) {
    judge(got.weights, correct.weights, &Tolerances::weights, static_cast<size_t>(p.tk),
          o.weights, nullptr);
  }
  if (info.has(ATTNCHECK_FEATURE_LSE) && !correct.lse.empty()) {
    judge(got.lse, correct.lse, &Tolerances::lse, 1, o.lse, nullptr);
  }
  o.weights_or_lse = o.any;
  o.any = o.any || any_out;
  // Nothing outside T or T^L, yet the case failed (beyond_offends: no call
  // of it offends otherwise): on rows beyond the
  // first-order analysis that is AsAccurateAsBaseline's judgement (SPEC 2:
  // an error above F times the plain algorithm's, within T^L). Every
  // element there that is not exact then offends, for the causes to account
  // for (an accumulator's loss explains it; an inf or an alternative result
  // does not).
  if (beyond_offends && !o.any && t.ill_conditioned_rows > 0) {
    for (size_t k = 0; k < o.out.size() && k < got.out.size(); ++k) {
      const size_t row = k / static_cast<size_t>(p.dv);
      if (!o.beyond[row] || correct.row_empty[row] || got.out[k] == correct.out[k]) continue;
      o.out[k] = 1;
      o.any = true;
    }
  }
  return o;
}

bool f16_pv_sum_overflows(const Offence& o, const ImplInfo&) {
  const Problem& p = *o.p;
  if (v_format(p) != DType::f16 || o.weights_or_lse) return false;
  return every_offending_row(o, [&](int64_t b, int64_t h, int64_t i, size_t row) {
    if (o.correct->row_empty[row]) return false;
    const std::vector<uint8_t> pred = overflowing_columns(p, row_keys(p, *o.correct, b, h, i), b, h);
    for (int64_t d = 0; d < p.dv; ++d) {
      const size_t k = out_index(p, b, h, i, d);
      if (!o.out[k]) continue;
      const double g = o.got->out[k];
      if ((std::isfinite(g) && std::fabs(g) <= kF16Max) || !pred[static_cast<size_t>(d)]) {
        return false;
      }
    }
    return true;
  });
}

bool pv_sum_rounding_explains(const Offence& o, DType accumulator) {
  const Problem& p = *o.p;
  if (o.weights_or_lse) return false;
  // The accumulator a kernel keeps for values of its own format: V in f16
  // (ggml's VKQ16) or in bf16 (LibTorch's fallback GEMM).
  if (v_format(p) != accumulator) return false;
  const Real u = unit_roundoff(accumulator);
  return every_offending_row(o, [&](int64_t b, int64_t h, int64_t i, size_t row) {
    if (o.correct->row_empty[row]) return false;
    // A declared bf16 accumulator is covered by the declared tolerance
    // within the first-order analysis; the finding is beyond it.
    if (accumulator == DType::bf16 && !o.beyond[row]) return false;
    const std::vector<Real> loss = accumulator_loss(p, row_keys(p, *o.correct, b, h, i), b, h, u);
    for (int64_t d = 0; d < p.dv; ++d) {
      const size_t k = out_index(p, b, h, i, d);
      if (!o.out[k]) continue;
      const double g = o.got->out[k];
      if (!std::isfinite(g)) return false;
      const Real err = std::fabs(static_cast<Real>(g) - static_cast<Real>(o.correct->out[k]));
      if (!(err <= static_cast<Real>(o.out_tol[k]) + loss[static_cast<size_t>(d)])) return false;
    }
    return true;
  });
}

bool stale_running_max_explains(const Offence& o, const ImplInfo& info) {
  const Problem& p = *o.p;
  const int64_t block = info.precision.key_block;
  if (block <= 0 || !o.any) return false;
  const Real limit = std::log(static_cast<Real>(max_finite(info.precision.softmax_format())));
  const auto offends_only_non_finite = [](const std::vector<uint8_t>& bad,
                                          const std::vector<double>& got, size_t first,
                                          size_t n) {
    bool any = false;
    for (size_t k = first; k < first + n && k < bad.size(); ++k) {
      if (!bad[k]) continue;
      if (k >= got.size() || std::isfinite(got[k])) return std::optional<bool>();  // finite: no
      any = true;
    }
    return std::optional<bool>(any);
  };
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i) {
        const size_t row = row_index(p, b, h, i);
        const auto dv = static_cast<size_t>(p.dv), tk = static_cast<size_t>(p.tk);
        const std::optional<bool> out = offends_only_non_finite(
            o.out, o.got->out, out_index(p, b, h, i, 0), dv);
        const std::optional<bool> w = offends_only_non_finite(
            o.weights, o.got->weights, weight_index(p, b, h, i, 0), tk);
        const std::optional<bool> l = offends_only_non_finite(o.lse, o.got->lse, row, 1);
        if (!out || !w || !l) return false;  // a finite offending element
        if (!*out && !*w && !*l) continue;
        if (o.correct->row_empty[row]) return false;
        const RowKeys r = row_keys(p, *o.correct, b, h, i);
        Real first_max = -std::numeric_limits<Real>::infinity();
        for (size_t k = 0; k < r.keys.size(); ++k)
          if (r.keys[k] / block == r.keys[0] / block) first_max = std::max(first_max, r.scores[k]);
        if (!(r.max - first_max > limit)) return false;
      }
  return true;
}

bool nan_on_empty_rows(const Offence& o, const ImplInfo&) {
  const Problem& p = *o.p;
  const auto only_empty_nan = [&](const std::vector<uint8_t>& bad, const std::vector<double>& got,
                                  size_t per_row, bool nan_or_inf) {
    for (size_t k = 0; k < bad.size(); ++k) {
      if (!bad[k]) continue;
      if (!o.correct->row_empty[k / per_row] || k >= got.size()) return false;
      if (!(std::isnan(got[k]) || (nan_or_inf && !std::isfinite(got[k])))) return false;
    }
    return true;
  };
  return only_empty_nan(o.out, o.got->out, static_cast<size_t>(p.dv), false) &&
         only_empty_nan(o.weights, o.got->weights, static_cast<size_t>(p.tk), false) &&
         only_empty_nan(o.lse, o.got->lse, 1, true);
}

bool is_known_cause(const std::string& name) { return find_hypothesis(name) != nullptr; }

// The death classes and the signal each predicts. SIGILL has one cause in
// a compute kernel: an instruction the CPU or the OS refuses (an ISA
// extension the dispatch chose wrongly, or one the kernel has not allowed
// the process, as AMX's tile data needs arch_prctl); a segfault or an abort
// has too many to name one.
bool death_explained(std::string_view name, int signal) {
  return signal == SIGILL && name == bugs::bug_class(bugs::Bug::illegal_instruction).name;
}

std::string_view death_diagnosis(int signal) {
  return signal == SIGILL ? bugs::bug_class(bugs::Bug::illegal_instruction).name
                          : std::string_view();
}

CallVerdict read_call(const std::vector<std::string>& causes, const Problem& p,
                      const ForwardResult& got, const ImplInfo& declared, bool beyond_offends) {
  const CallVerdict unexplained{CallReading::unexplained, 0};
  // A call is judged by the precision of the path it took (SPEC 4.1), as
  // the property judged it.
  ImplInfo info = declared;
  if (got.path >= 0 && static_cast<size_t>(got.path) < declared.paths.size()) {
    info.precision = declared.paths[static_cast<size_t>(got.path)].precision;
  }
  try {
    if (got.status == Status::unsupported) return {};
    if (p.varlen()) {
      // Each sequence as the dense problem it is judged as.
      CallVerdict v;
      for (int64_t b = 0; b < p.batch; ++b) {
        if (p.seq_tq(b) == 0) continue;
        const CallVerdict s =
            read_call(causes, sequence_problem(p, b), sequence_result(p, got, b), info,
                      beyond_offends);
        if (s.reading == CallReading::unexplained) return s;
        if (s.reading == CallReading::explained) v = s;
      }
      return v;
    }
    if (got.status == Status::error) {
      if (p.has_empty_rows() && info.empty_rows == EmptyRowPolicy::error) return {};
      const std::vector<std::string> names = diagnose(p, got, info);
      for (size_t c = 0; c < causes.size(); ++c)
        if (std::find(names.begin(), names.end(), causes[c]) != names.end())
          return {CallReading::explained, c};
      return unexplained;
    }
    if (got.status != Status::ok) return unexplained;
    const bool descaled =
        p.descale && (p.descale->q != 1 || p.descale->k != 1 || p.descale->v != 1);
    const OracleResult correct = oracle(p);
    if (got.out.size() != correct.out.size()) return unexplained;
    const Offence off = offence(p, got, correct, info, beyond_offends);
    if (!off.any) return {};
    std::optional<Tolerances> tol;
    for (size_t c = 0; c < causes.size(); ++c) {
      const Hypothesis* h = find_hypothesis(causes[c]);
      if (!h) continue;
      if (h->evidence) {
        if (h->evidence(off, info)) return {CallReading::explained, c};
        continue;
      }
      if (descaled || (!p.sink.empty() && !h->knows_sinks)) continue;
      if (!tol) tol = tolerances(p, correct, info.precision);
      for (const Alternative& alt : alternatives_of(*h, p, correct, info.precision))
        if (alternative_explains(alt, p, got, correct, *tol, info))
          return {CallReading::explained, c};
    }
    return unexplained;
  } catch (const std::exception&) {
    return unexplained;  // a problem the oracle refuses: nothing explains it
  }
}

}  // namespace attncheck
