/* What the CLI test plugins share: an element's offset by strides, and
 * whether query i of (b, h) may see key j under the problem's key padding,
 * causal mask (either alignment), window and explicit mask (SPEC 2). */
#ifndef ATTNCHECK_TEST_PLUGIN_ROWS_H
#define ATTNCHECK_TEST_PLUGIN_ROWS_H

#include "attncheck/plugin.h"

static int64_t at(const int64_t* s, int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * s[0] + b * s[1] + c * s[2] + d * s[3];
}

static int allowed(const attncheck_problem* p, int64_t b, int64_t h, int64_t i, int64_t j) {
  const int64_t pos = p->align == ATTNCHECK_ALIGN_BOTTOM_RIGHT ? i + p->tk - p->tq : i;
  if (p->key_valid && !p->key_valid[b * p->tk + j]) return 0;
  if (p->causal && j > pos) return 0;
  if (p->window_left >= 0 && j < pos - p->window_left) return 0;
  if (p->window_right >= 0 && j > pos + p->window_right) return 0;
  if (p->mask && !p->mask[at(p->mask_strides, b, h, i, j)]) return 0;
  return 1;
}

#endif
