// The channel between the harness and a worker (host/wire.h): frames on
// the socket, and the byte codec of problems, layer calls, results and
// ImplInfo (problems and ImplInfo field by field, from core/fields.h).

#include "host/wire.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>

#include <boost/pfr/core.hpp>
#include <fmt/format.h>

#include "core/fields.h"

namespace attncheck::host_detail {
namespace {

// The byte codec, by type: a trivially copyable value as its bytes, a
// string or vector as its size then its elements, an optional as a
// presence byte then its value, a struct of the problem model (Tensor,
// Broadcast, Descales, PackedSeqs, PagedKv, PrecisionTraits, Limits,
// DTypeCombo, ImplPath) member by member (Boost.PFR). Problem and ImplInfo walk
// their field lists (core/fields.h), so a new member crosses without a
// line here.

template <typename T>
void put_value(Writer& w, const T& x) {
  if constexpr (std::is_same_v<T, std::string>) {
    w.put_str(x);
  } else if constexpr (fields::IsVector<T>::value) {
    if constexpr (std::is_trivially_copyable_v<typename T::value_type>) {
      w.put_vec(x);
    } else {
      w.put<uint64_t>(x.size());
      for (const auto& e : x) put_value(w, e);
    }
  } else if constexpr (fields::IsOptional<T>::value) {
    w.put<uint8_t>(x.has_value());
    if (x) put_value(w, *x);
  } else if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) {
    w.put(x);
  } else if constexpr (std::is_same_v<T, std::array<int64_t, 4>>) {
    w.put(x);
  } else {
    boost::pfr::for_each_field(x, [&](const auto& member) { put_value(w, member); });
  }
}

template <typename T>
void get_value(Reader& r, T& x) {
  if constexpr (std::is_same_v<T, std::string>) {
    x = r.get_str();
  } else if constexpr (fields::IsVector<T>::value) {
    if constexpr (std::is_trivially_copyable_v<typename T::value_type>) {
      x = r.get_vec<typename T::value_type>();
    } else {
      // Each element is at least one byte: a count beyond what is left is
      // a malformed message, not an allocation.
      const auto n = r.get<uint64_t>();
      if (n > r.remaining()) throw WireError("truncated message");
      x.resize(n);
      for (auto& e : x) get_value(r, e);
    }
  } else if constexpr (fields::IsOptional<T>::value) {
    if (!r.get<uint8_t>()) {
      x.reset();
      return;
    }
    get_value(r, x.emplace());
  } else if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) {
    x = r.get<T>();
  } else if constexpr (std::is_same_v<T, std::array<int64_t, 4>>) {
    x = r.get<T>();
  } else {
    boost::pfr::for_each_field(x, [&](auto& member) { get_value(r, member); });
  }
}

// What crosses the wire of a Problem or an ImplInfo: every field its list
// marks kWire (all of them: both ends are one build).
template <typename T>
void put_fields(Writer& w, const T& x) {
  const auto put = [&](const fields::Field& f, const auto& member) {
    if (f.in(fields::kWire)) put_value(w, member);
  };
  if constexpr (std::is_same_v<T, Problem>) {
    fields::for_each_problem_field(x, put);
  } else {
    fields::for_each_impl_info_field(x, put);
  }
}

template <typename T>
T get_fields(Reader& r) {
  T x;
  const auto get = [&](const fields::Field& f, auto& member) {
    if (f.in(fields::kWire)) get_value(r, member);
  };
  if constexpr (std::is_same_v<T, Problem>) {
    fields::for_each_problem_field(x, get);
  } else {
    fields::for_each_impl_info_field(x, get);
  }
  return x;
}

}  // namespace

std::pair<const char*, size_t> Writer::run_at(size_t at) const {
  // Walk the spans in order: the logical message is bytes_ with each
  // span's bytes inserted at its place.
  size_t logical = 0, copied = 0;  // where the walk is, in each
  for (const Span& s : spans_) {
    const size_t before = s.at - copied;  // copied bytes before this span
    if (at < logical + before) {
      return {bytes_.data() + copied + (at - logical), before - (at - logical)};
    }
    logical += before;
    copied = s.at;
    if (at < logical + s.size) return {s.data + (at - logical), s.size - (at - logical)};
    logical += s.size;
  }
  return {bytes_.data() + copied + (at - logical), bytes_.size() - copied - (at - logical)};
}

void Reader::release(size_t at, size_t n) const {
  // The pages wholly inside [at, at + n): read already, never again.
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<uintptr_t>(bytes_.data()) + at;
  const uintptr_t first = (start + page - 1) / page * page, end = (start + n) / page * page;
  if (end > first) ::madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);
}

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

void put_problem(Writer& w, const Problem& p) { put_fields(w, p); }

Problem get_problem(Reader& r) { return get_fields<Problem>(r); }

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

void put_info(Writer& w, const ImplInfo& i) { put_fields(w, i); }

ImplInfo get_info(Reader& r) { return get_fields<ImplInfo>(r); }

void put_forward_result(Writer& w, const ForwardResult& f, std::optional<int64_t> score) {
  w.put(f.status);
  w.put_str(f.error);
  w.put_vec(f.out);
  w.put_vec(f.weights);
  w.put_vec(f.lse);
  w.put<int64_t>(score.value_or(-1));
  w.put<int32_t>(f.path);
}

namespace {

// A status as the wire carries it: one of Status's values, else the reply
// is malformed (a forged status must never reach the properties, which
// read the arrays of every status they do not know).
Status get_status(Reader& r) {
  const auto raw = r.get<std::underlying_type_t<Status>>();
  if (raw != static_cast<int>(Status::ok) && raw != static_cast<int>(Status::error) &&
      raw != static_cast<int>(Status::unsupported)) {
    throw WireError(fmt::format("status {}, which is none of ok, error, unsupported", raw));
  }
  return static_cast<Status>(raw);
}

// An error text within kMaxTextBytes.
std::string get_text(Reader& r) {
  std::string s = r.get_str();
  if (s.size() > kMaxTextBytes) throw WireError(fmt::format("an error text of {} bytes", s.size()));
  return s;
}

}  // namespace

ForwardResult get_forward_result(Reader& r, std::optional<int64_t>& score) {
  ForwardResult f;
  f.status = get_status(r);
  f.error = get_text(r);
  f.out = r.get_vec<double>();
  f.weights = r.get_vec<double>();
  f.lse = r.get_vec<double>();
  const auto n = r.get<int64_t>();
  if (n < -1) throw WireError(fmt::format("a score count of {}", n));
  score = n < 0 ? std::nullopt : std::optional<int64_t>(n);
  f.path = r.get<int32_t>();
  if (f.path < -1) throw WireError(fmt::format("path {}", f.path));
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
  b.status = get_status(r);
  b.error = get_text(r);
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
  y.status = get_status(r);
  y.error = get_text(r);
  y.y = r.get_vec<double>();
  return y;
}

}  // namespace attncheck::host_detail
