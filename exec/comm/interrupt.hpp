#pragma once
// SIGINT/SIGTERM and stuck peers during a run. The signal handler only records the signal (an
// async-signal-safe sig_atomic_t); the training loop and the collectives' wait loops poll it and
// unwind by throwing Interrupted, so that RAII removes what the run made (NVMe swap directories, a
// partial checkpoint). The collective watchdog: a collective that makes no progress for the
// timeout names itself and this rank on stderr and aborts the job (a peer is stopped or dead).
#include <cstdint>
#include <string>

namespace zerolens::exec {

// Thrown where a run polls and finds SIGINT or SIGTERM received. Not a std::exception: code that
// turns errors into messages (catch std::exception) lets it through to the run's handler.
class Interrupted {
 public:
  explicit Interrupted(int signal) : signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

// Installs the SIGINT and SIGTERM handlers (idempotent).
void install_interrupt_handlers();
// The signal received (SIGINT or SIGTERM), or 0.
int pending_interrupt();
// Throws Interrupted when a signal was received.
void throw_if_interrupted();
// "SIGINT", "SIGTERM" or "signal N".
std::string signal_name(int signal);

// The collective watchdog: seconds a collective may make no progress (0: wait forever; default
// 300, as NCCL's and torch's watchdogs) and the step the run is in (for the message; -1: unknown).
void set_collective_timeout(double seconds);
double collective_timeout();
void set_current_step(std::int64_t step);
std::int64_t current_step();

}  // namespace zerolens::exec
