#include "paged_online_kernel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attncheck/dtype.h"
#include "impl_common.h"

namespace attncheck::impls {
namespace {

// Where the kernel reads its operands: the problem's layout, or a twin's
// buggy addressing of it.
class Reader {
 public:
  Reader(const Problem& p, const PagedOptions& o) : p_(p), o_(o) {
    if (o.block_table_stride_from_lengths && p.paged) {
      const PagedKv& pg = *p.paged;
      const int64_t longest = *std::max_element(pg.seqlens_k.begin(), pg.seqlens_k.end());
      stride_from_lengths_ = (longest + pg.page_size - 1) / pg.page_size;
    }
    if (o.block_table_global_index && p.paged) {
      // Sequence b's keys start at the sum of the earlier sequences' lengths.
      int64_t at = 0;
      for (int64_t n : p.paged->seqlens_k) {
        key_start_.push_back(at);
        at += n;
      }
    }
  }

  // q element (b, h, i, d) as stored, or 0 where a buggy row is past the end.
  double q(int64_t b, int64_t h, int64_t i, int64_t d) const {
    if (o_.cu_seqlens_off_by_one && p_.packed_q()) {
      const auto& cu = p_.packed->cu_seqlens_q;
      const int64_t row = cu[static_cast<size_t>(b + 1)] + i;
      if (row >= cu.back()) return 0;
      return p_.q.data[static_cast<size_t>(h * p_.q.strides[1] + row * p_.q.strides[2] +
                                           d * p_.q.strides[3])];
    }
    return p_.q_at(b, h, i, d);
  }

  // Offset of key row (b, g, j) of `t` (element d = 0), or -1 where a
  // buggy address is outside the tensor.
  int64_t key_row(const Tensor& t, int64_t b, int64_t g, int64_t j) const {
    const auto& s = t.strides;
    if (o_.cu_seqlens_off_by_one && p_.packed_k()) {
      const auto& cu = p_.packed->cu_seqlens_k;
      const int64_t row = cu[static_cast<size_t>(b + 1)] + j;
      return row >= cu.back() ? -1 : g * s[1] + row * s[2];
    }
    if (o_.block_table_global_index && p_.paged) {
      const PagedKv& pg = *p_.paged;
      const int64_t global = key_start_[static_cast<size_t>(b)] + j;
      const int64_t entry = b * pg.block_table_stride + global / pg.page_size;
      if (entry >= static_cast<int64_t>(pg.block_table.size())) return -1;
      const int64_t page = pg.block_table[static_cast<size_t>(entry)];
      if (page < 0 || page >= pg.num_pages) return -1;
      return page * s[0] + g * s[1] + (global % pg.page_size) * s[2];
    }
    if (p_.paged) {
      // The problem's addressing, past tk_b too (read_page_tail,
      // split_reads_max_seqlen_k): the page of key j and its slot.
      const PagedKv& pg = *p_.paged;
      if (o_.table_entries > 0 && j / pg.page_size >= o_.table_entries) return -1;
      const int64_t stride =
          o_.block_table_stride_from_lengths ? stride_from_lengths_ : pg.block_table_stride;
      const int64_t entry = b * stride + j / pg.page_size;
      if (j / pg.page_size >= pg.block_table_stride ||
          entry >= static_cast<int64_t>(pg.block_table.size())) {
        return -1;
      }
      const int64_t page = pg.block_table[static_cast<size_t>(entry)];
      return page * s[0] + g * s[1] + (j % pg.page_size) * s[2];
    }
    if (p_.packed_k() && p_.packed->cu_seqlens_k[static_cast<size_t>(b)] + j >=
                             p_.packed->cu_seqlens_k.back()) {
      return -1;  // past the packed keys (split_reads_max_seqlen_k)
    }
    return static_cast<int64_t>(p_.kv_offset(t, b, g, j, 0));
  }

  // Stored element d of the key row at `row` (-1: 0) as the cache decodes it.
  float kv(const Tensor& t, int64_t row, int64_t d) const {
    if (row < 0) return 0;
    const double x = t.data[static_cast<size_t>(row + d * t.strides[3])];
    if (o_.e4m3_as_e5m2 && p_.kv_dtype == DType::e4m3) {
      // The byte the cache stores, decoded in the wrong format; a value
      // E4M3 cannot hold is refused, never wrapped into another byte.
      return static_cast<float>(fp8_value(DType::e5m2, fp8_bits(DType::e4m3, x)));
    }
    return static_cast<float>(x);
  }

 private:
  const Problem& p_;
  const PagedOptions& o_;
  std::vector<int64_t> key_start_;
  int64_t stride_from_lengths_ = 0;
};

// The online softmax's running state over some keys: max, sum, the
// unnormalised P.V accumulator.
struct Running {
  float m = 0, l = 0;
  std::vector<float> acc;
  bool started = false;
};

// x rounded to the output format (exact for f32).
double to_output(const Problem& p, float x) {
  return p.dtype == DType::f32 ? static_cast<double>(x) : round_to(p.dtype, x);
}

// The online softmax of one row at a time over its keys, with the buffers
// of one block.
class RowPass {
 public:
  RowPass(const Problem& p, const PagedOptions& o, const Reader& read, float factor)
      : p_(p),
        o_(o),
        read_(read),
        factor_(factor),
        cap_(static_cast<float>(p.softcap)),
        q_(static_cast<size_t>(p.dk)),
        s_(kBlock),
        k_rows_(kBlock),
        v_rows_(kBlock) {}

