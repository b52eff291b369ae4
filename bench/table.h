#pragma once
// The bench's tables on standard output: one per length group of a
// comparison, a row per point, and the units its readings share.

#include <cstdint>
#include <optional>
#include <string>

#include "point.h"

namespace attncheck::bench {

/// Bytes in MiB with one decimal, or "n/a".
std::string human_bytes(std::optional<int64_t> bytes);

/// Seconds in s, ms or us, whichever keeps the figure readable.
std::string time_text(double seconds);

/// The heading of length group `group` (length_group's names) and the
/// columns of its rows.
void print_group_header(const std::string& group);

/// One row: the point's figures, or its status and message when it did
/// not run.
void print_row(const Point& p);

}  // namespace attncheck::bench
