#include "exec/comm/interrupt.hpp"

#include <atomic>
#include <csignal>

namespace zerolens::exec {
namespace {

volatile std::sig_atomic_t g_signal = 0;
double g_timeout = 300;
std::atomic<std::int64_t> g_step{-1};

extern "C" void record_signal(int signal) {
  if (g_signal == 0) g_signal = signal;  // a second signal keeps the first (the run is unwinding)
}

}  // namespace

void install_interrupt_handlers() {
  struct sigaction action {};
  action.sa_handler = record_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a blocking read returns EINTR and the loop polls
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int pending_interrupt() {
  return int(g_signal);
}

void throw_if_interrupted() {
  if (const int signal = pending_interrupt(); signal != 0) throw Interrupted(signal);
}

std::string signal_name(int signal) {
  if (signal == SIGINT) return "SIGINT";
  if (signal == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(signal);
}

void set_collective_timeout(double seconds) {
  g_timeout = seconds;
}
double collective_timeout() {
  return g_timeout;
}
void set_current_step(std::int64_t step) {
  g_step = step;
}
std::int64_t current_step() {
  return g_step;
}

}  // namespace zerolens::exec
