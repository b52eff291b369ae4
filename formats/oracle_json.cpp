// The "attncheck-oracle-1" format (SPEC 5.3): the oracle's result for a
// problem, as `attncheck oracle` prints it. Written only: nothing reads it
// back.

#include <string>
#include <string_view>
#include <utility>

#include "formats/json.h"
#include "formats/json_reader.h"

namespace attncheck {
namespace {

constexpr std::string_view kOracleFormat = "attncheck-oracle-1";

}  // namespace

nlohmann::json oracle_to_json(const Problem& p, const OracleResult& r) {
  using nlohmann::json;
  using formats::numbers_to_json;
  json empty = json::array();
  for (const auto& e : r.empty_rows) empty.push_back({e[0], e[1], e[2]});
  json j;
  j["format"] = std::string(kOracleFormat);
  j["out"] = numbers_to_json(r.out);
  j["weights"] = numbers_to_json(r.weights);
  j["lse"] = numbers_to_json(r.lse);
  j["empty_rows"] = std::move(empty);
  // Each value the oracle could not prove correctly rounded, as
  // ["array", i0, i1, ...]: the array's name ("out", "weights", "lse", "dq",
  // "dk", "dv") then its multi-index in that array's documented shape
  // (e.g. ["out", b, h, i, d], ["lse", b, h, i], ["dk", b, kv_h, j, c]).
  json uncertified = json::array();
  for (const auto& u : r.uncertified) {
    json e = json::array({u.array});
    for (int64_t x : u.index) e.push_back(x);
    uncertified.push_back(std::move(e));
  }
  j["uncertified"] = std::move(uncertified);
  if (!p.dout.empty()) {
    j["dq"] = numbers_to_json(r.dq);
    j["dk"] = numbers_to_json(r.dk);
    j["dv"] = numbers_to_json(r.dv);
    // SPEC 1.1: d sink_h, summed over every sequence and query row.
    if (!p.sink.empty()) j["dsink"] = numbers_to_json(r.dsink);
  }
  return j;
}

}  // namespace attncheck
