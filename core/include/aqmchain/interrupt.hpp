// Cooperative interruption of long loops (Ctrl-C from Python, a caller's cancel).
//
// The core never installs signal handlers: a front end (the Python bindings)
// sets the flag, e.g. from a SIGINT handler, and long loops call
// check_interrupt() every few milliseconds of work, which throws Interrupted.
// The flag is process-wide and cleared by the front end before each call.
#pragma once

#include <atomic>
#include <stdexcept>

namespace aqm {

/// Thrown by check_interrupt() when an interruption was requested.
class Interrupted : public std::runtime_error {
 public:
  Interrupted() : std::runtime_error("interrupted") {}
};

namespace detail {
inline std::atomic<bool>& interrupt_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}
}  // namespace detail

/// Ask every running loop to stop at its next check (async-signal-safe: a lock-free store).
inline void request_interrupt() { detail::interrupt_flag().store(true, std::memory_order_relaxed); }
inline void clear_interrupt() { detail::interrupt_flag().store(false, std::memory_order_relaxed); }
inline bool interrupt_requested() { return detail::interrupt_flag().load(std::memory_order_relaxed); }
/// Throw Interrupted when an interruption was requested.
inline void check_interrupt() {
  if (interrupt_requested()) throw Interrupted();
}

}  // namespace aqm
