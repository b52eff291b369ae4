// The channel between the harness and a worker (host/wire.h): frames on
// the socket, and the byte codec of problems, layer calls, results and
// ImplInfo.

#include "host/wire.h"

#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>

namespace attncheck::host_detail {
namespace {

void put_tensor(Writer& w, const Tensor& t) {
  w.put_vec(t.data);
  w.put(t.strides);
}

Tensor get_tensor(Reader& r) {
  Tensor t;
  t.data = r.get_vec<double>();
  t.strides = r.get<std::array<int64_t, 4>>();
  return t;
}

template <typename T>
void put_broadcast(Writer& w, const std::optional<Broadcast<T>>& b) {
  w.put<uint8_t>(b.has_value());
  if (!b) return;
  w.put(b->batch);
  w.put(b->heads);
  w.put_vec(b->data);
}

template <typename T>
std::optional<Broadcast<T>> get_broadcast(Reader& r) {
  if (!r.get<uint8_t>()) return std::nullopt;
  Broadcast<T> b;
  b.batch = r.get<int64_t>();
  b.heads = r.get<int64_t>();
  b.data = r.get_vec<T>();
  return b;
}

// An optional value: a presence byte, then the value.
template <typename T>
void put_optional(Writer& w, const std::optional<T>& x) {
  w.put<uint8_t>(x.has_value());
  if (x) w.put(*x);
}

template <typename T>
std::optional<T> get_optional(Reader& r) {
  if (!r.get<uint8_t>()) return std::nullopt;
  return r.get<T>();
}

void put_packed(Writer& w, const std::optional<PackedSeqs>& packed) {
  w.put<uint8_t>(packed.has_value());
  if (!packed) return;
  w.put_vec(packed->cu_seqlens_q);
  w.put_vec(packed->cu_seqlens_k);
}

std::optional<PackedSeqs> get_packed(Reader& r) {
  if (!r.get<uint8_t>()) return std::nullopt;
  PackedSeqs packed;
  packed.cu_seqlens_q = r.get_vec<int64_t>();
  packed.cu_seqlens_k = r.get_vec<int64_t>();
  return packed;
}

void put_paged(Writer& w, const std::optional<PagedKv>& paged) {
  w.put<uint8_t>(paged.has_value());
  if (!paged) return;
  w.put_vec(paged->seqlens_k);
  w.put_vec(paged->block_table);
  for (int64_t x : {paged->block_table_stride, paged->page_size, paged->num_pages}) w.put(x);
}

std::optional<PagedKv> get_paged(Reader& r) {
  if (!r.get<uint8_t>()) return std::nullopt;
  PagedKv paged;
  paged.seqlens_k = r.get_vec<int64_t>();
  paged.block_table = r.get_vec<int64_t>();
  for (int64_t* x : {&paged.block_table_stride, &paged.page_size, &paged.num_pages}) {
    *x = r.get<int64_t>();
  }
  return paged;
}

}  // namespace

bool send_frame(int fd, const std::string& payload) {
  // The length, then the payload where it is (no copy: a request can be a
  // gigabyte). MSG_NOSIGNAL: a dead peer is an error return, not a SIGPIPE.
  const uint64_t n = payload.size();
  const auto send_all = [fd](const char* data, size_t size) {
    size_t done = 0;
    while (done < size) {
      const ssize_t k = ::send(fd, data + done, size - done, MSG_NOSIGNAL);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) return false;
      done += static_cast<size_t>(k);
    }
    return true;
  };
  return send_all(reinterpret_cast<const char*>(&n), sizeof n) &&
         send_all(payload.data(), payload.size());
}

