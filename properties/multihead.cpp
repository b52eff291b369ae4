// MultiHeadConsistency: a layer (W_q, W_k, W_v, W_o) with H heads equals the
// concatenation of H single-head problems on the projected inputs, and its
// parameter count does not depend on H at fixed d (exercises 4 and 9).
//
// The projections are made exact so that the single-head problems are
// known exactly: inputs are small integers, W_q, W_k, W_v have entries in
// {0, 1, -1}, so every projected value is an integer of magnitude at most
// 2 d (exact in every format for the d drawn here), and W_o is a signed
// permutation, so Y = C W_o only moves and negates elements. Each of Y's
// elements is then one head's output element, judged against the oracle of
// that head's single-head problem within its own tolerance: a wrong split
// or merge of heads, a transposed or missing W_o, a projection applied on
// the wrong side, all move elements the oracle does not expect there.

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <numeric>

#include "attncheck/fixture.h"
#include "attncheck/layer.h"
#include "properties/case_context.h"

namespace attncheck {
namespace {

std::vector<double> values(size_t n, rc::Gen<double> gen) {
  return *rc::gen::container<std::vector<double>>(n, std::move(gen));
}

// X W in double for X of `rows` rows of width d: exact for the drawn values.
std::vector<double> project(const std::vector<double>& x, const std::vector<double>& w,
                            int64_t rows, int64_t d) {
  std::vector<double> y(static_cast<size_t>(rows * d), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d; ++c)
      for (int64_t e = 0; e < d; ++e)
        y[static_cast<size_t>(r * d + c)] +=
            x[static_cast<size_t>(r * d + e)] * w[static_cast<size_t>(e * d + c)];
  return y;
}

struct LayerCase {
  LayerWeights w;
  LayerInput x;
};

LayerCase layer_case(const Case& c) {
  LayerCase lc;
  const nlohmann::json& a = c.args;
  lc.w.d_model = a.at("d_model").get<int64_t>();
  lc.w.w_q = a.at("w_q").get<std::vector<double>>();
  lc.w.w_k = a.at("w_k").get<std::vector<double>>();
  lc.w.w_v = a.at("w_v").get<std::vector<double>>();
  lc.w.w_o = a.at("w_o").get<std::vector<double>>();
  lc.x.dtype = c.problem.dtype;
  lc.x.batch = c.problem.batch;
  lc.x.tq = c.problem.tq;
  lc.x.tk = c.problem.tk;
  lc.x.heads = a.at("heads").get<int64_t>();
  lc.x.x_q = a.at("x_q").get<std::vector<double>>();
  lc.x.x_kv = a.at("x_kv").get<std::vector<double>>();
  lc.x.key_valid = c.problem.key_valid;
  lc.x.causal = c.problem.causal;
  lc.x.align = c.problem.align;
  return lc;
}

// The multi-head problem the layer's core must solve: the projections of x
// split B x H x T x dk, with x's masks and the default scale. Throws
// std::invalid_argument when the shapes do not fit.
Problem projected_problem(const LayerCase& lc) {
  const int64_t d = lc.w.d_model, heads = lc.x.heads;
  if (d <= 0 || heads <= 0 || d % heads != 0) {
    throw std::invalid_argument(fmt::format("d_model {} is not a multiple of heads {}", d, heads));
  }
  const auto dd = static_cast<size_t>(d * d);
  for (const auto* w : {&lc.w.w_q, &lc.w.w_k, &lc.w.w_v, &lc.w.w_o})
    if (w->size() != dd) throw std::invalid_argument("a projection is not d_model x d_model");
  if (lc.x.x_q.size() != static_cast<size_t>(lc.x.batch * lc.x.tq * d) ||
      lc.x.x_kv.size() != static_cast<size_t>(lc.x.batch * lc.x.tk * d)) {
    throw std::invalid_argument("x_q or x_kv does not have batch x t x d_model elements");
  }
  const int64_t dk = d / heads;
  const auto q = project(lc.x.x_q, lc.w.w_q, lc.x.batch * lc.x.tq, d);
  const auto k = project(lc.x.x_kv, lc.w.w_k, lc.x.batch * lc.x.tk, d);
  const auto v = project(lc.x.x_kv, lc.w.w_v, lc.x.batch * lc.x.tk, d);
  Problem p = Problem::zeros(lc.x.dtype, lc.x.batch, heads, heads, lc.x.tq, lc.x.tk, dk, dk);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t c = 0; c < dk; ++c) {
        for (int64_t t = 0; t < p.tq; ++t)
          p.q.at(b, h, t, c) = q[static_cast<size_t>((b * p.tq + t) * d + h * dk + c)];
        for (int64_t t = 0; t < p.tk; ++t) {
          p.k.at(b, h, t, c) = k[static_cast<size_t>((b * p.tk + t) * d + h * dk + c)];
          p.v.at(b, h, t, c) = v[static_cast<size_t>((b * p.tk + t) * d + h * dk + c)];
        }
      }
  p.key_valid = lc.x.key_valid;
  p.causal = lc.x.causal;
  p.align = lc.x.align;
  return p;
}

// Head h of a multi-head problem as a problem of its own.
Problem single_head(const Problem& p, int64_t h) {
  Problem s = Problem::zeros(p.dtype, p.batch, 1, 1, p.tq, p.tk, p.dk, p.dv);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t t = 0; t < p.tq; ++t)
      for (int64_t c = 0; c < p.dk; ++c) s.q.at(b, 0, t, c) = p.q.at(b, h, t, c);
    for (int64_t t = 0; t < p.tk; ++t) {
      for (int64_t c = 0; c < p.dk; ++c) s.k.at(b, 0, t, c) = p.k.at(b, h, t, c);
      for (int64_t c = 0; c < p.dv; ++c) s.v.at(b, 0, t, c) = p.v.at(b, h, t, c);
    }
  }
  s.key_valid = p.key_valid;
  s.causal = p.causal;
  s.align = p.align;
  s.scale = p.scale;
  return s;
}

