// The run's configuration (run/config.h): the one place the run's
// variables are read.

#include "run/config.h"

#include <cstdlib>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "attncheck/session.h"

namespace attncheck {

Environment process_environment() {
  Environment env;
  for (const char* name : {kSeedVariable, kRealSizesVariable, kRapidCheckVariable}) {
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
  config.seed = configured_seed(flags.seed, flags.seed_option, env);
  return config;
}

}  // namespace attncheck
