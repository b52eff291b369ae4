#pragma once
// The plan of attncheck bench: the options turned into sweeps (a preset
// with the options it takes, or one custom comparison), every point's spec,
// and the points a series cannot run.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attncheck/implementation.h"
#include "options.h"
#include "point.h"
#include "presets.h"

namespace attncheck::bench {

/// The implementations plugins added, searched before the registry.
using Plugins = std::vector<std::shared_ptr<const Implementation>>;

/// How the parent and each child load the implementations of --plugin and
/// --python (host/impl_sources.h): the plugins in this process (their own
/// speed is measured), each Python file's implementations behind a worker
/// whose calls may take `timeout_ms` of CPU time each. Throws InputError
/// for a file that does not load.
Plugins load_subjects(const std::vector<std::string>& plugins,
                      const std::vector<std::string>& python, int64_t timeout_ms);

/// --timeout (seconds a point may take) as the per-call CPU limit handed to
/// load_subjects: the point's own limit, as the parent stops the child after
/// that much wall time anyway.
int64_t call_timeout_ms(double timeout_s);

/// The sweeps `opt` asks for: the preset's, with --seq, --batch and
/// --causal applied when given, or one custom sweep of --impl (or every
/// plugin implementation) and --gru. Checks the numeric options and every
/// subject name before anything runs; throws InputError naming the option.
std::vector<Sweep> plan_sweeps(const BenchOptions& opt, const Plugins& plugins);

/// The spec of series `s` of `sw` at length `seq`, with the run settings
/// (repeats, warm-up, threads, seed, plugins) of `opt`.
PointSpec point_spec(const Sweep& sw, const Series& s, int64_t seq, const BenchOptions& opt);

/// The implementation named `subject` among `plugins` and the registry's
/// (find_implementation of host/impl_sources.h). Throws InputError
/// "--impl: unknown implementation" when there is none.
std::shared_ptr<const Implementation> find_subject(const std::string& subject,
                                                   const Plugins& plugins);

/// The reason `s` cannot run, checked in the parent so the harness's rule
/// (only problems inside an implementation's declaration) holds; empty
/// when it can. Throws InputError for an unknown implementation.
std::string refusal(const PointSpec& s, const Plugins& plugins);

}  // namespace attncheck::bench
