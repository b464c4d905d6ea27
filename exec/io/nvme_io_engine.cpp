// NvmeStore's I/O thread: owns the io_uring ring, keeps up to queue_depth pieces in flight across
// the pending requests (first come, first served), retries short transfers, and finishes requests.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "exec/io/nvme_io_impl.hpp"

namespace zerolens::exec {
namespace {

bool aligned(const std::byte* pointer) {
  return reinterpret_cast<std::uintptr_t>(pointer) % kNvmeAlignment == 0;
}

std::size_t align_down(std::size_t value) {
  return value / kNvmeAlignment * kNvmeAlignment;
}

Bytes file_size(int fd) {
  struct stat info {};
  return ::fstat(fd, &info) == 0 ? Bytes(info.st_size) : -1;
}

}  // namespace

void NvmeStore::Impl::start_engine() {
  const int result = io_uring_queue_init(unsigned(options.queue_depth), &ring, 0);
  if (result < 0) {
    throw NvmeError(
        directory,
        "io_uring is unavailable: " + errno_text(-result) +
            " (kernel.io_uring_disabled, or a container seccomp profile that blocks it)",
        -result);
  }
  const std::size_t bytes = std::size_t(options.queue_depth) * options.block_size;
  bounce = static_cast<std::byte*>(std::aligned_alloc(kNvmeAlignment, bytes));
  if (!bounce) {
    io_uring_queue_exit(&ring);
    throw std::bad_alloc();
  }
  pieces.resize(std::size_t(options.queue_depth));
  for (int slot = options.queue_depth - 1; slot >= 0; --slot) free_slots.push_back(slot);
  thread = std::thread([this] { run(); });
}

// Drains every pending request first: no buffer may be freed under a piece in flight.
void NvmeStore::Impl::stop_engine() {
  {
    std::lock_guard lock(mutex);
    stopping = true;
  }
  work_ready.notify_one();
  if (thread.joinable()) thread.join();
  io_uring_queue_exit(&ring);
  std::free(bounce);
}

NvmeTicket NvmeStore::Impl::enqueue(std::shared_ptr<NvmeRequest> request) {
  const NvmeTicket ticket{request->id};
  {
    std::lock_guard lock(mutex);
    tickets.emplace(request->id, request);
    incoming.push_back(std::move(request));
  }
  work_ready.notify_one();
  return ticket;
}

void NvmeStore::Impl::run() {
  while (take_incoming()) {
    fill_queue();
    finish_ready();
    if (free_slots.size() == pieces.size()) continue;
    submit_and_reap();
    finish_ready();
  }
}

// Waits for work; false once stopping with nothing left (pending requests are drained first).
bool NvmeStore::Impl::take_incoming() {
  const bool idle = free_slots.size() == pieces.size() && running.empty();
  std::unique_lock lock(mutex);
  work_ready.wait(lock, [&] { return stopping || !incoming.empty() || !idle; });
  if (stopping && incoming.empty() && idle) return false;
  for (; !incoming.empty(); incoming.pop_front()) running.push_back(std::move(incoming.front()));
  return true;
}

void NvmeStore::Impl::submit_and_reap() {
  const int submitted = io_uring_submit_and_wait(&ring, 1);
  if (submitted < 0 && submitted != -EINTR && submitted != -EAGAIN && submitted != -EBUSY) {
    // Pieces are in flight over caller memory: neither failing them nor going on is safe.
    std::fprintf(stderr, "nvme store: io_uring_submit_and_wait: %s\n", std::strerror(-submitted));
    std::abort();
  }
  io_uring_cqe* cqe = nullptr;
  while (io_uring_peek_cqe(&ring, &cqe) == 0) {
    const auto slot = int(io_uring_cqe_get_data64(cqe));
    const int result = cqe->res;
    io_uring_cqe_seen(&ring, cqe);
    complete(slot, result);
  }
}

void NvmeStore::Impl::fill_queue() {
  for (const auto& request : running) {
    while (!free_slots.empty() && !request->error && !request->fully_submitted()) {
      const int slot = free_slots.back();
      free_slots.pop_back();
      submit_piece(*request, slot);
    }
    if (free_slots.empty()) return;
  }
}

// The next piece of `request`: straight from/to the caller's memory when that is aligned and the
// piece lies inside the caller's range; otherwise through the slot's bounce area.
void NvmeStore::Impl::submit_piece(NvmeRequest& request, int slot) {
  NvmePiece& piece = pieces[std::size_t(slot)];
  piece = NvmePiece{&request, request.next_offset, 0, 0, 0, nullptr, false};
  const auto block =
      std::size_t(std::min<Bytes>(Bytes(options.block_size), request.aligned_end - piece.offset));
  const bool inside = piece.offset >= request.user_begin;
  std::byte* user_at_piece = inside ? request.user + (piece.offset - request.user_begin) : nullptr;
  const std::size_t user_left = inside ? std::size_t(request.user_end() - piece.offset) : 0;
  const std::size_t direct_length =
      inside && aligned(user_at_piece) ? std::min(block, align_down(user_left)) : 0;
  piece.bounced = direct_length == 0;
  piece.length = piece.bounced ? block : direct_length;
  piece.memory = piece.bounced ? bounce + std::size_t(slot) * options.block_size : user_at_piece;
  const Bytes piece_end = piece.offset + Bytes(piece.length);
  piece.needed = request.is_write
                     ? piece.length
                     : std::size_t(std::min(piece_end, request.user_end()) - piece.offset);
  if (piece.bounced &&
      request.is_write) {  // writes start at the object's first byte: always inside
    const std::size_t copied = std::min(piece.length, user_left);
    std::memcpy(piece.memory, user_at_piece, copied);
    std::memset(piece.memory + copied, 0, piece.length - copied);
  }
  request.next_offset = piece_end;
  ++request.in_flight;
  prepare_sqe(slot);
}

void NvmeStore::Impl::prepare_sqe(int slot) {
  const NvmePiece& piece = pieces[std::size_t(slot)];
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);  // never null: at most queue_depth pieces in flight
  const auto length = unsigned(piece.length - piece.done);
  const auto offset = std::uint64_t(piece.offset) + piece.done;
  if (piece.request->is_write) {
    io_uring_prep_write(sqe, piece.request->fd, piece.memory + piece.done, length, offset);
  } else {
    io_uring_prep_read(sqe, piece.request->fd, piece.memory + piece.done, length, offset);
  }
  io_uring_sqe_set_data64(sqe, std::uint64_t(slot));
}