  // The row's query (dk values) and the keys it visits, in order.
  std::vector<float>& q() { return q_; }
  std::vector<int64_t>& keys() { return keys_; }

  // The online softmax over keys()[begin, end) in blocks of kBlock, into
  // `st`, from a sink (has_sink) or from the first block's max alone.
  void run(Running& st, size_t begin, size_t end, int64_t b, int64_t g, bool has_sink, float sink) {
    const auto dk = static_cast<size_t>(p_.dk), dv = static_cast<size_t>(p_.dv);
    st.acc.assign(dv, 0.0f);
    st.m = sink;
    st.l = 0.0f;
    st.started = false;
    float sink_part = 0.0f;  // the sink's share of l (sink_lost_on_rescale)
    for (size_t c0 = begin; c0 < end; c0 += kBlock) {
      const size_t n = std::min(kBlock, end - c0);
      float block_max = -std::numeric_limits<float>::infinity();
      for (size_t c = 0; c < n; ++c) {
        const int64_t j = keys_[c0 + c];
        k_rows_[c] = read_.key_row(p_.k, b, g, j);
        v_rows_[c] = read_.key_row(p_.v, b, g, j);
        float dot = 0;
        for (size_t d = 0; d < dk; ++d)
          dot += q_[d] * read_.kv(p_.k, k_rows_[c], static_cast<int64_t>(d));
        float t = factor_ * dot;
        if (p_.softcap > 0) t = cap_ * std::tanh(t / cap_);
        s_[c] = t;
        block_max = std::max(block_max, t);
      }
      if (!st.started) {
        // The first block: its max includes the sink, whose exp starts
        // the sum, so a sink adds no rescale.
        st.started = true;
        st.m = has_sink ? std::max(sink, block_max) : block_max;
        st.l = has_sink ? std::exp(sink - st.m) : 0.0f;
        sink_part = st.l;
        if (o_.sink_in_numerator) std::fill(st.acc.begin(), st.acc.end(), st.l);
      } else if (block_max > st.m) {
        // Everything accumulated so far was relative to the old max.
        const float alpha = std::exp(st.m - block_max);
        if (o_.sink_lost_on_rescale) {
          st.l -= sink_part;
          sink_part = 0.0f;
        }
        st.l *= alpha;
        for (float& x : st.acc) x *= alpha;
        st.m = block_max;
      }
      for (size_t c = 0; c < n; ++c) {
        const float pj = std::exp(s_[c] - st.m);
        st.l += pj;
        const float pv = o_.p_cast ? static_cast<float>(round_to(*o_.p_cast, pj * o_.p_scale)) : pj;
        for (size_t d = 0; d < dv; ++d)
          st.acc[d] += pv * read_.kv(p_.v, v_rows_[c], static_cast<int64_t>(d));
      }
    }
  }

  // The split-K/V path of a row of more than kPagedSplitKeys keys: chunks
  // of that many keys, each an online softmax of its own (the sink joins
  // at the combine), then one shift of each to the largest max. Every
  // value is rescaled at most once per block but its chunk's first, and
  // once at the combine: within the declared ceil(n / 16) - 1 rescales,
  // as there are two chunks or more.
  void run_split(Running& st, int64_t b, int64_t g, bool has_sink, float sink) {
    constexpr auto kChunk = static_cast<size_t>(kPagedSplitKeys);
    const auto dv = static_cast<size_t>(p_.dv);
    st.acc.assign(dv, 0.0f);
    std::vector<Running> parts;
    float m =
        has_sink && !o_.split_combine_drops_sink ? sink : -std::numeric_limits<float>::infinity();
    for (size_t c0 = 0; c0 < keys_.size(); c0 += kChunk) {
      run(chunk_, c0, std::min(keys_.size(), c0 + kChunk), b, g,
          has_sink && o_.split_sink_per_chunk, sink);
      m = std::max(m, chunk_.m);
      parts.push_back(chunk_);
    }
    st.m = m;
    st.l = has_sink && !o_.split_sink_per_chunk && !o_.split_combine_drops_sink ? std::exp(sink - m)
                                                                                : 0.0f;
    for (const Running& part : parts) {
      const float alpha = std::exp(part.m - m);
      st.l += part.l * alpha;
      for (size_t d = 0; d < dv; ++d) st.acc[d] += part.acc[d] * alpha;
    }
    st.started = true;
  }

 private:
  static constexpr auto kBlock = static_cast<size_t>(kPagedKeyBlock);

