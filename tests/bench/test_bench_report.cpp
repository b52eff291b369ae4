// Checks what `attncheck bench --preset smoke` wrote (tests/bench/bench_test.sh):
// the JSON report has the documented fields for every point, every point ran,
// the instrumented implementations counted their score elements (the local
// kernel only its band), the GRU has the attention layer's parameter count
// within one hidden unit, and the SVG is a document with one line per
// series. Nothing here depends on timing.

#include <cstdio>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::cerr << "FAILED: " << what << "\n";
    ++failures;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: test_bench_report REPORT.json PLOT.svg\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  const nlohmann::json doc = nlohmann::json::parse(in);
  expect(doc.at("format") == "attncheck-bench-1", "format");
  expect(doc.at("threads") == 1, "threads reported");
  const auto& results = doc.at("results");
  expect(results.size() == 5, "5 series at one length");
  std::set<std::string> labels;
  for (const auto& r : results) {
    const std::string label = r.at("label");
    labels.insert(label);
    for (const char* k : {"impl", "seq", "batch", "heads", "dk", "dtype", "median_s", "min_s", "max_s",
                          "peak_bytes", "score_elements"})
      expect(r.contains(k), label + ": field " + k);
    expect(r.at("status") == "ok", label + ": status " + r.at("status").dump() + " " + r.at("message").dump());
    if (r.at("status") != "ok") continue;
    expect(r.at("min_s") <= r.at("median_s") && r.at("median_s") <= r.at("max_s"), label + ": min <= median <= max");
    expect(r.at("peak_bytes").is_number_integer() && r.at("peak_bytes") >= 0, label + ": peak_bytes");
    expect(r.at("group") == "short", label + ": T <= 256 is short");
    const int64_t seq = r.at("seq"), bh = int64_t(r.at("batch")) * int64_t(r.at("heads"));
    if (label == "batched_f32") expect(r.at("score_elements") == bh * seq * seq, label + ": full matrix counted");
    if (label == "local_f32 window")
      expect(r.at("score_elements") == r.at("allowed_pairs"), label + ": only the band counted");
    // The online kernel does not count (a count claims exact locality).
    if (label == "online_f32 window") expect(r.at("score_elements").is_null(), label + ": n/a");
    if (label == "GRU") {
      expect(r.at("score_elements").is_null(), "GRU: no score elements");
      const int64_t d = int64_t(r.at("heads")) * int64_t(r.at("dk"));
      const int64_t h = r.at("gru_hidden");
      const int64_t params = r.at("parameters");
      expect(params == 3 * (d * h + h * h + 2 * h), "GRU: parameter count formula");
      const int64_t step = 3 * (d + 2 * h + 3);
      expect(std::llabs(params - 4 * d * d) <= step, "GRU: parameters match 4 d^2 within one hidden unit");
    }
    if (label == "batched_f32 layer") expect(r.at("parameters") == 4 * 16 * 16, "layer: 4 d^2 parameters");
  }
  expect(labels.size() == 5, "five series");
  expect(!doc.at("analysis").empty(), "a reading of the comparison");

  std::ifstream svg_in(argv[2]);
  std::stringstream svg;
  svg << svg_in.rdbuf();
  const std::string text = svg.str();
  expect(text.rfind("<?xml", 0) == 0 && text.find("</svg>") != std::string::npos, "SVG document");
  size_t lines = 0;
  for (size_t at = text.find("<polyline"); at != std::string::npos; at = text.find("<polyline", at + 1)) ++lines;
  // One point per series: the time chart draws a polyline of one point
  // for each; the memory chart only where the peak is above 0.
  expect(lines >= 5, "a polyline per series in the time chart, got " + std::to_string(lines));
  for (const auto& l : labels) expect(text.find(l) != std::string::npos, "legend names " + l);
  if (failures == 0) std::cout << "bench report and plot: ok\n";
  return failures == 0 ? 0 : 1;
}