bool read_exact(int fd, char* dst, size_t n) {
  while (n > 0) {
    const ssize_t k = ::read(fd, dst, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    dst += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

void put_problem(Writer& w, const Problem& p) {
  w.put(p.dtype);
  for (int64_t x : {p.batch, p.heads, p.kv_heads, p.tq, p.tk, p.dk, p.dv}) w.put(x);
  put_tensor(w, p.q);
  put_tensor(w, p.k);
  put_tensor(w, p.v);
  w.put_vec(p.key_valid);
  put_broadcast(w, p.mask);
  put_broadcast(w, p.bias);
  w.put<uint8_t>(p.causal);
  w.put(p.align);
  w.put(p.window_left);
  w.put(p.window_right);
  w.put(p.scale);
  w.put(p.softcap);
  w.put_vec(p.dout);
  put_optional(w, p.q_dtype);
  put_optional(w, p.kv_dtype);
  put_optional(w, p.descale);
  w.put_vec(p.sink);
  put_packed(w, p.packed);
  put_paged(w, p.paged);
}

Problem get_problem(Reader& r) {
  Problem p;
  p.dtype = r.get<DType>();
  for (int64_t* x : {&p.batch, &p.heads, &p.kv_heads, &p.tq, &p.tk, &p.dk, &p.dv}) {
    *x = r.get<int64_t>();
  }
  p.q = get_tensor(r);
  p.k = get_tensor(r);
  p.v = get_tensor(r);
  p.key_valid = r.get_vec<uint8_t>();
  p.mask = get_broadcast<uint8_t>(r);
  p.bias = get_broadcast<double>(r);
  p.causal = r.get<uint8_t>() != 0;
  p.align = r.get<Align>();
  p.window_left = r.get<int64_t>();
  p.window_right = r.get<int64_t>();
  p.scale = r.get<double>();
  p.softcap = r.get<double>();
  p.dout = r.get_vec<double>();
  p.q_dtype = get_optional<DType>(r);
  p.kv_dtype = get_optional<DType>(r);
  p.descale = get_optional<Descales>(r);
  p.sink = r.get_vec<double>();
  p.packed = get_packed(r);
  p.paged = get_paged(r);
  return p;
}

void put_layer_call(Writer& w, const LayerWeights& lw, const LayerInput& x) {
  w.put(lw.d_model);
  for (const auto* m : {&lw.w_q, &lw.w_k, &lw.w_v, &lw.w_o}) w.put_vec(*m);
  w.put(x.dtype);
  for (int64_t n : {x.batch, x.tq, x.tk, x.heads}) w.put(n);
  w.put_vec(x.x_q);
  w.put_vec(x.x_kv);
  w.put_vec(x.key_valid);
  w.put<uint8_t>(x.causal);
  w.put(x.align);
}

std::pair<LayerWeights, LayerInput> get_layer_call(Reader& r) {
  LayerWeights lw;
  LayerInput x;
  lw.d_model = r.get<int64_t>();
  for (auto* m : {&lw.w_q, &lw.w_k, &lw.w_v, &lw.w_o}) *m = r.get_vec<double>();
  x.dtype = r.get<DType>();
  for (int64_t* n : {&x.batch, &x.tq, &x.tk, &x.heads}) *n = r.get<int64_t>();
  x.x_q = r.get_vec<double>();
  x.x_kv = r.get_vec<double>();
  x.key_valid = r.get_vec<uint8_t>();
  x.causal = r.get<uint8_t>() != 0;
  x.align = r.get<Align>();
  return {std::move(lw), std::move(x)};
}

void put_info(Writer& w, const ImplInfo& i) {
  w.put_str(i.name);
  w.put(i.kind);
  w.put(i.dtypes);
  w.put_vec(i.combos);
  w.put(i.features);
  w.put(i.empty_rows);
  w.put(i.precision);
  w.put(i.limits);
  w.put_str(i.description);
  w.put_str(i.caught_by);
  w.put_str(i.origin);
}

ImplInfo get_info(Reader& r) {
  ImplInfo i;
  i.name = r.get_str();
  i.kind = r.get<Kind>();
  i.dtypes = r.get<uint32_t>();
  i.combos = r.get_vec<DTypeCombo>();
  i.features = r.get<Features>();
  i.empty_rows = r.get<EmptyRowPolicy>();
  i.precision = r.get<PrecisionTraits>();
  i.limits = r.get<Limits>();
  i.description = r.get_str();
  i.caught_by = r.get_str();
  i.origin = r.get_str();
  return i;
}

void put_forward_result(Writer& w, const ForwardResult& f, std::optional<int64_t> score) {
  w.put(f.status);
  w.put_str(f.error);
  w.put_vec(f.out);
  w.put_vec(f.weights);
  w.put_vec(f.lse);
  w.put<int64_t>(score.value_or(-1));
}

ForwardResult get_forward_result(Reader& r, std::optional<int64_t>& score) {
  ForwardResult f;
  f.status = r.get<Status>();
  f.error = r.get_str();
  f.out = r.get_vec<double>();
  f.weights = r.get_vec<double>();
  f.lse = r.get_vec<double>();
  const auto n = r.get<int64_t>();
  score = n < 0 ? std::nullopt : std::optional<int64_t>(n);
  return f;
}

void put_backward_result(Writer& w, const BackwardResult& b) {
  w.put(b.status);
  w.put_str(b.error);
  w.put_vec(b.dq);
  w.put_vec(b.dk);
  w.put_vec(b.dv);
  w.put_vec(b.dsink);
}

BackwardResult get_backward_result(Reader& r) {
  BackwardResult b;
  b.status = r.get<Status>();
  b.error = r.get_str();
  b.dq = r.get_vec<double>();
  b.dk = r.get_vec<double>();
  b.dv = r.get_vec<double>();
  b.dsink = r.get_vec<double>();
  return b;
}

void put_layer_result(Writer& w, const LayerResult& y) {
  w.put(y.status);
  w.put_str(y.error);
  w.put_vec(y.y);
}

LayerResult get_layer_result(Reader& r) {
  LayerResult y;
  y.status = r.get<Status>();
  y.error = r.get_str();
  y.y = r.get_vec<double>();
  return y;
}

}  // namespace attncheck::host_detail
