#include "properties/gen/coverage.h"

namespace attncheck::gen {
namespace {

Coverage* coverage = nullptr;  // set by CoverageScope

}  // namespace

CoverageScope::CoverageScope(Coverage& c) { coverage = &c; }
CoverageScope::~CoverageScope() { coverage = nullptr; }

namespace detail {

Coverage* counting() { return coverage; }

void count(const std::string& what) {
  if (coverage) ++coverage->counts[what];
}

}  // namespace detail
}  // namespace attncheck::gen