Case draw_layer(CaseContext& ctx) {
  const ImplInfo& info = ctx.info();
  const bool thorough = ctx.config().profile == Profile::thorough;
  const int64_t batch = *rc::gen::inRange<int64_t>(1, 4);
  const int64_t heads = *rc::gen::inRange<int64_t>(1, 5);
  const int64_t dk = *rc::gen::inRange<int64_t>(1, thorough ? 5 : 4);
  const int64_t tq = *rc::gen::inRange<int64_t>(1, thorough ? 13 : 7);
  const int64_t tk = *rc::gen::inRange<int64_t>(1, thorough ? 13 : 7);
  const int64_t d = heads * dk;
  const auto dd = static_cast<size_t>(d * d);
  const auto input = rc::gen::element(0.0, 1.0, -1.0, 2.0, -2.0);
  const auto weight = rc::gen::element(0.0, 1.0, -1.0);
  nlohmann::json args;
  args["heads"] = heads;
  args["d_model"] = d;
  args["x_q"] = values(static_cast<size_t>(batch * tq * d), input);
  args["x_kv"] = values(static_cast<size_t>(batch * tk * d), input);
  args["w_q"] = values(dd, weight);
  args["w_k"] = values(dd, weight);
  args["w_v"] = values(dd, weight);
  // W_o: row c has its one nonzero, +-1, in column perm[c].
  const std::vector<int64_t> perm = gen::permutation(d);
  std::vector<double> w_o(dd, 0.0);
  for (int64_t c = 0; c < d; ++c) {
    const bool negative = *rc::gen::arbitrary<bool>();
    w_o[static_cast<size_t>(c * d + perm[static_cast<size_t>(c)])] = negative ? -1.0 : 1.0;
  }
  args["w_o"] = w_o;

  Problem shape = Problem::zeros(ctx.dtype(), batch, heads, heads, tq, tk, dk, dk);
  if (info.has(ATTNCHECK_FEATURE_CAUSAL) && *rc::gen::arbitrary<bool>()) {
    shape.causal = true;
    const bool both =
        info.has(ATTNCHECK_FEATURE_ALIGN_TOP_LEFT | ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT);
    shape.align =
        info.has(ATTNCHECK_FEATURE_ALIGN_TOP_LEFT) && (!both || !*rc::gen::arbitrary<bool>())
            ? Align::top_left
            : Align::bottom_right;
  }
  if (info.has(ATTNCHECK_FEATURE_KEY_VALID) && *rc::gen::arbitrary<bool>()) {
    shape.key_valid = *rc::gen::container<std::vector<uint8_t>>(static_cast<size_t>(batch * tk),
                                                                rc::gen::element<uint8_t>(1, 0));
  }
  // Generated cases have no empty row (SPEC 2): drop the padding, then the
  // bottom-right alignment (top-left causal always sees key 0).
  if (shape.has_empty_rows()) shape.key_valid.clear();
  if (shape.has_empty_rows()) shape.align = Align::top_left;
  Case c{shape, args};
  c.problem = projected_problem(layer_case(c));
  return c;
}