// A short transfer is resumed where it stopped; none at all (end of file, or a device that
// accepts nothing) fails the request instead of looping.
void NvmeStore::Impl::complete(int slot, int result) {
  NvmePiece& piece = pieces[std::size_t(slot)];
  NvmeRequest& request = *piece.request;
  const std::string where = " at byte " + std::to_string(piece.offset + Bytes(piece.done));
  if (result < 0) {
    fail(request, -result, std::string(request.is_write ? "write" : "read") + " failed" + where);
  } else if (piece.done += std::size_t(result); piece.done < piece.needed && !request.error) {
    const bool resumable =
        result > 0 && (mode == NvmeMode::Buffered || piece.done % kNvmeAlignment == 0);
    if (resumable) {
      prepare_sqe(slot);
      return;
    }
    fail(request, 0,
         request.is_write
             ? "short write" + where + ": the device accepted no more bytes (disk full?)"
             : "short read: the object holds " + std::to_string(file_size(request.fd)) +
                   " bytes, reading " + std::to_string(request.user_length) + " from offset " +
                   std::to_string(request.user_begin) + " needs " +
                   std::to_string(request.user_end()));
  } else if (piece.bounced && !request.is_write && !request.error) {
    const Bytes from = std::max(piece.offset, request.user_begin);
    const Bytes to = std::min(piece.offset + Bytes(piece.length), request.user_end());
    std::memcpy(request.user + (from - request.user_begin), piece.memory + (from - piece.offset),
                std::size_t(to - from));
  }
  --request.in_flight;
  free_slots.push_back(slot);
}

void NvmeStore::Impl::fail(NvmeRequest& request, int error_number, const std::string& what) {
  if (request.error) return;  // the first error is the cause
  request.error =
      NvmeError(request.path, error_number != 0 ? what + ": " + errno_text(error_number) : what,
                error_number);
}

// Requests with nothing left to submit and nothing in flight are committed and handed back.
void NvmeStore::Impl::finish_ready() {
  for (auto it = running.begin(); it != running.end();) {
    NvmeRequest& request = **it;
    if (request.in_flight > 0 || (!request.error && !request.fully_submitted())) {
      ++it;
      continue;
    }
    finish(request);
    it = running.erase(it);
  }
}

void NvmeStore::Impl::finish(NvmeRequest& request) {
  commit(request);
  {
    std::lock_guard lock(mutex);
    if (!request.error) {
      (request.is_write ? counters.bytes_written : counters.bytes_read) +=
          Bytes(request.user_length);
      ++(request.is_write ? counters.writes : counters.reads);
    }
    request.finished = true;
  }
  request_done.notify_all();
}

}  // namespace zerolens::exec
