#pragma once
// Reading and writing whole files, shared by every part that touches the disk (issue 19). Reads are
// bounded and never block; writes replace a file whole or leave it as it was.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sim/core/error.hpp"

namespace zerolens::file_io {

// The bytes of the regular file `path`, at most `max_bytes` of them. InputError names `where`
// (a flag, or the path) and the reason: missing, a directory, a FIFO/socket/device (never opened,
// so it cannot block or stream forever), unreadable, or larger than `max_bytes` (named with `kind`,
// e.g. "a JSON input").
std::string read_regular_file(const std::string& path, const std::string& where,
                              std::uintmax_t max_bytes, const std::string& kind);

// Writes `bytes` to `path` through a temporary beside it: every write and the close checked,
// fsync, then rename, so a full disk or a kill leaves the previous file as it was. A device or FIFO
// the user named (/dev/stdout) is written in place. InputError names the path and the OS error.
void write_file_atomically(const std::string& path, std::string_view bytes);

// Refuses, before anything is written, an output that is one of the inputs (the same file by
// device and inode, so a link or another spelling of the path is caught too).
void refuse_output_over_inputs(const std::string& output, const std::vector<std::string>& inputs);

// Every path read_regular_file has read in this process, in order: the inputs a command's outputs
// must not overwrite.
std::vector<std::string> files_read();

}  // namespace zerolens::file_io
