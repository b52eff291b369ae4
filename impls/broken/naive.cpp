#include "naive.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace attncheck::impls::broken {

SliceSoftmax by_rows(RowSoftmax row) {
  return [row = std::move(row)](const SliceScores& sc) {
    SliceWeights w;
    const auto tk = static_cast<size_t>(sc.tk);
    w.a.assign(static_cast<size_t>(sc.tq) * tk, 0.0);
    w.lse.resize(static_cast<size_t>(sc.tq));
    for (int64_t i = 0; i < sc.tq; ++i) {
      const size_t at = static_cast<size_t>(i) * tk;
      w.lse[static_cast<size_t>(i)] =
          row(std::span(sc.s).subspan(at, tk), std::span(sc.ok).subspan(at, tk),
              i, std::span(w.a).subspan(at, tk));
    }
    return w;
  };
}

double allowed_max(std::span<const double> s, std::span<const uint8_t> ok) {
  double m = -std::numeric_limits<double>::infinity();
  for (size_t j = 0; j < s.size(); ++j)
    if (ok[j]) m = std::max(m, s[j]);
  return m;
}

double exp_and_sum(std::span<const double> s, std::span<const uint8_t> ok,
                   double m, std::span<double> a, double start) {
  double l = start;
  for (size_t j = 0; j < s.size(); ++j) {
    if (!ok[j]) continue;
    a[j] = std::exp(s[j] - m);
    l += a[j];
  }
  return l;
}

void normalise(std::span<const uint8_t> ok, double l, std::span<double> a) {
  for (size_t j = 0; j < a.size(); ++j)
    if (ok[j]) a[j] /= l;
}

double f32_softmax_from_max(std::span<const double> s, std::span<const uint8_t> ok, float m,
                            std::span<double> a) {
  float l = 0;
  for (size_t j = 0; j < s.size(); ++j) {
    if (!ok[j]) continue;
    const float p = std::exp(static_cast<float>(s[j]) - m);
    a[j] = p;
    l += p;
  }
  for (size_t j = 0; j < s.size(); ++j)
    if (ok[j]) a[j] = static_cast<float>(a[j]) / l;
  return static_cast<double>(m) + std::log(static_cast<double>(l));
}

double stable_softmax(std::span<const double> s, std::span<const uint8_t> ok,
                      std::span<double> a) {
  const double m = allowed_max(s, ok);
  const double l = exp_and_sum(s, ok, m, a);
  normalise(ok, l, a);
  return m + std::log(l);
}

double softmax_masked_by_fill(std::span<const double> s,
                              std::span<const uint8_t> ok, std::span<double> a,
                              const std::function<double(double)>& fill) {
  std::vector<double> filled(s.begin(), s.end());
  for (size_t j = 0; j < s.size(); ++j)
    if (!ok[j]) filled[j] = fill(s[j]);
  const std::vector<uint8_t> all(s.size(), 1);
  return stable_softmax(filled, all, a);
}

double online_softmax(std::span<const double> s, std::span<const uint8_t> ok,
                      std::span<double> a, const OnlineSoftmax& steps) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const size_t n = steps.drop_partial_block
                       ? s.size() / steps.block * steps.block
                       : s.size();
  double m = -kInf;
  double l = 0;
  for (size_t start = 0; start < n; start += steps.block) {
    const size_t end = std::min(start + steps.block, n);
    double m_new = m;
    for (size_t j = start; j < end; ++j)
      if (ok[j]) m_new = std::max(m_new, s[j]);
    if (steps.guard_masked_blocks && m_new == -kInf) continue;
    if (steps.rescale) {
      const double c = std::exp(m - m_new);
      for (size_t j = 0; j < start; ++j) a[j] *= c;
      l *= c;
    }
    for (size_t j = start; j < end; ++j) {
      if (steps.guard_masked_blocks && !ok[j]) continue;
      a[j] = std::exp((ok[j] ? s[j] : -kInf) - m_new);
      l += a[j];
    }
    m = m_new;
  }
  for (size_t j = 0; j < n; ++j)
    if (ok[j] || !steps.guard_masked_blocks) a[j] /= l;
  return m + std::log(l);
}

SliceSoftmax correct_softmax() {
  return by_rows([](std::span<const double> s, std::span<const uint8_t> ok,
                    int64_t,
                    std::span<double> a) { return stable_softmax(s, ok, a); });
}

