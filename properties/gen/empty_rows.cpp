#include "properties/gen/empty_rows.h"

#include <algorithm>
#include <vector>

#include "core/broadcast.h"
#include "properties/gen/draws.h"
#include "properties/gen/problem.h"

namespace attncheck::gen {
namespace {

using detail::pick;

// Structurally (causal and window) allowed first key of query i, or -1.
int64_t first_structural_key(const Problem& p, int64_t i) {
  const int64_t pos = p.position(i);
  for (int64_t j = 0; j < p.tk; ++j) {
    if (p.causal && j > pos) continue;
    if (p.window_left >= 0 && j < pos - p.window_left) continue;
    if (p.window_right >= 0 && j > pos + p.window_right) continue;
    return j;
  }
  return -1;
}

bool structure_leaves_empty_row(const Problem& p) {
  for (int64_t i = 0; i < p.tq; ++i)
    if (first_structural_key(p, i) < 0) return true;
  return false;
}

// A copy of q with new_tq rows, old rows repeated cyclically (nothing drawn).
void resize_queries(Problem& p, int64_t new_tq) {
  Tensor q = make_tensor(p.batch, p.heads, new_tq, p.dk);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < new_tq; ++i)
        for (int64_t d = 0; d < p.dk; ++d) q.at(b, h, i, d) = p.q.at(b, h, i % p.tq, d);
  p.q = std::move(q);
  p.tq = new_tq;
  p.mask.reset();  // both have a tq axis
  p.bias.reset();
}

enum class EmptyBy { key_padding, mask, bottom_right_causal, window };

std::vector<EmptyBy> empty_methods(const GenSpec& spec) {
  const auto has = [&](Features bit) { return (spec.features & bit) == bit; };
  std::vector<EmptyBy> m;
  if (has(ATTNCHECK_FEATURE_KEY_VALID)) m.push_back(EmptyBy::key_padding);
  if (has(ATTNCHECK_FEATURE_MASK)) m.push_back(EmptyBy::mask);
  if (has(ATTNCHECK_FEATURE_CAUSAL | ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT))
    m.push_back(EmptyBy::bottom_right_causal);
  if (has(ATTNCHECK_FEATURE_WINDOW)) m.push_back(EmptyBy::window);
  return m;
}

}  // namespace

namespace detail {

void repair_empty_rows(Problem& p) {
  if (structure_leaves_empty_row(p)) p.window_left = -1;
  if (structure_leaves_empty_row(p)) p.window_right = -1;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i) {
        if (p.allowed_count(b, h, i) > 0) continue;
        const int64_t j = first_structural_key(p, i);
        if (!p.key_valid.empty()) p.key_valid[static_cast<size_t>(b * p.tk + j)] = 1;
        if (p.mask) p.mask->at(b, h, i, j, p.tq, p.tk) = 1;
      }
}

void unbind_empty_rows(Problem& p) {
  if (!p.sink.empty()) return;
  const auto empty_row = [&] {
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t i = 0; i < p.seq_tq(b); ++i)
        if (p.key_band(b, i).empty()) return true;
    return false;
  };
  if (empty_row()) p.window_left = p.window_right = -1;
  if (empty_row()) p.causal = false;
}

}  // namespace detail

bool can_make_empty_rows(const GenSpec& spec) { return !empty_methods(spec).empty(); }

rc::Gen<Problem> problem_with_empty_row(const GenSpec& spec) {
  return rc::gen::exec([spec] {
    Problem p = detail::draw_problem(spec);
    const auto methods = empty_methods(spec);
    const EmptyBy by = methods[static_cast<size_t>(pick(static_cast<int64_t>(methods.size())))];
    switch (by) {
      case EmptyBy::key_padding: {
        if (p.key_valid.empty()) p.key_valid.assign(static_cast<size_t>(p.batch * p.tk), 1);
        const int64_t b = pick(p.batch);
        std::fill_n(p.key_valid.begin() + b * p.tk, p.tk, uint8_t{0});
        break;
      }
      case EmptyBy::mask: {
        if (!p.mask) {
          p.mask = make_broadcast<uint8_t>(1, 1, p.tq, p.tk, [](auto...) { return 1; });
        }
        const int64_t b = pick(p.batch), h = pick(p.heads), i = pick(p.tq);
        for (int64_t j = 0; j < p.tk; ++j) p.mask->at(b, h, i, j, p.tq, p.tk) = 0;
        break;
      }
      case EmptyBy::bottom_right_causal:
        resize_queries(p, p.tk + 1 + pick(2));
        p.causal = true;
        p.align = Align::bottom_right;
        break;
      case EmptyBy::window:
        // A zero-width window with tq > tk.
        resize_queries(p, p.tk + 1 + pick(2));
        p.causal = false;
        // Either alignment works: top-left leaves i >= tk empty, bottom-right
        // leaves i < tq - tk empty.
        p.align = (spec.features & ATTNCHECK_FEATURE_ALIGN_BOTTOM_RIGHT) &&
                          !(spec.features & ATTNCHECK_FEATURE_ALIGN_TOP_LEFT)
                      ? Align::bottom_right
                      : Align::top_left;
        p.window_left = 0;
        p.window_right = 0;
        break;
    }
    return p;
  });
}

}  // namespace attncheck::gen
