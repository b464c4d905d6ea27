// NvmeStore's file side: object names, the directory probe (writable? O_DIRECT?), opening and
// reserving files, and committing a finished write by renaming its temporary file.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "exec/io/nvme_io_impl.hpp"

namespace zerolens::exec {
namespace {

Bytes round_up(Bytes value) {
  return ceil_div(value, Bytes(kNvmeAlignment)) * Bytes(kNvmeAlignment);
}
Bytes round_down(Bytes value) {
  return value / Bytes(kNvmeAlignment) * Bytes(kNvmeAlignment);
}

void check_name(const std::string& name) {
  bool valid = !name.empty() && name.size() <= 200 && name.front() != '.';
  for (const char c : name) {
    const bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                         (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    valid = valid && allowed;
  }
  if (!valid) {
    throw std::invalid_argument(
        "nvme store: object name '" + name +
        "' must be 1-200 letters, digits, '.', '_' or '-', not starting with '.'");
  }
}

void check_options(const NvmeOptions& options) {
  if (options.block_size == 0 || options.block_size % kNvmeAlignment != 0 ||
      options.block_size > (std::size_t{1} << 30)) {
    throw std::invalid_argument("nvme store: block_size " + std::to_string(options.block_size) +
                                " must be a positive multiple of 4096 bytes, at most 1 GiB");
  }
  if (options.queue_depth < 1 || options.queue_depth > 4096) {
    throw std::invalid_argument("nvme store: queue_depth " + std::to_string(options.queue_depth) +
                                " must be between 1 and 4096");
  }
}

// Closes a descriptor on scope exit unless released.
class FileGuard {
 public:
  explicit FileGuard(int fd) : fd_(fd) {}
  ~FileGuard() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileGuard(const FileGuard&) = delete;
  FileGuard& operator=(const FileGuard&) = delete;
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

std::string probe_path(const std::string& directory) {
  static std::atomic<int> counter{0};
  return directory + "/.zerolens-probe-" + std::to_string(::getpid()) + "-" +
         std::to_string(counter++);
}

// Writes one aligned block; returns 0 or the errno.
int write_probe_block(int fd) {
  void* block = std::aligned_alloc(kNvmeAlignment, kNvmeAlignment);
  if (!block) throw std::bad_alloc();
  std::memset(block, 0, kNvmeAlignment);
  const ssize_t written = ::pwrite(fd, block, kNvmeAlignment, 0);
  const int error_number = written < 0 ? errno : (written == ssize_t(kNvmeAlignment) ? 0 : ENOSPC);
  std::free(block);
  return error_number;
}

}  // namespace

std::string errno_text(int error_number) {
  return std::strerror(error_number);
}

NvmeError::NvmeError(const std::string& path, const std::string& what, int error_number)
    : std::runtime_error(path + ": " + what), path_(path), error_number_(error_number) {}

const char* to_string(NvmeMode mode) {
  return mode == NvmeMode::Direct ? "direct (O_DIRECT)" : "buffered";
}

NvmeStore::Impl::Impl(const std::string& directory_path, const NvmeOptions& store_options)
    : directory(directory_path), options(store_options) {
  check_options(options);
  while (directory.size() > 1 && directory.back() == '/') directory.pop_back();
  probe_directory();
  start_engine();
}

NvmeStore::Impl::~Impl() {
  stop_engine();
}

int NvmeStore::Impl::open_flags() const {
  return O_CLOEXEC | (mode == NvmeMode::Direct ? O_DIRECT : 0);
}

// Decides the mode and proves the directory writable by writing one aligned block.
void NvmeStore::Impl::probe_directory() {
  struct stat info {};
  if (::stat(directory.c_str(), &info) != 0) {
    throw NvmeError(directory, "nvme_path is not usable: " + errno_text(errno), errno);
  }
  if (!S_ISDIR(info.st_mode)) throw NvmeError(directory, "nvme_path is not a directory", ENOTDIR);
  mode = options.direct ? NvmeMode::Direct : NvmeMode::Buffered;
  if (!options.direct) mode_reason = "buffered I/O requested (direct = false)";
  const std::string probe = probe_path(directory);
  for (;;) {
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | open_flags(), 0600);
    const int error_number = fd < 0 ? errno : write_probe_block(fd);
    if (fd >= 0) ::close(fd);
    ::unlink(probe.c_str());
    if (error_number == 0) return;
    if (error_number == EINVAL && mode == NvmeMode::Direct) {
      mode = NvmeMode::Buffered;
      mode_reason = "the filesystem refused O_DIRECT (EINVAL)";
      continue;
    }
    throw NvmeError(directory, "cannot write files in nvme_path: " + errno_text(error_number),
                    error_number);
  }
}

std::shared_ptr<NvmeRequest> NvmeStore::Impl::open_write(const std::string& name,
                                                         std::span<const std::byte> data) {
  check_name(name);
  auto request = std::make_shared<NvmeRequest>();
  request->is_write = true;
  request->path = directory + "/" + name;
  request->user = const_cast<std::byte*>(data.data());  // never written through for writes
  request->user_length = data.size();
  request->aligned_end = round_up(Bytes(data.size()));
  {
    std::lock_guard lock(mutex);
    request->id = next_id++;
  }
  if (options.overwrite_in_place) {
    struct stat info {};
    if (::stat(request->path.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
        std::size_t(info.st_size) == data.size()) {
      const int fd = ::open(request->path.c_str(), O_WRONLY | open_flags());
      if (fd < 0)
        throw NvmeError(request->path, "cannot open for writing: " + errno_text(errno), errno);
      request->fd = fd;
      return request;
    }
  }
  request->temp_path = directory + "/." + name + ".partial-" + std::to_string(request->id);
  const int fd =
      ::open(request->temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | open_flags(), 0644);
  if (fd < 0)
    throw NvmeError(request->path, "cannot create " + request->temp_path + ": " + errno_text(errno),
                    errno);
  FileGuard guard(fd);
  if (options.preallocate && request->aligned_end > 0 &&
      ::fallocate(fd, 0, 0, request->aligned_end) != 0) {
    const int error_number = errno;
    if (error_number != EOPNOTSUPP && error_number != ENOSYS) {
      ::unlink(request->temp_path.c_str());
      throw NvmeError(request->path,
                      "cannot reserve " + std::to_string(request->aligned_end) +
                          " bytes: " + errno_text(error_number),
                      error_number);
    }
  }
  request->fd = guard.release();
  return request;
}

std::shared_ptr<NvmeRequest> NvmeStore::Impl::open_read(const std::string& name,
                                                        std::span<std::byte> destination,
                                                        Bytes offset) {
  check_name(name);
  if (offset < 0)
    throw std::invalid_argument("nvme store: read offset " + std::to_string(offset) +
                                " is negative");
  auto request = std::make_shared<NvmeRequest>();
  request->path = directory + "/" + name;
  request->user = destination.data();
  request->user_begin = offset;
  request->user_length = destination.size();
  request->next_offset = round_down(offset);
  request->aligned_end = destination.empty() ? request->next_offset : round_up(request->user_end());
  const int fd = ::open(request->path.c_str(), O_RDONLY | open_flags());
  if (fd < 0) {
    const int error_number = errno;
    const std::string hint = error_number == ENOENT ? " (nothing was written under this name)" : "";
    throw NvmeError(request->path, "cannot open for reading: " + errno_text(error_number) + hint,
                    error_number);
  }
  request->fd = fd;
  std::lock_guard lock(mutex);
  request->id = next_id++;
  return request;
}

// Runs on the I/O thread once no piece of the request is in flight.
void NvmeStore::Impl::commit(NvmeRequest& request) {
  if (request.is_write && !request.error &&
      ::ftruncate(request.fd, Bytes(request.user_length)) != 0) {
    fail(request, errno, "cannot set the file size");
  }
  if (::close(request.fd) != 0 && request.is_write && !request.error)
    fail(request, errno, "close failed");
  request.fd = -1;
  if (!request.is_write || request.temp_path.empty()) return;
  if (!request.error && ::rename(request.temp_path.c_str(), request.path.c_str()) != 0) {
    fail(request, errno, "cannot rename " + request.temp_path + " over it");
  }
  if (request.error) ::unlink(request.temp_path.c_str());
}

NvmeStore::NvmeStore(const std::string& directory, const NvmeOptions& options)
    : impl_(std::make_unique<Impl>(directory, options)) {}

NvmeStore::~NvmeStore() = default;

NvmeTicket NvmeStore::write_async(const std::string& name, std::span<const std::byte> data) {
  return impl_->enqueue(impl_->open_write(name, data));
}

NvmeTicket NvmeStore::read_async(const std::string& name, std::span<std::byte> destination,
                                 Bytes offset) {
  return impl_->enqueue(impl_->open_read(name, destination, offset));
}

void NvmeStore::wait(NvmeTicket ticket) {
  std::unique_lock lock(impl_->mutex);
  const auto it = impl_->tickets.find(ticket.id);
  if (it == impl_->tickets.end()) {
    throw std::invalid_argument("nvme store: ticket " + std::to_string(ticket.id) +
                                " is unknown or already waited");
  }
  const std::shared_ptr<NvmeRequest> request = it->second;
  impl_->request_done.wait(lock, [&] { return request->finished; });
  impl_->tickets.erase(ticket.id);
  if (request->error) throw *request->error;
}

bool NvmeStore::done(NvmeTicket ticket) const {
  std::lock_guard lock(impl_->mutex);
  const auto it = impl_->tickets.find(ticket.id);
  if (it == impl_->tickets.end()) {
    throw std::invalid_argument("nvme store: ticket " + std::to_string(ticket.id) +
                                " is unknown or already waited");
  }
  return it->second->finished;
}

void NvmeStore::wait_all() {
  std::vector<std::uint64_t> ids;
  {
    std::lock_guard lock(impl_->mutex);
    for (const auto& [id, request] : impl_->tickets) ids.push_back(id);
  }
  std::optional<NvmeError> first;
  for (const auto id : ids) {
    try {
      wait(NvmeTicket{id});
    } catch (const NvmeError& error) {
      if (!first) first = error;
    }
  }
  if (first) throw *first;
}

bool NvmeStore::contains(const std::string& name) const {
  check_name(name);
  struct stat info {};
  return ::stat(path_of(name).c_str(), &info) == 0;
}

Bytes NvmeStore::size_of(const std::string& name) const {
  check_name(name);
  struct stat info {};
  if (::stat(path_of(name).c_str(), &info) != 0)
    throw NvmeError(path_of(name), errno_text(errno), errno);
  return Bytes(info.st_size);
}

void NvmeStore::remove(const std::string& name) {
  check_name(name);
  if (::unlink(path_of(name).c_str()) != 0 && errno != ENOENT) {
    throw NvmeError(path_of(name), "cannot remove: " + errno_text(errno), errno);
  }
}

NvmeMode NvmeStore::mode() const {
  return impl_->mode;
}
const std::string& NvmeStore::mode_reason() const {
  return impl_->mode_reason;
}
const std::string& NvmeStore::directory() const {
  return impl_->directory;
}
const NvmeOptions& NvmeStore::options() const {
  return impl_->options;
}
std::string NvmeStore::path_of(const std::string& name) const {
  return impl_->directory + "/" + name;
}
Bytes NvmeStore::staging_bytes() const {
  return Bytes(impl_->options.block_size) * impl_->options.queue_depth;
}

NvmeCounters NvmeStore::counters() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->counters;
}

}  // namespace zerolens::exec