// The layer's args against the problem, which is the projected one: its
// heads and dk fix the layer's heads and d_model, and with them the sizes of
// the inputs ([batch][t][d_model]) and projections ([d_model][d_model]).
void validate_layer(const Fixture& f) {
  const ArgsCheck a(f.args, f.problem,
                    {"d_model", "heads", "w_k", "w_o", "w_q", "w_v", "x_kv", "x_q"});
  const Problem& p = f.problem;
  const int64_t d = p.heads * p.dk;
  a.required({"d_model", "heads", "w_k", "w_o", "w_q", "w_v", "x_kv", "x_q"});
  a.integer("d_model", d, d + 1, "d_model (the problem's heads * dk)");
  a.integer("heads", p.heads, p.heads + 1, "heads (the problem's)");
  for (const std::string_view key : {"w_k", "w_o", "w_q", "w_v", "x_kv", "x_q"}) {
    const int64_t count = key == "x_q"    ? a.elements(key, {p.batch, p.tq, d})
                          : key == "x_kv" ? a.elements(key, {p.batch, p.tk, d})
                                          : a.elements(key, {d, d});
    a.finite_numbers(key, count);
  }
}

void judge_layer(CaseContext& ctx, const Case& c) {
  const auto* layer = dynamic_cast<const Layer*>(&ctx.impl());
  if (!layer) ctx.fail("the implementation does not implement attncheck::Layer");
  const LayerCase lc = layer_case(c);
  const Problem p = projected_problem(lc);
  const int64_t d = lc.w.d_model;
  for (const auto* t : {&p.q, &p.k, &p.v})
    for (double value : t->data)
      if (!representable(p.dtype, value)) ctx.discard("projection not exact in the dtype");

  // The layer's attention core as the rest of the catalog sees it: its
  // forward on the projected multi-head problem. The layer must agree with
  // it too, so what the other properties checked is what the layer runs.
  const ForwardResult core = ctx.call_ok(p);

  // The parameter count at fixed d, for every number of heads d allows.
  const int64_t count = layer->parameter_count(d, 1);
  for (int64_t h = 2; h <= d; ++h) {
    if (d % h != 0) continue;
    const int64_t n = layer->parameter_count(d, h);
    if (n != count) {
      ctx.fail(
          fmt::format("the parameter count depends on the number of heads at d = {}: {} "
                      "with 1 head, {} with {} heads",
                      d, count, n, h));
    }
  }

  LayerResult r;
  try {
    r = layer->run(lc.w, lc.x);
  } catch (const ImplementationDied& e) {
    ctx.fail(e.what(), true, e.signal());
  } catch (const std::exception& e) {
    ctx.fail(fmt::format("the layer threw: {}", e.what()));
  }
  if (r.status == Status::unsupported) ctx.discard("unsupported by the implementation");
  if (r.status == Status::error) {
    ctx.fail("the layer reported an error on a problem without empty rows: " + r.error);
  }
  const auto n_y = static_cast<size_t>(p.batch * p.tq * d);
  if (r.y.size() != n_y) ctx.fail(fmt::format("y has {} elements, expected {}", r.y.size(), n_y));

  // Column c of the merged heads lands in column perm[c] of y, times sign[c].
  std::vector<int64_t> perm(static_cast<size_t>(d), 0);
  std::vector<double> sign(static_cast<size_t>(d), 0.0);
  for (int64_t row = 0; row < d; ++row)
    for (int64_t col = 0; col < d; ++col) {
      const double w = lc.w.w_o[static_cast<size_t>(row * d + col)];
      if (w == 0) continue;
      if (std::fabs(w) != 1 || sign[static_cast<size_t>(row)] != 0) {
        throw std::invalid_argument("w_o is not a signed permutation");
      }
      perm[static_cast<size_t>(row)] = col;
      sign[static_cast<size_t>(row)] = w;
    }

  Comparison cmp;
  for (int64_t h = 0; h < p.heads; ++h) {
    const Problem s = single_head(p, h);
    const auto [o, t] = ctx.reference(s);
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t e = 0; e < p.dk; ++e) {
          const auto col = static_cast<size_t>(h * p.dk + e);
          const size_t at = out_index(s, b, 0, i, e);
          const int64_t y_col = perm[col];
          cmp.add_element({fmt::format("y (head {} of the layer, column {} before W_o)", h, e),
                           {b, i, y_col},
                           sign[col] * o.out[at],
                           r.y[static_cast<size_t>((b * p.tq + i) * d + y_col)],
                           0,
                           t.out[at],
                           0});
          cmp.add_element({fmt::format("y (head {} of the layer against its forward)", h),
                           {b, i, y_col},
                           sign[col] * core.out[out_index(p, b, h, i, e)],
                           r.y[static_cast<size_t>((b * p.tq + i) * d + y_col)],
                           0,
                           pairwise_tolerance(t.out[at], t.out[at]),
                           0});
        }
  }
  ctx.expect(cmp, fmt::format("the layer's {} heads differ from {} single-head problems on the "
                              "projected inputs",
                              p.heads, p.heads));
}

}  // namespace

