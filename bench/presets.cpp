#include "presets.h"

#include <utility>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "point.h"

namespace attncheck::bench {
namespace {

Series series(std::string subject, std::string label, DType dtype = DType::f32, int64_t window_left = -1,
              int64_t window_right = -1) {
  Series s;
  s.subject = std::move(subject);
  s.label = std::move(label);
  s.dtype = dtype;
  s.window_left = window_left;
  s.window_right = window_right;
  return s;
}

Series layer_series(std::string subject, std::string label) {
  Series s = series(std::move(subject), std::move(label));
  s.layer = true;
  return s;
}

Sweep sweep(std::string name, std::string title, std::vector<int64_t> seqs, Reading reading) {
  Sweep s;
  s.name = std::move(name);
  s.title = std::move(title);
  s.seqs = std::move(seqs);
  s.reading = reading;
  return s;
}

Target target(Target::Kind kind, std::string label, double factor = 1, std::string missing = "") {
  Target t;
  t.kind = kind;
  t.label = std::move(label);
  t.factor = factor;
  t.missing = std::move(missing);
  return t;
}

}  // namespace

// Each preset holds everything equal but the compared thing.
std::vector<Sweep> preset_sweeps(const std::string& name) {
  std::vector<Sweep> out;
  if (name == "loop-vs-batched") {
    Sweep s = sweep("loop-vs-batched", "exercise 6: loop vs batched (f32, B=1 H=8 dk=64)",
                    {64, 128, 256, 512, 1024}, Reading::speedup);
    s.series = {series("loop_f32", "loop_f32"), series("batched_f32", "batched_f32")};
    s.baseline = "loop_f32";
    out.push_back(s);
  } else if (name == "window") {
    Sweep s = sweep("window", "exercise 10: global vs window [64, 64] (B=1 H=4 dk=64)",
                    {256, 512, 1024, 2048, 4096}, Reading::window);
    s.heads = 4;
    s.series = {series("batched_f32", "batched_f32 global"),
                series("online_f32", "online_f32 global"),
                series("online_f32", "online_f32 window", DType::f32, 64, 64),
                series("local_f32", "local_f32 window", DType::f32, 64, 64),
                series("local_f64", "local_f64 window", DType::f64, 64, 64),
                series("broken_local_full_matrix", "broken_local_full_matrix window", DType::f64, 64, 64)};
    out.push_back(s);
  } else if (name == "heads") {
    Sweep s = sweep("heads", "exercise 9: heads at d = 256 (layer, f32, B=1)", {128, 512}, Reading::heads);
    for (int64_t h : {1, 2, 4, 8}) {
      for (const char* impl : {"batched_f32", "mha_f32"}) {
        Series x = layer_series(impl, fmt::format("{} layer H={}", impl, h));
        x.heads = h;
        x.dk = 256 / h;
        s.series.push_back(x);
      }
    }
    out.push_back(s);
  } else if (name == "gru") {
    Sweep s = sweep("gru", "exercise 8: attention layer vs GRU, matched parameters (f32, d=256, B=1)",
                    {64, 256, 1024, 4096}, Reading::gru);
    s.heads = 4;
    s.dk = 64;
    s.series = {layer_series("batched_f32", "attention layer (batched_f32)"),
                layer_series("online_f32", "attention layer (online_f32)"),
                series(kGruSubject, "GRU (matched parameters)")};
    out.push_back(s);
  } else if (name == "targets") {
    Sweep s = sweep("targets", "speed targets (f32, B=1 H=8 dk=64)", {256, 512, 1024, 2048}, Reading::targets);
    s.series = {series("batched_f32", "batched_f32"), series("torch_sdpa_f32", "torch_sdpa_f32"),
                series("online_f32", "online_f32")};
    s.baseline = "batched_f32";
    s.target_seq = 1024;
    s.targets = {target(Target::Kind::no_slower, "torch_sdpa_f32", 1, "LibTorch adapters not built?"),
                 target(Target::Kind::within, "online_f32", 1.5),
                 target(Target::Kind::linear_memory, "online_f32")};
    Sweep w = sweep("targets-local", "speed targets: local_f32, window [64, 64] (f32, B=1 H=8 dk=64)",
                    {1024, 2048, 4096, 8192}, Reading::targets);
    w.series = {series("local_f32", "local_f32 window", DType::f32, 64, 64)};
    w.targets = {target(Target::Kind::linear_band, "local_f32 window")};
    out.push_back(s);
    out.push_back(w);
  } else if (name == "smoke") {
    // A seconds-long run of every code path (tests/bench/bench.cmake).
    Sweep s = sweep("smoke", "smoke test (f32, B=1 H=2 dk=8)", {16}, Reading::window);
    s.heads = 2;
    s.dk = 8;
    s.series = {series("batched_f32", "batched_f32"), series("online_f32", "online_f32 window", DType::f32, 4, 4),
                series("local_f32", "local_f32 window", DType::f32, 4, 4),
                layer_series("batched_f32", "batched_f32 layer"), series(kGruSubject, "GRU")};
    out.push_back(s);
  } else {
    throw InputError(fmt::format(
        "--preset: unknown preset '{}' (expected loop-vs-batched, window, heads, gru, targets or smoke)", name));
  }
  return out;
}

}  // namespace attncheck::bench