bool allowed_except(const Problem& p, Constraint dropped, int64_t b, int64_t h,
                    int64_t i, int64_t j) {
  if (dropped != Constraint::key_valid && !p.key_valid.empty() &&
      !p.key_valid[static_cast<size_t>(b * p.tk + j)])
    return false;
  if (dropped != Constraint::causal && !p.causal_band(i).contains(j)) return false;
  if (dropped != Constraint::window && !p.window_band(i).contains(j)) return false;
  if (dropped != Constraint::mask && p.mask &&
      !p.mask->at(b, h, i, j, p.tq, p.tk))
    return false;
  return true;
}

ForwardResult naive_forward(const Problem& p, double scale, bool reject_empty,
                            const SliceSoftmax& softmax, const KeyRule& rule) {
  if (reject_empty) {
    if (auto message = first_empty_row_error(p)) {
      return ForwardResult::failure(*message);
    }
  }
  const auto rows = static_cast<size_t>(p.batch * p.heads * p.tq);
  ForwardResult r;
  r.out.assign(rows * static_cast<size_t>(p.dv), 0.0);
  r.weights.assign(rows * static_cast<size_t>(p.tk), 0.0);
  r.lse.assign(rows, 0.0);
  SliceScores sc;
  sc.tq = p.tq;
  sc.tk = p.tk;
  sc.s.resize(static_cast<size_t>(p.tq * p.tk));
  sc.ok.resize(sc.s.size());
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = p.kv_head(h);
      for (int64_t i = 0; i < p.tq; ++i) {
        for (int64_t j = 0; j < p.tk; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < p.dk; ++d)
            dot += p.q.at(b, h, i, d) * p.k.at(b, g, j, d);
          double t = scale * dot;
          if (p.softcap > 0) t = p.softcap * std::tanh(t / p.softcap);
          if (p.bias) t += p.bias_at(b, h, i, j);
          const auto at = static_cast<size_t>(i * p.tk + j);
          sc.s[at] = t;
          sc.ok[at] = (rule ? rule(b, h, i, j) : p.allowed(b, h, i, j)) ? 1 : 0;
        }
      }
      const SliceWeights w = softmax(sc);
      for (int64_t i = 0; i < p.tq; ++i) {
        r.lse[row_index(p, b, h, i)] = w.lse[static_cast<size_t>(i)];
        for (int64_t j = 0; j < p.tk; ++j) {
          const double a = w.a[static_cast<size_t>(i * p.tk + j)];
          r.weights[weight_index(p, b, h, i, j)] = a;
          if (a == 0) continue;
          for (int64_t d = 0; d < p.dv; ++d)
            r.out[out_index(p, b, h, i, d)] += a * p.v.at(b, g, j, d);
        }
      }
    }
  }
  return r;
}

Problem with_loaded_qk(const Problem& p, int64_t loaded_dk, const LaneLoad& load) {
  Problem r = p;
  r.dk = loaded_dk;
  const auto loaded = [&](const Tensor& x, int64_t heads, int64_t rows) {
    Tensor t = make_tensor(p.batch, heads, rows, loaded_dk);
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t d = 0; d < loaded_dk; ++d) t.at(b, h, i, d) = load(x, b, h, i, rows, p.dk, d);
    return t;
  };
  r.q = loaded(p.q, p.heads, p.tq);
  r.k = loaded(p.k, p.kv_heads, p.tk);
  return r;
}

std::optional<std::string> empty_rows_error_under(const Problem& p, const KeyRule& rule,
                                                  bool all) {
  std::string rows;
  int64_t n = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i) {
        bool any = false;
        for (int64_t j = 0; j < p.tk && !any; ++j) any = rule(b, h, i, j);
        if (any) continue;
        const std::string row = "(b=" + std::to_string(b) + ", h=" + std::to_string(h) +
                                ", i=" + std::to_string(i) + ")";
        if (!all) return "query " + row + " has no allowed key";
        rows += (n++ == 0 ? "" : ", ") + row;
      }
  if (n == 0) return std::nullopt;
  return (n == 1 ? "query " : "queries ") + rows + (n == 1 ? " has" : " have") +
         " no allowed key";
}

ImplInfo broken_info(std::string name, std::string caught_by,
                     std::string description, Features features,
                     EmptyRowPolicy empty_rows) {
  ImplInfo info = reference_info(std::move(name), DType::f64, features,
                                 empty_rows, std::move(description));
  info.kind = Kind::broken;
  info.caught_by = std::move(caught_by);
  return info;
}

ImplInfo broken_info(bugs::Twin twin, std::string caught_by, Features features,
                     EmptyRowPolicy empty_rows) {
  const bugs::BrokenTwin& entry = bugs::broken_twin(twin);
  return broken_info(std::string(entry.name), std::move(caught_by), std::string(entry.what),
                     features, empty_rows);
}

}  // namespace attncheck::impls::broken
