#include "core/transforms.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <span>
#include <unordered_set>
#include <vector>

#include "attncheck/dtype.h"

namespace attncheck {

Problem expand_kv_heads(const Problem& p, const KvHeadMap& map) {
  Problem a = p.contiguous();
  a.kv_heads = p.heads;
  a.k = make_tensor(p.batch, p.heads, p.tk, p.dk);
  a.v = make_tensor(p.batch, p.heads, p.tk, p.dv);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = map ? map(p, h) : p.kv_head(h);
      for (int64_t j = 0; j < p.tk; ++j) {
        for (int64_t d = 0; d < p.dk; ++d) a.k.at(b, h, j, d) = p.k.at(b, g, j, d);
        for (int64_t d = 0; d < p.dv; ++d) a.v.at(b, h, j, d) = p.v.at(b, g, j, d);
      }
    }
  return a;
}

Problem with_identity_values(const Problem& p) {
  Problem q = p;
  q.dv = kv_in_blocks(p) ? (p.tk + kBlockValues - 1) / kBlockValues * kBlockValues : p.tk;
  q.v = make_tensor(p.batch, p.kv_heads, p.tk, q.dv);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t g = 0; g < p.kv_heads; ++g)
      for (int64_t j = 0; j < p.tk; ++j) q.v.at(b, g, j, j) = 1;
  q.dout.clear();
  return q;
}

void for_each_read_key(const Problem& p,
                       const std::function<void(int64_t b, int64_t g, int64_t j)>& fn) {
  std::unordered_set<size_t> seen;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t g = 0; g < p.kv_heads; ++g)
      for (int64_t j = 0; j < p.seq_tk(b); ++j)
        if (!p.paged || seen.insert(p.kv_offset(p.k, b, g, j, 0)).second) fn(b, g, j);
}

bool kv_in_blocks(const Problem& p) { return is_block_format(p.kv_dtype.value_or(p.dtype)); }

namespace {

// Calls fn(tensor, row values, offsets) for key row j of K/V head g of
// sequence b, in K and in V.
template <typename Problem_, typename Fn>
void each_key_row(Problem_& p, int64_t b, int64_t g, int64_t j, Fn fn) {
  for (auto* t : {&p.k, &p.v}) {
    const int64_t width = t == &p.k ? p.dk : p.dv;
    std::vector<size_t> offsets(static_cast<size_t>(width));
    std::vector<double> row(static_cast<size_t>(width));
    for (int64_t d = 0; d < width; ++d) {
      offsets[static_cast<size_t>(d)] = p.kv_offset(*t, b, g, j, d);
      row[static_cast<size_t>(d)] = t->data[offsets[static_cast<size_t>(d)]];
    }
    fn(*t, row, offsets);
  }
}

}  // namespace

bool round_key_to_blocks(Problem& p, int64_t b, int64_t g, int64_t j) {
  if (!kv_in_blocks(p)) return true;
  const DType d = p.kv_dtype.value_or(p.dtype);
  bool finite = true;
  each_key_row(p, b, g, j, [&](Tensor& t, std::vector<double>& row,
                               const std::vector<size_t>& offsets) {
    round_row_to_blocks(d, row);
    for (size_t k = 0; k < row.size(); ++k) {
      finite = finite && std::isfinite(row[k]);
      t.data[offsets[k]] = row[k];
    }
  });
  return finite;
}

bool change_key_row(Problem& p, int64_t b, int64_t g, int64_t j,
                    const std::function<double(double)>& change) {
  for (int64_t d = 0; d < p.dk; ++d) {
    double& x = p.k.data[p.kv_offset(p.k, b, g, j, d)];
    x = change(x);
  }
  for (int64_t d = 0; d < p.dv; ++d) {
    double& x = p.v.data[p.kv_offset(p.v, b, g, j, d)];
    x = change(x);
  }
  return round_key_to_blocks(p, b, g, j);
}

bool round_kv_to_blocks(Problem& p) {
  bool finite = true;
  for_each_read_key(p, [&](int64_t b, int64_t g, int64_t j) {
    finite = round_key_to_blocks(p, b, g, j) && finite;
  });
  return finite;
}

bool kv_blocks_exact(const Problem& p) {
  if (!kv_in_blocks(p)) return true;
  const DType d = p.kv_dtype.value_or(p.dtype);
  bool exact = true;
  for_each_read_key(p, [&](int64_t b, int64_t g, int64_t j) {
    if (!exact) return;
    each_key_row(p, b, g, j, [&](const Tensor&, const std::vector<double>& row,
                                 const std::vector<size_t>&) {
      for (size_t start = 0; exact && start < row.size(); start += kBlockValues)
        exact = row.size() - start >= static_cast<size_t>(kBlockValues) &&
                is_exact_block(d, std::span<const double>(row).subspan(start, kBlockValues));
    });
  });
  return exact;
}

