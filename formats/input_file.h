#pragma once
// Reading the files the user names (fixtures, problems, reports to merge,
// the expected-failures file, saved failures): an input is never trusted
// to be a file. It is opened without blocking and refused unless it is a
// regular file, so a FIFO with no writer, a socket, a device or a
// directory is one line at once instead of a hang in open() or a read
// that never ends (docs/cli.md, "Input files").

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace attncheck {

/// The whole content of the regular file `path`, at most `max_bytes`
/// bytes. Opened O_RDONLY | O_NONBLOCK | O_CLOEXEC (a FIFO does not block
/// the open), then fstat'ed: anything but a regular file is refused before
/// one byte is read, and a file larger than `max_bytes` before it is read.
/// Throws InputError in one line: "PATH: cannot open file: No such file or
/// directory", "PATH: cannot read: it is a FIFO, not a regular file", ...
std::string read_input_file(const std::string& path, int64_t max_bytes);

/// What a file that is not a regular one is, for a message ("a FIFO", "a
/// directory", ...): input and output files are refused in the same words.
const char* file_kind(mode_t mode);

}  // namespace attncheck
