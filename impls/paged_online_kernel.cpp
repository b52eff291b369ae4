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
  Reader(const Problem& p, const PagedBugs& bugs) : p_(p), bugs_(bugs) {
    if (bugs.block_table_stride_from_lengths && p.paged) {
      const PagedKv& pg = *p.paged;
      const int64_t longest = *std::max_element(pg.seqlens_k.begin(), pg.seqlens_k.end());
      stride_from_lengths_ = (longest + pg.page_size - 1) / pg.page_size;
    }
    if (bugs.block_table_global_index && p.paged) {
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
    if (bugs_.cu_seqlens_off_by_one && p_.packed_q()) {
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
    if (bugs_.cu_seqlens_off_by_one && p_.packed_k()) {
      const auto& cu = p_.packed->cu_seqlens_k;
      const int64_t row = cu[static_cast<size_t>(b + 1)] + j;
      return row >= cu.back() ? -1 : g * s[1] + row * s[2];
    }
    if (bugs_.block_table_global_index && p_.paged) {
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
      if (bugs_.table_entries > 0 && j / pg.page_size >= bugs_.table_entries) return -1;
      const int64_t stride = bugs_.block_table_stride_from_lengths ? stride_from_lengths_
                                                                   : pg.block_table_stride;
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
    if (bugs_.e4m3_as_e5m2 && p_.kv_dtype == DType::e4m3) {
      // The byte the cache stores, decoded in the wrong format; a value
      // E4M3 cannot hold is refused, never wrapped into another byte.
      return static_cast<float>(fp8_value(DType::e5m2, fp8_bits(DType::e4m3, x)));
    }
    return static_cast<float>(x);
  }

 private:
  const Problem& p_;
  const PagedBugs& bugs_;
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

}  // namespace

ForwardResult paged_online_forward(const Problem& p, const PagedBugs& bugs) {
  const auto rows = static_cast<size_t>(p.total_q() * p.heads);
  ForwardResult r;
  r.out.assign(rows * static_cast<size_t>(p.dv), 0.0);
  r.lse.assign(rows, -std::numeric_limits<double>::infinity());
  const Descales descale = p.descale.value_or(Descales{});
  // The split-K/V path for long rows (kPagedSplitKeys).
  const bool split = p.tk > kPagedSplitKeys;
  const bool no_descales = split && bugs.split_drops_descales;
  const auto factor = static_cast<float>(no_descales ? p.scale : p.scale * descale.q * descale.k);
  const auto v_descale = static_cast<float>(no_descales ? 1.0 : descale.v);
  const auto cap = static_cast<float>(p.softcap);
  const Reader read(p, bugs);
  const auto dk = static_cast<size_t>(p.dk), dv = static_cast<size_t>(p.dv);
  constexpr auto kBlock = static_cast<size_t>(kPagedKeyBlock);
  std::vector<float> q(dk), s(kBlock);
  std::vector<int64_t> k_rows(kBlock), v_rows(kBlock), keys;
  Running row_state, chunk;
  // The online softmax over keys[begin, end) in blocks of kBlock, into
  // `st`, from a sink (has_sink) or from the first block's max alone.
  const auto run = [&](Running& st, size_t begin, size_t end, int64_t b, int64_t g, bool has_sink,
                       float sink) {
    st.acc.assign(dv, 0.0f);
    st.m = sink;
    st.l = 0.0f;
    st.started = false;
    float sink_part = 0.0f;  // the sink's share of l (sink_lost_on_rescale)
    for (size_t c0 = begin; c0 < end; c0 += kBlock) {
      const size_t n = std::min(kBlock, end - c0);
      float block_max = -std::numeric_limits<float>::infinity();
      for (size_t c = 0; c < n; ++c) {
        const int64_t j = keys[c0 + c];
        k_rows[c] = read.key_row(p.k, b, g, j);
        v_rows[c] = read.key_row(p.v, b, g, j);
        float dot = 0;
        for (size_t d = 0; d < dk; ++d) dot += q[d] * read.kv(p.k, k_rows[c], static_cast<int64_t>(d));
        float t = factor * dot;
        if (p.softcap > 0) t = cap * std::tanh(t / cap);
        s[c] = t;
        block_max = std::max(block_max, t);
      }
      if (!st.started) {
        // The first block: its max includes the sink, whose exp starts
        // the sum, so a sink adds no rescale.
        st.started = true;
        st.m = has_sink ? std::max(sink, block_max) : block_max;
        st.l = has_sink ? std::exp(sink - st.m) : 0.0f;
        sink_part = st.l;
        if (bugs.sink_in_numerator) std::fill(st.acc.begin(), st.acc.end(), st.l);
      } else if (block_max > st.m) {
        // Everything accumulated so far was relative to the old max.
        const float alpha = std::exp(st.m - block_max);
        if (bugs.sink_lost_on_rescale) {
          st.l -= sink_part;
          sink_part = 0.0f;
        }
        st.l *= alpha;
        for (float& x : st.acc) x *= alpha;
        st.m = block_max;
      }
      for (size_t c = 0; c < n; ++c) {
        const float pj = std::exp(s[c] - st.m);
        st.l += pj;
        const float pv =
            bugs.p_cast ? static_cast<float>(round_to(*bugs.p_cast, pj * bugs.p_scale)) : pj;
        for (size_t d = 0; d < dv; ++d) st.acc[d] += pv * read.kv(p.v, v_rows[c], static_cast<int64_t>(d));
      }
    }
  };
  for (int64_t b = 0; b < p.batch; ++b) {
    // The sequence the kernel takes b for (cu_seqlens_staged_for_4).
    const int64_t sb = bugs.cu_seqlens_staged_for_4 && p.packed ? b % 4 : b;
    const int64_t tq_b = p.seq_tq(sb), tk_b = p.seq_tk(sb);
    // Keys the kernel reads: the sequence's, or to the end of its last page.
    int64_t n_read =
        bugs.read_page_tail && p.paged
            ? (tk_b + p.paged->page_size - 1) / p.paged->page_size * p.paged->page_size
            : tk_b;
    if (split && bugs.split_reads_max_seqlen_k) n_read = p.tk;
    const int64_t shift = bugs.align_from_max_lengths ? p.tk - p.tq : tk_b - tq_b;
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = p.kv_head(h);
      const bool has_sink = !p.sink.empty();
      const float sink = has_sink ? static_cast<float>(p.sink[static_cast<size_t>(h)]) : 0.0f;
      for (int64_t i = 0; i < tq_b; ++i) {
        const int64_t pos = p.align == Align::top_left ? i : i + shift;
        int64_t first = 0, last = n_read - 1;
        if (p.causal) last = std::min(last, pos);
        if (p.window_left >= 0) first = std::max(first, pos - p.window_left);
        if (p.window_right >= 0) last = std::min(last, pos + p.window_right);
        // The keys it visits, in order: the band, less padded keys (a
        // dense problem's key_valid), in blocks of kPagedKeyBlock of them,
        // so n keys take ceil(n / 16) blocks whatever the padding.
        keys.clear();
        for (int64_t j = std::max<int64_t>(first, 0); j <= last; ++j) {
          if (p.key_valid.empty() || p.key_valid[static_cast<size_t>(b * p.tk + j)])
            keys.push_back(j);
        }
        if (keys.empty() && !has_sink) {
          return ForwardResult::failure("query (b=" + std::to_string(b) +
                                        ", h=" + std::to_string(h) + ", i=" + std::to_string(i) +
                                        ") has no allowed key");
        }
        for (size_t d = 0; d < dk; ++d)
          q[d] = static_cast<float>(read.q(sb, h, i, static_cast<int64_t>(d)));
        constexpr auto kChunk = static_cast<size_t>(kPagedSplitKeys);
        if (!split || keys.size() <= kChunk) {
          run(row_state, 0, keys.size(), sb, g, has_sink, sink);
        } else {
          // Chunks of kChunk keys, each an online softmax of its own (the
          // sink joins at the combine), then one shift of each to the
          // largest max. Every value is rescaled at most once per block
          // but its chunk's first, and once at the combine: within the
          // declared ceil(n / 16) - 1 rescales, as there are two chunks
          // or more.
          Running& st = row_state;
          st.acc.assign(dv, 0.0f);
          std::vector<Running> parts;
          float m = has_sink && !bugs.split_combine_drops_sink
                        ? sink
                        : -std::numeric_limits<float>::infinity();
          for (size_t c0 = 0; c0 < keys.size(); c0 += kChunk) {
            run(chunk, c0, std::min(keys.size(), c0 + kChunk), sb, g,
                has_sink && bugs.split_sink_per_chunk, sink);
            m = std::max(m, chunk.m);
            parts.push_back(chunk);
          }
          st.m = m;
          st.l = has_sink && !bugs.split_sink_per_chunk && !bugs.split_combine_drops_sink
                     ? std::exp(sink - m)
                     : 0.0f;
          for (const Running& part : parts) {
            const float alpha = std::exp(part.m - m);
            st.l += part.l * alpha;
            for (size_t d = 0; d < dv; ++d) st.acc[d] += part.acc[d] * alpha;
          }
          st.started = true;
        }
        const Running& st = row_state;
        const size_t row = row_index(p, sb, h, i);
        if (!st.started) {
          // Only the sink: o = 0 and lse = sink_h exactly (SPEC 1.1).
          r.lse[row] = p.sink[static_cast<size_t>(h)];
          for (size_t d = 0; d < dv; ++d) {
            const float x = bugs.sink_in_numerator ? 1.0f : 0.0f;
            r.out[out_index(p, sb, h, i, static_cast<int64_t>(d))] = to_output(p, x);
          }
          continue;
        }
        for (size_t d = 0; d < dv; ++d) {
          float x = st.acc[d] / st.l;
          if (bugs.p_cast) x /= bugs.p_scale;
          for (int k = 0; k < bugs.v_descale_times; ++k) x *= v_descale;
          r.out[out_index(p, sb, h, i, static_cast<int64_t>(d))] = to_output(p, x);
        }
        r.lse[row] = static_cast<double>(st.m + std::log(st.l));
      }
    }
  }
  return r;
}

}  // namespace attncheck::impls
