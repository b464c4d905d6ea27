#pragma once
// NVMe offload storage: named objects (one file each) under a directory (DeepSpeed's nvme_path),
// written and read asynchronously through io_uring so the engine can overlap I/O with compute.
//
// Semantics follow DeepSpeed's "aio" section: every request is split into pieces of `block_size`
// bytes and up to `queue_depth` pieces are in flight at once (across all pending requests, kept
// full as pieces complete). Files are opened with O_DIRECT: the I/O bypasses the page cache, so
// offsets and lengths sent to the kernel are multiples of 4096 and so are the buffer addresses.
// Callers should pass 4096-aligned buffers (TrackedBuffer<std::byte>(..., 4096)); any piece that
// is not aligned (odd sizes, the tail, unaligned spans or read offsets) goes through an internal
// aligned bounce buffer instead, so any size and address works. A filesystem that refuses
// O_DIRECT (EINVAL, e.g. an old tmpfs) is used with buffered I/O instead; mode() says which.
//
// A write replaces the whole object: it goes to a temporary file in the same directory, which is
// renamed over the object only after every piece succeeded, so a failed write (disk full, I/O
// error) leaves the previous version intact. Errors are NvmeError exceptions naming the file and
// the errno text: from write_async/read_async when the file cannot be opened or space cannot be
// reserved, from wait() when a piece fails or comes back short.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>

#include "sim/core/units.hpp"

namespace zerolens::exec {

inline constexpr std::size_t kNvmeAlignment = 4096;

class NvmeError : public std::runtime_error {
 public:
  NvmeError(const std::string& path, const std::string& what, int error_number);
  const std::string& path() const { return path_; }
  int error_number() const { return error_number_; }  // errno, 0 for a short transfer

 private:
  std::string path_;
  int error_number_;
};

struct NvmeOptions {
  std::size_t block_size = std::size_t{1}
                           << 20;  // aio.block_size: bytes per piece, multiple of 4096
  int queue_depth = 8;             // aio.queue_depth: pieces in flight, 1..4096
  bool direct = true;       // try O_DIRECT; false forces buffered I/O (through the page cache)
  bool preallocate = true;  // reserve a write's space up front (fallocate): disk full fails early
  // A write of the same size as the object's current file goes into that file in place: no new
  // file, no rename, no freeing of the old blocks (about half the write time on ext4 for 256 MiB
  // objects). Its space is already allocated, so a full disk cannot fail it, but an I/O error
  // leaves the object part old, part new. For swap files that are rewritten every step; off by
  // default (a write then replaces the object atomically, as described above).
  bool overwrite_in_place = false;
};

enum class NvmeMode { Direct, Buffered };
const char* to_string(NvmeMode mode);

struct NvmeCounters {
  Bytes bytes_written = 0;  // payload bytes of completed writes (not counting alignment padding)
  Bytes bytes_read = 0;     // payload bytes of completed reads
  std::int64_t writes = 0;  // completed write requests
  std::int64_t reads = 0;   // completed read requests
};

// Identifies one pending request; wait() on it exactly once.
struct NvmeTicket {
  std::uint64_t id = 0;
};

// Every member may be called from any thread; one I/O thread per store does the work.
class NvmeStore {
 public:
  // `directory` must exist and be writable (checked by writing a probe file, which also decides
  // the mode). Throws NvmeError naming the directory otherwise, std::invalid_argument for bad
  // options.
  NvmeStore(const std::string& directory, const NvmeOptions& options = {});
  // Waits for every pending request (their errors are dropped; wait on tickets to see them).
  ~NvmeStore();
  NvmeStore(const NvmeStore&) = delete;
  NvmeStore& operator=(const NvmeStore&) = delete;

  // Starts writing `data` as the whole content of object `name` (letters, digits, '.', '_', '-';
  // not starting with '.'). `data` must stay alive and unchanged until wait() returns.
  NvmeTicket write_async(const std::string& name, std::span<const std::byte> data);
  // Starts reading `destination.size()` bytes of object `name` from byte `offset` into
  // `destination`, which must stay alive until wait() returns. Reading an object never written
  // throws NvmeError (ENOENT); reading past its end fails in wait() as a short read.
  NvmeTicket read_async(const std::string& name, std::span<std::byte> destination,
                        Bytes offset = 0);
  // Blocks until the request finished; throws its NvmeError if it failed. An unknown or already
  // waited ticket throws std::invalid_argument.
  void wait(NvmeTicket ticket);
  bool done(NvmeTicket ticket) const;  // true once wait() would not block
  void wait_all();                     // waits for every pending ticket, throws the first error

  void write(const std::string& name, std::span<const std::byte> data) {
    wait(write_async(name, data));
  }
  void read(const std::string& name, std::span<std::byte> destination, Bytes offset = 0) {
    wait(read_async(name, destination, offset));
  }
  bool contains(const std::string& name) const;
  Bytes size_of(const std::string& name) const;  // throws NvmeError when absent
  void remove(const std::string& name);          // no error when absent

  NvmeMode mode() const;
  const std::string& mode_reason() const;  // why buffered, empty in direct mode
  const std::string& directory() const;
  const NvmeOptions& options() const;
  NvmeCounters counters() const;
  std::string path_of(const std::string& name) const;
  // Host memory the store holds for bounce buffers (queue_depth x block_size), for a ledger.
  Bytes staging_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zerolens::exec
