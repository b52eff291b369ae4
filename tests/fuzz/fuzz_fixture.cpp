// Fuzz target "fixture": the problem / fixture reader (SPEC 5.3), which
// `attncheck oracle` and `attncheck replay` use.
//
// Contract checked, for any bytes:
//  - rejected input is an InputError, one line naming the file;
//  - accepted input is a valid problem that survives a write and a read
//    unchanged (bit-exact numbers);
//  - the args of a fixture's property are accepted by its validate_args or
//    rejected with one line naming them;
//  - for small accepted problems the oracle runs, and a fixture replays on
//    a built-in implementation, without any sanitizer finding: the
//    properties' checks of their args (rows, permutations, ...) are what
//    keeps their judges inside the problem.

#include <cmath>
#include <string>
#include <string_view>

#include "attncheck/dtype.h"
#include "attncheck/fixture.h"
#include "formats/json.h"
#include "attncheck/oracle.h"
#include "attncheck/properties.h"
#include "attncheck/run.h"
#include "properties/property_def.h"
#include "attncheck/registry.h"
#include "fuzz_target.h"

namespace attncheck::fuzz {
namespace {

constexpr std::string_view kName = "fuzz-input.json";

// Small enough for the oracle (MPFR at up to 2400 bits on hostile values)
// and the replayed property to keep the fuzzer at hundreds of inputs a
// second.
bool small(const Problem& p) {
  return p.score_elements() * (p.dk + p.dv + 1) <= 256 && p.dk <= 16 && p.dv <= 16;
}

void run(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Fixture f;
  try {
    f = fixture_from_json(parse_json(text, std::string(kName)), std::string(kName));
  } catch (const InputError& e) {
    expect_one_line_naming(e.what(), kName, "rejected input");
    return;
  }

  try {
    f.problem.validate();
  } catch (const std::exception& e) {
    fail(std::string("the reader accepted an invalid problem: ") + e.what());
  }
  // A write and a read give the same file again.
  const nlohmann::json written = fixture_to_json(f);
  Fixture g;
  try {
    g = fixture_from_json(parse_json(written.dump(), "rewritten"), "rewritten");
  } catch (const InputError& e) {
    fail(std::string("a written fixture does not read back: ") + e.what());
  }
  if (fixture_to_json(g) != written) fail("a fixture changed in a write and a read");

  // The property's checks of its args, as replay runs them first (the
  // reproducers corpus/fixture/repro-* were bugs there), whatever the size
  // of the problem.
  const std::string property = f.meta.property.value_or("");
  const PropertyDef* prop = find_property_def(property);
  if (prop && prop->validate_args) {
    try {
      prop->validate_args(f);
    } catch (const InputError& e) {
      expect_one_line_naming(e.what(), "args", "rejected args");
      return;
    }
  }

  if (!small(f.problem)) return;
  const OracleResult r = oracle(f.problem);
  (void)oracle_to_json(f.problem, r).dump();

  // Replay: the fixture's property on its implementation when that is a
  // correct built-in one, else on the f64 loop reference (a broken one
  // would spend the time on diagnosing its failure).
  if (!prop) return;
  auto impl = find_impl(f.meta.impl.value_or(""));
  if (!impl || impl->info().kind == Kind::broken) impl = find_impl("loop_f64");
  if (!impl || !impl->info().supports(f.problem.dtype)) return;
  RunConfig config;
  config.seed = f.meta.seed.value_or(kDefaultSeed);
  try {
    (void)replay_fixture(f, *impl, config);
  } catch (const InputError& e) {
    expect_one_line_naming(e.what(), "", "replay");
  }
}

void init() {}

}  // namespace
}  // namespace attncheck::fuzz

ATTNCHECK_FUZZ_TARGET("fixture", attncheck::fuzz::init, attncheck::fuzz::run);