std::vector<double> share_block_scales(Problem& p, bool values, int levels, int step) {
  if (!kv_in_blocks(p)) return {};
  if (levels < 1 || step < 1) throw std::invalid_argument("share_block_scales: levels, step >= 1");
  Tensor& t = values ? p.v : p.k;
  const int64_t width = values ? p.dv : p.dk;
  const auto columns = static_cast<size_t>(width / kBlockValues);
  std::vector<double> largest(columns, 0.0);
  for_each_read_key(p, [&](int64_t b, int64_t g, int64_t j) {
    for (int64_t d = 0; d < width; ++d) {
      double& m = largest[static_cast<size_t>(d / kBlockValues)];
      m = std::max(m, std::fabs(t.data[p.kv_offset(t, b, g, j, d)]));
    }
  });
  const double smallest = std::ldexp(1.0, -24);  // f16's smallest subnormal
  const double unit = static_cast<double>(step) * levels;
  std::vector<double> scales(columns, 1.0);
  for (size_t c = 0; c < columns; ++c) {
    if (largest[c] == 0) continue;
    const double wanted = std::min(largest[c] / unit, max_finite(DType::f16));
    scales[c] = std::clamp(round_to(DType::f16, wanted), smallest, max_finite(DType::f16));
  }
  for_each_read_key(p, [&](int64_t b, int64_t g, int64_t j) {
    for (int64_t d = 0; d < width; ++d) {
      double& x = t.data[p.kv_offset(t, b, g, j, d)];
      const double s = scales[static_cast<size_t>(d / kBlockValues)] * step;
      x = s * std::clamp(std::round(x / s), -static_cast<double>(levels),
                         static_cast<double>(levels));
    }
  });
  return scales;
}

Problem slice_problem(const Problem& p, const SliceChoice& choice) {
  std::vector<int64_t> bs, hs, gs;
  for (int64_t b = 0; b < p.batch; ++b)
    if (!choice.batch || *choice.batch == b) bs.push_back(b);
  for (int64_t h = 0; h < p.heads; ++h) {
    const bool keep = choice.head ? *choice.head == h
                                  : !choice.kv_head || p.kv_head(h) == *choice.kv_head;
    if (keep) hs.push_back(h);
  }
  for (int64_t g = 0; g < p.kv_heads; ++g)
    for (int64_t h : hs)
      if (p.kv_head(h) == g) {
        gs.push_back(g);
        break;
      }
  Problem s = p;
  s.batch = static_cast<int64_t>(bs.size());
  s.heads = static_cast<int64_t>(hs.size());
  s.kv_heads = static_cast<int64_t>(gs.size());
  s.q = make_tensor(s.batch, s.heads, p.tq, p.dk);
  s.k = make_tensor(s.batch, s.kv_heads, p.tk, p.dk);
  s.v = make_tensor(s.batch, s.kv_heads, p.tk, p.dv);
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t ob = bs[static_cast<size_t>(b)];
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t d = 0; d < p.dk; ++d) s.q.at(b, h, i, d) = p.q.at(ob, hs[static_cast<size_t>(h)], i, d);
    for (int64_t g = 0; g < s.kv_heads; ++g)
      for (int64_t j = 0; j < p.tk; ++j) {
        const int64_t og = gs[static_cast<size_t>(g)];
        for (int64_t d = 0; d < p.dk; ++d) s.k.at(b, g, j, d) = p.k.at(ob, og, j, d);
        for (int64_t d = 0; d < p.dv; ++d) s.v.at(b, g, j, d) = p.v.at(ob, og, j, d);
      }
  }
  if (!p.key_valid.empty()) {
    s.key_valid.clear();
    for (int64_t ob : bs)
      for (int64_t j = 0; j < p.tk; ++j)
        s.key_valid.push_back(p.key_valid[static_cast<size_t>(ob * p.tk + j)]);
  }
  const auto slice_scores = [&](const auto& m) {
    auto out = m;
    out.batch = m.batch == 1 ? 1 : s.batch;
    out.heads = m.heads == 1 ? 1 : s.heads;
    out.data.assign(static_cast<size_t>(out.batch * out.heads * p.tq * p.tk), {});
    for (int64_t b = 0; b < out.batch; ++b)
      for (int64_t h = 0; h < out.heads; ++h)
        for (int64_t i = 0; i < p.tq; ++i)
          for (int64_t j = 0; j < p.tk; ++j)
            out.at(b, h, i, j, p.tq, p.tk) =
                m.at(bs[static_cast<size_t>(b)], hs[static_cast<size_t>(h)], i, j, p.tq, p.tk);
    return out;
  };
  if (p.mask) s.mask = slice_scores(*p.mask);
  if (p.bias) s.bias = slice_scores(*p.bias);
  if (!p.dout.empty()) {
    s.dout.clear();
    for (int64_t ob : bs)
      for (int64_t oh : hs)
        for (int64_t i = 0; i < p.tq; ++i)
          for (int64_t d = 0; d < p.dv; ++d)
            s.dout.push_back(p.dout[static_cast<size_t>(((ob * p.heads + oh) * p.tq + i) * p.dv + d)]);
  }
  if (!p.sink.empty()) {
    s.sink.clear();
    for (int64_t oh : hs) s.sink.push_back(p.sink[static_cast<size_t>(oh)]);
  }
  return s;
}

}  // namespace attncheck
