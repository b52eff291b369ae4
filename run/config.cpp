// The run's configuration (run/config.h): the one place the run's
// variables are read.

#include "run/config.h"

#include <cctype>
#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "attncheck/session.h"

namespace attncheck {

Environment process_environment() {
  Environment env;
  for (const char* name : {kSeedVariable, kRealSizesVariable, kRapidCheckVariable,
                           kProfileVariable, kTestCasesVariable, kReplayVariable}) {
    if (const char* value = std::getenv(name)) env[name] = value;
  }
  return env;
}

uint64_t configured_seed(const std::optional<std::string>& given, std::string_view given_name,
                         const Environment& env) {
  if (given) return parse_seed(*given, given_name);
  if (const auto it = env.find(kSeedVariable); it != env.end() && !it->second.empty()) {
    return parse_seed(it->second, kSeedVariable);
  }
  return kDefaultSeed;
}

bool real_sizes_enabled(const Environment& env) {
  const auto it = env.find(kRealSizesVariable);
  return !(it != env.end() && it->second == "0");
}

bool real_sizes_enabled() { return real_sizes_enabled(process_environment()); }

bool rapidcheck_params_given() { return process_environment().contains(kRapidCheckVariable); }

RunFlags test_program_flags(RunFlags flags, const Environment& env) {
  const auto given = [&](const char* name) -> const std::string* {
    const auto it = env.find(name);
    return it != env.end() && !it->second.empty() ? &it->second : nullptr;
  };
  if (given(kSeedVariable)) {
    flags.seed.reset();  // configured_seed reads it, naming it
  }
  if (const std::string* p = given(kProfileVariable)) {
    flags.profile = *p;
    flags.profile_option = kProfileVariable;
  }
  if (const std::string* n = given(kTestCasesVariable)) {
    size_t used = 0;
    long long cases = 0;
    try {
      cases = std::stoll(*n, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != n->size() || cases < 1 || cases > 100000 || !std::isdigit(static_cast<unsigned char>((*n)[0]))) {
      throw InputError(fmt::format("{}: '{}' is not a number of cases (an integer from 1 to 100000)",
                                   kTestCasesVariable, *n));
    }
    flags.cases = static_cast<int>(cases);
  }
  return flags;
}

RunConfig configure_run(const RunFlags& flags, const Environment& env) {
  RunConfig config;
  try {
    config.profile = parse_profile(flags.profile);
  } catch (const InputError& e) {
    if (flags.profile_option.empty()) throw;
    throw InputError(fmt::format("{}: {}", flags.profile_option, e.what()));
  }
  config.cases = flags.cases;
  config.strict = flags.strict;
  config.real_sizes = flags.real_sizes;
  if (flags.timeout_ms != kDefaultCallTimeoutMs) config.timeout_ms = flags.timeout_ms;
  config.property_options = flags.property_options;
  config.save_failures_dir = flags.save_failures_dir;
  config.prune_fixed = flags.prune_fixed;
  config.seed = configured_seed(flags.seed, flags.seed_option, env);
  return config;
}

}  // namespace attncheck
