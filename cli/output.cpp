// Output: every file the CLI writes, written whole or not at all (issue 19, finding 1).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>

#include "cli/commands.hpp"

namespace zerolens::cli {
namespace {

bool g_output_failed = false;

std::string os_error(int error) {
  return std::strerror(error);
}

// Every byte of `text` to `fd`; the errno of the first failed write, or 0.
int write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t wrote = ::write(fd, text.data() + done, text.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return wrote < 0 ? errno : EIO;
    done += std::size_t(wrote);
  }
  return 0;
}

[[noreturn]] void fail(const std::string& path, const std::string& what, int error) {
  throw InputError(path, what + ": " + os_error(error));
}

// A device or FIFO the user named (/dev/stdout, a pipe): written in place, never replaced.
void write_in_place(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) fail(path, "cannot open for writing", errno);
  const int error = write_all(fd, text);
  if (::close(fd) != 0 && error == 0) fail(path, "cannot write", errno);
  if (error != 0) fail(path, "cannot write", error);
}

mode_t file_mode() {
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return 0666 & ~mask;
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  std::error_code status_error;
  const fs::file_status status = fs::status(path, status_error);
  if (fs::exists(status) && !fs::is_regular_file(status)) {
    if (fs::is_directory(status)) throw InputError(path, "is a directory, not a file to write");
    return write_in_place(path, text);
  }
  const fs::path target(path);
  const fs::path directory = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string temporary =
      (directory / ("." + target.filename().string() + ".zerolens-XXXXXX")).string();
  const int fd = ::mkstemp(temporary.data());
  if (fd < 0) fail(path, "cannot create a temporary file beside it", errno);
  int error = write_all(fd, text);
  if (error == 0 && ::fchmod(fd, file_mode()) != 0) error = errno;
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error == 0 && ::rename(temporary.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) {
    ::unlink(temporary.c_str());
    fail(path, "cannot write (the previous file, if any, is kept)", error);
  }
}

Output::Output(const std::string& path) : path_(path) {
  if (path_.empty()) return;
  // Refused before any work: a directory, or a file in a directory that does not exist.
  namespace fs = std::filesystem;
  const fs::path target(path_);
  std::error_code error;
  if (fs::is_directory(target, error))
    throw InputError(path_, "is a directory, not a file to write");
  const fs::path directory = target.has_parent_path() ? target.parent_path() : fs::path(".");
  if (!fs::is_directory(directory, error))
    throw InputError(path_, "cannot write: directory '" + directory.string() + "' does not exist");
}

void Output::commit() {
  committed_ = true;
  const std::string text = text_.str();
  if (!path_.empty()) return write_file_atomically(path_, text);
  std::cout << text;
  std::cout.flush();
  if (!std::cout)
    throw InputError("standard output", "cannot write: " + os_error(errno ? errno : EIO));
}

Output::~Output() {
  if (committed_ || std::uncaught_exceptions() > 0) return;  // an error: keep what was there
  try {
    commit();
  } catch (const InputError& error) {
    std::cerr << "error: " << error.what() << '\n';
    g_output_failed = true;
  }
}

bool output_failed() {
  return g_output_failed;
}

}  // namespace zerolens::cli
