#pragma once
// Writing the files the user names (--report, --junit, merge-reports OUT,
// the fixtures --save-failures saves, the Python bridge's write_report).
// An output file is absent or a regular file with one link: a FIFO, socket,
// device (/dev/null and /dev/stdout included), directory or symbolic link,
// live or dangling, is refused before any work and again when it is written,
// so a run never blocks on a FIFO with no reader, never writes through a
// link, and never splits a file's hard links. A regular file is replaced
// atomically, keeping its permission bits (docs/cli.md, "Output files").

#include <string>

namespace attncheck {

/// Checks, before any work, that `path` can be written: absent, or a
/// regular file with one hard link that is writable (by lstat: a symbolic
/// link is refused, not followed); its directory exists and a file can be
/// made in it (tried: access() says yes to root under /proc and /sys).
/// Throws InputError "WHAT: cannot write 'PATH': why", e.g. "it is a FIFO,
/// not a regular file" or "it is a symbolic link; name the file itself".
void check_output_path(const std::string& path, const std::string& what);

/// Checks, before any work, that fixtures can be saved in the directory
/// `path`: an existing one (or a symbolic link to one) must be a writable
/// directory; a missing one is created later, so its nearest existing
/// ancestor must be a writable directory; a dangling symbolic link is
/// refused. Throws InputError "WHAT: cannot write 'PATH': why".
void check_output_directory(const std::string& path, const std::string& what);

/// Writes `text` to `path`, checked again as check_output_path does (the
/// path may have changed since), so it never opens a FIFO or a device and
/// never blocks. The text is written beside the file under a unique
/// temporary name and renamed over it, so a reader never sees half a file
/// and an earlier one survives a failed write; the replacement keeps the
/// earlier file's permission bits (a new file gets 0666 less the umask). No
/// temporary file survives a failure. Throws InputError "WHAT: cannot write
/// 'PATH': why".
void write_output_file(const std::string& path, const std::string& text, const std::string& what);

}  // namespace attncheck
