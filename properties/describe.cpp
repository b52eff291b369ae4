// The shrunk problem as text, for failure reports and RapidCheck's printing.

#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "properties/harness.h"

namespace attncheck {

namespace {

std::string matrix(const Tensor& t, int64_t b, int64_t h, int64_t rows, int64_t cols) {
  std::string s = "[";
  for (int64_t i = 0; i < rows; ++i) {
    std::vector<double> row;
    for (int64_t d = 0; d < cols; ++d) row.push_back(t.at(b, h, i, d));
    s += fmt::format("{}[{}]", i ? ", " : "", fmt::join(row, ", "));
  }
  return s + "]";
}

template <typename T>
std::string score_matrix(const Broadcast<T>& m, int64_t b, int64_t h, int64_t tq, int64_t tk) {
  std::string s = "[";
  for (int64_t i = 0; i < tq; ++i) {
    std::vector<double> row;
    for (int64_t j = 0; j < tk; ++j) row.push_back(static_cast<double>(m.at(b, h, i, j, tq, tk)));
    s += fmt::format("{}[{}]", i ? ", " : "", fmt::join(row, ", "));
  }
  return s + "]";
}

}  // namespace

std::string describe_problem(const Problem& p) {
  std::ostringstream os;
  os << fmt::format(
      "    dtype {}  batch {}  heads {}  kv_heads {}  tq {}  tk {}  dk {}  dv {}\n"
      "    scale {}  softcap {}  causal {}  align {}  window [{}, {}]  strides q [{}]\n",
      dtype_name(p.dtype), p.batch, p.heads, p.kv_heads, p.tq, p.tk, p.dk, p.dv, p.scale,
      p.softcap, p.causal ? "yes" : "no",
      p.align == Align::top_left ? "top_left" : "bottom_right", p.window_left,
      p.window_right, fmt::join(p.q.strides, ", "));
  if (!p.key_valid.empty()) {
    std::vector<int> kv(p.key_valid.begin(), p.key_valid.end());
    os << fmt::format("    key_valid [b][tk] = [{}]\n", fmt::join(kv, ", "));
  }
  const bool small = p.batch * p.heads <= 4 && p.tq <= 8 && p.tk <= 8 && p.dk <= 8 && p.dv <= 8;
  if (!small) {
    os << "    (values omitted: the problem is large; see the fixture)\n";
    return os.str();
  }
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = p.kv_head(h);
      os << fmt::format("    [b={}, h={}] Q = {}\n", b, h, matrix(p.q, b, h, p.tq, p.dk));
      if (h % (p.heads / p.kv_heads) == 0) {
        os << fmt::format("    [b={}, kv_h={}] K = {}\n", b, g, matrix(p.k, b, g, p.tk, p.dk));
        os << fmt::format("    [b={}, kv_h={}] V = {}\n", b, g, matrix(p.v, b, g, p.tk, p.dv));
      }
      if (p.mask) os << fmt::format("    [b={}, h={}] mask = {}\n", b, h, score_matrix(*p.mask, b, h, p.tq, p.tk));
      if (p.bias) os << fmt::format("    [b={}, h={}] bias = {}\n", b, h, score_matrix(*p.bias, b, h, p.tq, p.tk));
    }
  return os.str();
}

void showValue(const Problem& p, std::ostream& os) { os << "\n" << describe_problem(p); }

}  // namespace attncheck
