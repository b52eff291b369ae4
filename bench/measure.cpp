#include "measure.h"

#include <dlfcn.h>
#include <malloc.h>
#include <sys/types.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "attncheck/layer.h"
#include "host/plugin_loader.h"
#include "attncheck/problem.h"
#include "host/threads.h"
#include "gru.h"

namespace attncheck::bench {
namespace {

// Inputs are multiples of 1/128 in [-1, 1]: exactly representable in every
// dtype (bf16 has 8 significant bits), so every implementation, whatever
// its format, receives the same values from the same seed.
class Values {
 public:
  explicit Values(uint64_t seed) : rng_(seed) {}
  double next() { return static_cast<double>(static_cast<int64_t>(rng_() % 257) - 128) / 128.0; }

 private:
  std::mt19937_64 rng_;
};

Problem make_problem(const PointSpec& s) {
  Problem p = Problem::zeros(s.dtype, s.batch, s.heads, s.heads, s.seq, s.seq, s.dk, s.dk);
  Values values(s.seed);
  for (double& x : p.q.data) x = values.next();
  for (double& x : p.k.data) x = values.next();
  for (double& x : p.v.data) x = values.next();
  p.causal = s.causal;
  p.window_left = s.window_left;
  p.window_right = s.window_right;
  return p;
}

// The children of `dir` (/proc/self or /proc/PID).
std::vector<pid_t> children_in(const std::filesystem::path& dir) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(dir / "task", ec)) {
    std::ifstream in(task.path() / "children");
    pid_t pid = 0;
    while (in >> pid) out.push_back(pid);
  }
  return out;
}

// The processes this one started that still run: a Python subject's worker
// (host/isolation.h), where each of its calls runs, seen through the relay
// and the init that contain it (host/containment.h), which use nothing of
// a call. A C++ subject has none, so for it the figures below are this
// process's alone.
std::vector<pid_t> child_processes() {
  std::vector<pid_t> out;
  std::vector<pid_t> todo = children_in("/proc/self");
  while (!todo.empty()) {
    const pid_t pid = todo.back();
    todo.pop_back();
    std::ifstream comm(fmt::format("/proc/{}/comm", pid));
    std::string name;
    std::getline(comm, name);
    if (name == "attncheck-relay" || name == "attncheck-init") {
      for (const pid_t k : children_in(fmt::format("/proc/{}", pid))) todo.push_back(k);
    } else {
      out.push_back(pid);
    }
  }
  return out;
}

// This process (0) and its children: whose CPU time and memory a call uses.
std::vector<pid_t> measured_processes() {
  std::vector<pid_t> out{0};
  for (pid_t pid : child_processes()) out.push_back(pid);
  return out;
}

std::string proc_path(pid_t pid, const char* file) {
  return pid ? fmt::format("/proc/{}/{}", pid, file) : fmt::format("/proc/self/{}", file);
}

// Resident size now and its peak (VmRSS, VmHWM of /proc/PID/status), bytes.
std::optional<int64_t> status_field(pid_t pid, const char* field) {
  std::ifstream in(proc_path(pid, "status"));
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(key.size())) * 1024;
  }
  return std::nullopt;
}

// The sum of `field` over `pids`; nullopt when this process's is unreadable
// (a child that has gone counts 0).
std::optional<int64_t> status_sum(const std::vector<pid_t>& pids, const char* field) {
  int64_t sum = 0;
  for (pid_t pid : pids) {
    const std::optional<int64_t> v = status_field(pid, field);
    if (!v && pid == 0) return std::nullopt;
    sum += v.value_or(0);
  }
  return sum;
}

