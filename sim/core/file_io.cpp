// Bounded reads and whole-file writes (issue 19, findings 1, 3 and 6).
#include "sim/core/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>

namespace zerolens::file_io {
namespace {

namespace fs = std::filesystem;

std::string os_error(int error) {
  return std::strerror(error);
}

[[noreturn]] void fail(const std::string& path, const std::string& what, int error) {
  throw InputError(path, what + ": " + os_error(error));
}

// Every byte of `bytes` to `fd`; the errno of the first failed write, or 0.
int write_all(int fd, std::string_view bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t wrote = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return wrote < 0 ? errno : EIO;
    done += std::size_t(wrote);
  }
  return 0;
}

// A device or FIFO the user named (/dev/stdout, a pipe): written in place, never replaced.
void write_in_place(const std::string& path, std::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) fail(path, "cannot open for writing", errno);
  const int error = write_all(fd, bytes);
  if (::close(fd) != 0 && error == 0) fail(path, "cannot write", errno);
  if (error != 0) fail(path, "cannot write", error);
}

mode_t file_mode() {
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return 0666 & ~mask;
}

std::string mebibytes(std::uintmax_t bytes) {
  return bytes >= (1u << 20) ? std::to_string(bytes >> 20) + " MiB"
                             : std::to_string(bytes) + " bytes";
}

// Reads until the end, stopping as soon as the bytes pass `max_bytes`, so a file that grows while
// it is read is still bounded.
std::string read_bounded(int fd, const std::string& path, std::uintmax_t max_bytes,
                         const std::string& where, const std::string& kind) {
  std::string bytes;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int error = errno;
      ::close(fd);
      throw InputError(where, "cannot read '" + path + "': " + os_error(error));
    }
    if (got == 0) break;
    if (bytes.size() + std::size_t(got) > max_bytes) {
      ::close(fd);
      throw InputError(where, "'" + path + "' is larger than the " + mebibytes(max_bytes) + " " +
                                  kind + " may be");
    }
    bytes.append(buffer, std::size_t(got));
  }
  ::close(fd);
  return bytes;
}

std::mutex g_files_read_mutex;
std::vector<std::string> g_files_read;

void remember_read(const std::string& path) {
  const std::lock_guard<std::mutex> lock(g_files_read_mutex);
  if (std::find(g_files_read.begin(), g_files_read.end(), path) == g_files_read.end())
    g_files_read.push_back(path);
}

}  // namespace

std::vector<std::string> files_read() {
  const std::lock_guard<std::mutex> lock(g_files_read_mutex);
  return g_files_read;
}

std::string read_regular_file(const std::string& path, const std::string& where,
                              std::uintmax_t max_bytes, const std::string& kind) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (error || !fs::exists(status))
    throw InputError(where, "cannot read file '" + path + "': no such file");
  if (fs::is_directory(status))
    throw InputError(where, "'" + path + "' is a directory, not " + kind);
  if (!fs::is_regular_file(status))
    throw InputError(where,
                     "'" + path + "' is not a regular file (a FIFO, socket or device is not read)");
  const std::uintmax_t size = fs::file_size(path, error);
  if (!error && size > max_bytes) {
    throw InputError(where, "'" + path + "' is " + std::to_string(size) + " bytes, more than the " +
                                mebibytes(max_bytes) + " " + kind + " may be");
  }
  // O_NONBLOCK: if the path became a FIFO after the check, the open still cannot block.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw InputError(where, "cannot read file '" + path + "': " + os_error(errno));
  struct stat opened {};
  if (::fstat(fd, &opened) != 0 || !S_ISREG(opened.st_mode)) {
    ::close(fd);
    throw InputError(where,
                     "'" + path + "' is not a regular file (a FIFO, socket or device is not read)");
  }
  remember_read(path);
  return read_bounded(fd, path, max_bytes, where, kind);
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  std::error_code status_error;
  const fs::file_status status = fs::status(path, status_error);
  if (fs::exists(status) && !fs::is_regular_file(status)) {
    if (fs::is_directory(status)) throw InputError(path, "is a directory, not a file to write");
    return write_in_place(path, bytes);
  }
  const fs::path target(path);
  const fs::path directory = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string name = ".";  // built by appends: GCC 12 warns falsely about "." + string (-Wrestrict)
  name += target.filename().string();
  name += ".zerolens-XXXXXX";
  std::string temporary = (directory / name).string();
  const int fd = ::mkstemp(temporary.data());
  if (fd < 0) fail(path, "cannot create a temporary file beside it", errno);
  int error = write_all(fd, bytes);
  if (error == 0 && ::fchmod(fd, file_mode()) != 0) error = errno;
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error == 0 && ::rename(temporary.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) {
    ::unlink(temporary.c_str());
    fail(path, "cannot write (the previous file, if any, is kept)", error);
  }
}

void refuse_output_over_inputs(const std::string& output, const std::vector<std::string>& inputs) {
  struct stat written {};
  if (output.empty() || ::stat(output.c_str(), &written) != 0 || !S_ISREG(written.st_mode)) return;
  for (const std::string& input : inputs) {
    struct stat read {};
    if (input.empty() || ::stat(input.c_str(), &read) != 0) continue;
    if (read.st_dev == written.st_dev && read.st_ino == written.st_ino)
      throw InputError(
          output, "is also an input ('" + input + "'): refusing to overwrite what is being read");
  }
}

}  // namespace zerolens::file_io
