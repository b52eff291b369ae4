#pragma once
// Writing the files the user names (--report, merge-reports OUT): checked
// before any work, replaced atomically when they are regular files, and
// never replaced when they are something else.

#include <string>

namespace attncheck {

/// Checks, before any work, that `path` can be written: not a directory,
/// its directory exists and is writable, an existing regular file is
/// writable. Throws InputError "WHAT: cannot write 'PATH': why".
void check_output_path(const std::string& path, const std::string& what);

/// Checks, before any work, that fixtures can be saved in the directory
/// `path`: an existing one must be a writable directory; a missing one is
/// created later, so its nearest existing ancestor must be a writable
/// directory. Throws InputError "WHAT: cannot write 'PATH': why".
void check_output_directory(const std::string& path, const std::string& what);

/// Writes `text` to `path`. A regular file (or a new one) is written beside
/// it under a unique temporary name and renamed over it, so a reader never
/// sees half a file and an earlier one survives a failed write; a symbolic
/// link is followed, not replaced. A path that exists and is not a regular
/// file (a device such as /dev/null or /dev/stdout, a FIFO) is written in
/// place, never replaced. No temporary file survives a failure. Throws
/// InputError "WHAT: cannot write 'PATH': why".
void write_output_file(const std::string& path, const std::string& text, const std::string& what);

}  // namespace attncheck
