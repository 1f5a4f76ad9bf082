// Cooperative interruption of long loops (Ctrl-C from Python, a caller's cancel).
//
// The core never installs signal handlers: a front end (the Python bindings)
// sets the flag, e.g. from a SIGINT handler, and long loops call
// check_interrupt() every few milliseconds of work, which throws Interrupted.
// The flag is process-wide and cleared by the front end before each call.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>

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

/// Work that makes no checks of its own (a library call: UMFPACK's factorisation) run so
/// that an interruption need not wait for it: f runs on a worker thread while the
/// calling thread polls the flag every 10 ms.  On an interruption the caller throws
/// Interrupted at once and the worker is abandoned: detached, it runs f to its end
/// and frees what it owns.  f must therefore own everything it touches (captured by
/// value or by shared_ptr, never a reference into the caller's frame), and its
/// results go to such shared state.  An exception from f is rethrown to the caller.
template <class F>
void run_abandonable(F f) {
  struct Shared {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
  };
  auto shared = std::make_shared<Shared>();
  std::thread([shared, f = std::move(f)]() mutable {
    std::exception_ptr error;
    try {
      f();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(shared->m);
      shared->error = error;
      shared->done = true;
    }
    shared->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(shared->m);
  while (!shared->cv.wait_for(lock, std::chrono::milliseconds(10), [&] { return shared->done; }))
    if (interrupt_requested()) throw Interrupted();
  if (shared->error) std::rethrow_exception(shared->error);
}

}  // namespace aqm
