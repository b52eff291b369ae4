// The bug catalogue's entries, built from the one list in core/bugs.h.

#include "bugs.h"

#include <array>
#include <cstddef>

namespace attncheck::bugs {
namespace {

constexpr std::array kBugClasses{
#define ATTNCHECK_BUG_ENTRY(name, diagnosis) BugClass{Bug::name, #name, diagnosis},
    ATTNCHECK_BUG_CLASSES(ATTNCHECK_BUG_ENTRY)
#undef ATTNCHECK_BUG_ENTRY
};

constexpr std::array kBrokenTwins{
#define ATTNCHECK_TWIN_ENTRY(twin, bug, what) BrokenTwin{Twin::twin, #twin, Bug::bug, what},
    ATTNCHECK_BROKEN_TWINS(ATTNCHECK_TWIN_ENTRY)
#undef ATTNCHECK_TWIN_ENTRY
};

}  // namespace

std::span<const BugClass> bug_classes() { return kBugClasses; }

std::span<const BrokenTwin> broken_twins() { return kBrokenTwins; }

const BugClass& bug_class(Bug bug) { return kBugClasses[static_cast<size_t>(bug)]; }

const BrokenTwin& broken_twin(Twin twin) { return kBrokenTwins[static_cast<size_t>(twin)]; }

const BugClass* find_bug_class(std::string_view name) {
  for (const BugClass& b : kBugClasses)
    if (b.name == name) return &b;
  return nullptr;
}

const BrokenTwin* find_broken_twin(std::string_view name) {
  for (const BrokenTwin& t : kBrokenTwins)
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace attncheck::bugs