PropertyDef multihead_property() {
  PropertyDef d = case_property(
      "MultiHeadConsistency",
      "for a layer with projections (W_q, W_k, W_v, W_o): H heads equal the concatenation of H "
      "single-head problems on the projected inputs; the parameter count does not depend on H "
      "at fixed d",
      100,
      [](const ImplInfo& info, DType) -> std::optional<std::string> {
        // Broken ones may be layers too (their twin of a layer is).
        if (info.kind == Kind::layer || info.kind == Kind::broken) return std::nullopt;
        return "only layers (kind layer) have projections and heads to check";
      },
      draw_layer, judge_layer, validate_layer);
  // Whether an implementation is a layer shows only on the object: a
  // broken implementation that is not one is skipped, a `layer` that is not
  // one fails.
  d.object_verdict = [name = d.name](const Implementation& impl) -> std::optional<ObjectVerdict> {
    if (dynamic_cast<const Layer*>(&impl)) return std::nullopt;
    if (impl.info().kind == Kind::layer) {
      return ObjectVerdict{PropertyStatus::failed,
                           fmt::format("FAILED {} on {}: declares kind layer but does not "
                                       "implement attncheck::Layer",
                                       name, impl.info().name)};
    }
    return ObjectVerdict{PropertyStatus::skipped,
                         "not a layer: it does not implement attncheck::Layer"};
  };
  d.slice_args = {"heads"};
  return d;
}

ATTNCHECK_REGISTER_PROPERTY(160, multihead_property);

}  // namespace attncheck
