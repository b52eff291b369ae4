#pragma once
// The names of the implementations plugins bring: unique across the loaded
// plugins, and none a built-in's. Loading in this process (load_plugins)
// and in workers (load_plugins_isolated) check them the same way.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "attncheck/implementation.h"

namespace attncheck::host_detail {

/// The names seen so far, each with the plugin that brought it.
class PluginNames {
 public:
  /// Adds the implementations loaded from `path`, in their order; throws
  /// InputError naming the file and the name when one has the name of a
  /// built-in (registered) implementation or of one added before.
  void add(const std::string& path, const std::vector<std::shared_ptr<const Implementation>>& impls);

 private:
  std::map<std::string, std::string> origin_;  // name -> path
};

}  // namespace attncheck::host_detail
