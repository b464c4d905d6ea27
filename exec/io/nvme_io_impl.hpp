#pragma once
// Internals of NvmeStore shared by its two source files: nvme_io.cpp (files: naming, probing,
// opening, committing) and nvme_io_engine.cpp (the io_uring thread that keeps the queue full).
#include <liburing.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "exec/io/nvme_io.hpp"

namespace zerolens::exec {

// One write or read, split into pieces of at most block_size bytes of the aligned file range.
struct NvmeRequest {
  std::uint64_t id = 0;
  bool is_write = false;
  int fd = -1;
  std::string path;       // the object's file
  std::string temp_path;  // writes: where the data goes until it is complete (empty: in place)
  std::byte* user = nullptr;
  Bytes user_begin = 0;  // file offset of user[0]
  std::size_t user_length = 0;
  Bytes aligned_end = 0;  // the file range moved is [aligned begin, aligned_end)
  Bytes next_offset = 0;  // start of the next piece to submit (I/O thread only)
  int in_flight = 0;      // pieces submitted and not completed (I/O thread only)
  bool finished = false;  // guarded by the store's mutex
  std::optional<NvmeError> error;

  Bytes user_end() const { return user_begin + Bytes(user_length); }
  bool fully_submitted() const { return next_offset >= aligned_end; }
};

// A queue slot: one piece in flight, with its own aligned bounce area.
struct NvmePiece {
  NvmeRequest* request = nullptr;
  Bytes offset = 0;        // file offset of the piece
  std::size_t length = 0;  // bytes sent to the kernel (aligned)
  std::size_t needed = 0;  // bytes that must transfer (reads: up to the end of the user range)
  std::size_t done = 0;    // bytes transferred so far
  std::byte* memory = nullptr;
  bool bounced = false;
};

struct NvmeStore::Impl {
  Impl(const std::string& directory, const NvmeOptions& options);
  ~Impl();

  // nvme_io.cpp
  void probe_directory();
  std::shared_ptr<NvmeRequest> open_write(const std::string& name, std::span<const std::byte> data);
  std::shared_ptr<NvmeRequest> open_read(const std::string& name, std::span<std::byte> destination,
                                         Bytes offset);
  void commit(NvmeRequest& request);  // after the last piece: rename or clean up, close
  int open_flags() const;

  // nvme_io_engine.cpp
  void start_engine();
  void stop_engine();
  NvmeTicket enqueue(std::shared_ptr<NvmeRequest> request);
  void run();
  bool take_incoming();
  void submit_and_reap();
  void fill_queue();
  void submit_piece(NvmeRequest& request, int slot);
  void prepare_sqe(int slot);
  void complete(int slot, int result);
  void fail(NvmeRequest& request, int error_number, const std::string& what);
  void finish_ready();
  void finish(NvmeRequest& request);

  std::string directory;
  NvmeOptions options;
  NvmeMode mode = NvmeMode::Direct;
  std::string mode_reason;

  io_uring ring{};
  std::byte* bounce = nullptr;  // queue_depth x block_size, 4096-aligned
  std::vector<NvmePiece> pieces;
  std::vector<int> free_slots;
  std::deque<std::shared_ptr<NvmeRequest>> running;  // I/O thread only
  std::thread thread;

  mutable std::mutex mutex;  // guards everything below
  std::condition_variable work_ready, request_done;
  std::deque<std::shared_ptr<NvmeRequest>> incoming;
  std::map<std::uint64_t, std::shared_ptr<NvmeRequest>> tickets;
  std::uint64_t next_id = 1;
  bool stopping = false;
  NvmeCounters counters;
};

std::string errno_text(int error_number);

}  // namespace zerolens::exec