// Resets VmHWM of each of `pids` to its current resident size; false where
// the kernel or a sandbox refuses.
bool reset_peak(const std::vector<pid_t>& pids) {
  bool all = true;
  for (pid_t pid : pids) {
    std::FILE* f = std::fopen(proc_path(pid, "clear_refs").c_str(), "w");
    if (!f) {
      all = false;
      continue;
    }
    const bool ok = std::fputs("5", f) >= 0;
    all = std::fclose(f) == 0 && ok && all;
  }
  return all;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU seconds of each of this process and its children, by pid (0: this
// one); a child that has gone is left out.
std::map<pid_t, double> cpu_seconds() {
  std::map<pid_t, double> out;
  for (pid_t pid : measured_processes()) {
    clockid_t clock = CLOCK_PROCESS_CPUTIME_ID;
    if (pid && clock_getcpuclockid(pid, &clock) != 0) continue;
    timespec t{};
    if (clock_gettime(clock, &t) != 0) continue;
    out[pid] = static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  }
  return out;
}

// CPU time used between two cpu_seconds() readings: a worker started in
// between counts from its start.
double cpu_used(const std::map<pid_t, double>& before, const std::map<pid_t, double>& after) {
  double used = 0;
  for (const auto& [pid, t] : after) {
    const auto it = before.find(pid);
    used += t - (it == before.end() ? 0 : it->second);
  }
  return used;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// One call of the subject; returns the status and fills `counted` when the
// implementation counts its score elements.
using Call = std::function<std::string(std::string& message, std::optional<int64_t>& counted)>;

std::string status_name(Status st) {
  switch (st) {
    case Status::ok: return "ok";
    case Status::unsupported: return "unsupported";
    default: return "error";
  }
}

// Layer weights for width d: entries k/128 scaled by 2^-4, exact in every
// dtype, about 1/sqrt(d) in size for the usual widths.
LayerWeights make_weights(int64_t d, Values& values) {
  LayerWeights w;
  w.d_model = d;
  for (auto* m : {&w.w_q, &w.w_k, &w.w_v, &w.w_o}) {
    m->resize(static_cast<size_t>(d * d));
    for (double& x : *m) x = values.next() / 16.0;
  }
  return w;
}

// Builds the call for `s`; inputs are made here, outside the timed region.
struct Subject {
  Call call;
  std::optional<int64_t> parameters;
  int64_t gru_hidden = 0;
  double flops = 0;
  std::shared_ptr<void> keep;  // the inputs the call refers to
};

Subject make_subject(const PointSpec& s, const std::vector<std::shared_ptr<const Implementation>>& plugins) {
  Subject out;
  const int64_t d = s.heads * s.dk;
  const double attention_flops = 2.0 * 2.0 * static_cast<double>(s.dk) * static_cast<double>(allowed_pairs(s));
  const double projection_flops = 4.0 * 2.0 * static_cast<double>(s.batch * s.seq) * static_cast<double>(d * d);
  if (s.subject == kGruSubject) {
    // Matched to the attention layer's 4 d^2 projections.
    const int64_t hidden = gru_hidden_matching(d, 4 * d * d);
    auto gru = std::make_shared<GruLayer>(make_gru(d, hidden, s.seed));
    auto x = std::make_shared<std::vector<float>>(static_cast<size_t>(s.batch * s.seq * d));
    Values values(s.seed);
    for (float& v : *x) v = static_cast<float>(values.next());
    out.parameters = gru_parameters(d, hidden);
    out.gru_hidden = hidden;
    out.flops = gru_flops(d, hidden, s.batch, s.seq);
    out.call = [gru, x, s](std::string&, std::optional<int64_t>&) {
      const std::vector<float> h = gru_forward(*gru, *x, s.batch, s.seq);
      return std::string(h.empty() ? "error" : "ok");
    };
    out.keep = gru;
    return out;
  }
  const auto impl = find_subject(s.subject, plugins);
  if (!s.layer) {
    auto p = std::make_shared<const Problem>(make_problem(s));
    out.flops = attention_flops;
    out.call = [impl, p](std::string& message, std::optional<int64_t>& counted) {
      const ForwardResult r = impl->forward(*p);
      message = r.error;
      counted = impl->score_elements_computed();
      return status_name(r.status);
    };
    out.keep = std::const_pointer_cast<Problem>(p);
    return out;
  }
  if (s.dtype != DType::f32 && s.dtype != DType::f64) {
    throw InputError("--layer: layers run in f32 or f64 only");
  }
  Values values(s.seed);
  auto w = std::make_shared<LayerWeights>(make_weights(d, values));
  auto in = std::make_shared<LayerInput>();
  in->dtype = s.dtype;
  in->batch = s.batch;
  in->tq = in->tk = s.seq;
  in->heads = s.heads;
  in->x_q.resize(static_cast<size_t>(s.batch * s.seq * d));
  for (double& v : in->x_q) v = values.next();
  in->x_kv = in->x_q;
  in->causal = s.causal;
  out.flops = attention_flops + projection_flops;
  // A registered layer runs its own Layer::run; any other implementation
  // becomes the core of the standard multi-head step, built once here.
  std::shared_ptr<const Layer> layer;
  if (const auto* own = dynamic_cast<const Layer*>(impl.get())) {
    layer = std::shared_ptr<const Layer>(impl, own);
  } else {
    layer = std::make_shared<MultiHeadLayer>([impl, s](Problem& heads) {
      // LayerInput has no window; the core's problem carries the point's.
      heads.window_left = s.window_left;
      heads.window_right = s.window_right;
      return impl->forward(heads);
    });
  }
  out.parameters = layer->parameter_count(d, s.heads);
  out.call = [impl, layer, w, in](std::string& message, std::optional<int64_t>& counted) {
    const LayerResult r = layer->run(*w, *in);
    message = r.error;
    counted = impl->score_elements_computed();
    return status_name(r.status);
  };
  out.keep = in;
  return out;
}

// openblas_set_num_threads where OpenBLAS is loaded (LibTorch's BLAS);
// OPENBLAS_NUM_THREADS, set by the parent, covers it at start-up too.
void apply_threads(int n) {
  set_impl_threads(n);
  Eigen::setNbThreads(n);
  using SetThreads = void (*)(int);
  if (void* f = dlsym(RTLD_DEFAULT, "openblas_set_num_threads")) {
    reinterpret_cast<SetThreads>(f)(n);
  }
}

}  // namespace

PointResult measure_point(const PointSpec& s) {
  const auto plugins = load_subjects(s.plugins, s.python, call_timeout_ms(s.timeout_s));
  PointResult r;
  Subject subject = make_subject(s, plugins);
  r.parameters = subject.parameters;
  r.gru_hidden = subject.gru_hidden;
  r.flops = subject.flops;
  std::optional<int64_t> counted;
  const auto once = [&]() -> bool {
    std::string message;
    r.status = subject.call(message, counted);
    r.message = message;
    return r.status == "ok";
  };
  try {
    for (int k = 0; k < s.warmup; ++k)
      if (!once()) return r;
    // Pages the warm-up freed go back to the system, so the baseline holds
    // the inputs and the libraries, not a previous call's buffers.
    malloc_trim(0);
    const std::vector<pid_t> processes = measured_processes();
    const std::optional<int64_t> before = status_sum(processes, "VmRSS");
    r.peak_method = reset_peak(processes) ? "clear_refs" : "hwm_since_start";
    for (int k = 0; k < s.repeats; ++k) {
      const std::map<pid_t, double> c0 = cpu_seconds();
      const auto t0 = std::chrono::steady_clock::now();
      const bool ok = once();
      r.times_s.push_back(seconds_since(t0));
      r.cpu_s.push_back(cpu_used(c0, cpu_seconds()));
      if (!ok) return r;
    }
    const std::optional<int64_t> peak = status_sum(measured_processes(), "VmHWM");
    if (before && peak) r.peak_bytes = std::max<int64_t>(0, *peak - *before);
  } catch (const std::exception& e) {
    r.status = "error";
    r.message = e.what();
    return r;
  }
  r.score_elements = counted;
  if (!r.times_s.empty()) {
    r.min_s = *std::min_element(r.times_s.begin(), r.times_s.end());
    r.max_s = *std::max_element(r.times_s.begin(), r.times_s.end());
    r.median_s = median_of(r.times_s);
    r.median_cpu_s = median_of(r.cpu_s);
  }
  return r;
}

int run_child(const std::string& spec_path, const std::string& result_path) {
  std::ifstream in(spec_path);
  const PointSpec s = spec_from_json(nlohmann::json::parse(in));
  apply_threads(s.threads);
  // Steady state, as in a long-running caller: large blocks come from the
  // heap and a freed block serves the next call, instead of glibc's fresh
  // mmap per block of 32 MiB or more, whose page faults (16k for a call's
  // 64 MiB of weights; expensive under virtualisation) would otherwise
  // dominate the timings of every implementation that returns weights.
  // The peak stays measurable: measure_point trims the heap (malloc_trim
  // returns free pages) before reading the baseline.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  PointResult r;
  try {
    r = measure_point(s);
  } catch (const std::exception& e) {
    r.status = "error";
    r.message = e.what();
  }
  std::ofstream out(result_path);
  out << to_json(r).dump() << "\n";
  return out ? 0 : 2;
}

}  // namespace attncheck::bench