  const Problem& p_;
  const PagedOptions& o_;
  const Reader& read_;
  float factor_, cap_;
  std::vector<float> q_, s_;
  std::vector<int64_t> k_rows_, v_rows_, keys_;
  Running chunk_;
};

// The keys query (b, i) at position `pos` visits among the first n_read,
// in order: the band, less padded keys (a dense problem's key_valid), in
// blocks of kPagedKeyBlock of them, so n keys take ceil(n / 16) blocks
// whatever the padding.
void visited_keys(const Problem& p, int64_t b, int64_t pos, int64_t n_read,
                  std::vector<int64_t>& keys) {
  int64_t first = 0, last = n_read - 1;
  if (p.causal) last = std::min(last, pos);
  if (p.window_left >= 0) first = std::max(first, pos - p.window_left);
  if (p.window_right >= 0) last = std::min(last, pos + p.window_right);
  keys.clear();
  for (int64_t j = std::max<int64_t>(first, 0); j <= last; ++j) {
    if (p.key_valid.empty() || p.key_valid[static_cast<size_t>(b * p.tk + j)]) keys.push_back(j);
  }
}

// Writes row (b, h, i)'s output and lse from its final state.
void write_row(const Problem& p, const PagedOptions& o, float v_descale, int64_t b, int64_t h,
               int64_t i, const Running& st, ForwardResult& r) {
  const auto dv = static_cast<size_t>(p.dv);
  const size_t row = row_index(p, b, h, i);
  if (!st.started) {
    // Only the sink: o = 0 and lse = sink_h exactly (SPEC 1.1).
    r.lse[row] = p.sink[static_cast<size_t>(h)];
    for (size_t d = 0; d < dv; ++d) {
      const float x = o.sink_in_numerator ? 1.0f : 0.0f;
      r.out[out_index(p, b, h, i, static_cast<int64_t>(d))] = to_output(p, x);
    }
    return;
  }
  for (size_t d = 0; d < dv; ++d) {
    float x = st.acc[d] / st.l;
    if (o.p_cast) x /= o.p_scale;
    for (int k = 0; k < o.v_descale_times; ++k) x *= v_descale;
    r.out[out_index(p, b, h, i, static_cast<int64_t>(d))] = to_output(p, x);
  }
  r.lse[row] = static_cast<double>(st.m + std::log(st.l));
}

}  // namespace

ForwardResult paged_online_forward(const Problem& p, const PagedOptions& o) {
  const auto rows = static_cast<size_t>(p.total_q() * p.heads);
  ForwardResult r;
  r.out.assign(rows * static_cast<size_t>(p.dv), 0.0);
  r.lse.assign(rows, -std::numeric_limits<double>::infinity());
  const Descales descale = p.descale.value_or(Descales{});
  // The split-K/V path for long rows (kPagedSplitKeys).
  const bool split = p.tk > kPagedSplitKeys;
  const bool no_descales = split && o.split_drops_descales;
  const auto factor = static_cast<float>(no_descales ? p.scale : p.scale * descale.q * descale.k);
  const auto v_descale = static_cast<float>(no_descales ? 1.0 : descale.v);
  const Reader read(p, o);
  RowPass pass(p, o, read, factor);
  std::vector<float>& q = pass.q();
  std::vector<int64_t>& keys = pass.keys();
  Running row_state;
  for (int64_t b = 0; b < p.batch; ++b) {
    // The sequence the kernel takes b for (cu_seqlens_staged_for_4).
    const int64_t sb = o.cu_seqlens_staged_for_4 && p.packed ? b % 4 : b;
    const int64_t tq_b = p.seq_tq(sb), tk_b = p.seq_tk(sb);
    // Keys the kernel reads: the sequence's, or to the end of its last page.
    int64_t n_read = o.read_page_tail && p.paged
                         ? (tk_b + p.paged->page_size - 1) / p.paged->page_size * p.paged->page_size
                         : tk_b;
    if (split && o.split_reads_max_seqlen_k) n_read = p.tk;
    const int64_t shift = o.align_from_max_lengths ? p.tk - p.tq : tk_b - tq_b;
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = p.kv_head(h);
      const bool has_sink = !p.sink.empty();
      const float sink = has_sink ? static_cast<float>(p.sink[static_cast<size_t>(h)]) : 0.0f;
      for (int64_t i = 0; i < tq_b; ++i) {
        const int64_t pos = p.align == Align::top_left ? i : i + shift;
        visited_keys(p, b, pos, n_read, keys);
        if (keys.empty() && !has_sink) {
          return ForwardResult::failure("query (b=" + std::to_string(b) +
                                        ", h=" + std::to_string(h) + ", i=" + std::to_string(i) +
                                        ") has no allowed key");
        }
        for (size_t d = 0; d < q.size(); ++d)
          q[d] = static_cast<float>(read.q(sb, h, i, static_cast<int64_t>(d)));
        const bool row_sink =
            has_sink && !(o.sink_in_block0 && !keys.empty() && keys.front() >= kPagedKeyBlock);
        if (!split || keys.size() <= static_cast<size_t>(kPagedSplitKeys)) {
          pass.run(row_state, 0, keys.size(), sb, g, row_sink, sink);
        } else {
          pass.run_split(row_state, sb, g, row_sink, sink);
        }
        write_row(p, o, v_descale, sb, h, i, row_state, r);
      }
    }
  }
  return r;
}

}  // namespace attncheck::impls
