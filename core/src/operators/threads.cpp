#include "aqmchain/threads.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "aqmchain/errors.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace aqm {

int set_num_threads(int n) {
  if (n < 1) fail_param("threads", ">= 1", n);
#ifdef _OPENMP
  const int old = omp_get_max_threads();
  omp_set_num_threads(n);
  return old;
#else
  return 1;
#endif
}

int num_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

namespace {

/// Cores not taken by another process's runnable task, or -1 where the kernel does not say:
/// the runnable tasks of the whole machine (/proc/loadavg) less this process's own running
/// threads (/proc/self/task/*/stat: the caller, and OpenMP or BLAS threads still spinning
/// after their last loop, which would otherwise read as a busy core).
int idle_cores() {
  char buf[256];
  auto read_file = [&buf](const char* path) -> ssize_t {
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    const ssize_t len = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (len >= 0) buf[len] = '\0';
    return len;
  };
  if (read_file("/proc/loadavg") <= 0) return -1;
  // "0.52 0.31 0.20 3/250 12345": the fourth field is runnable / all tasks, this one included
  const char* p = buf;
  for (int field = 0; field < 3; ++field) {
    while (*p && *p != ' ') ++p;
    while (*p == ' ') ++p;
  }
  char* end = nullptr;
  const long running = std::strtol(p, &end, 10);
  if (end == p || *end != '/' || running < 1) return -1;
  long ours = 0;
  if (DIR* dir = ::opendir("/proc/self/task")) {
    while (const dirent* d = ::readdir(dir)) {
      if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
      char path[64];
      std::snprintf(path, sizeof path, "/proc/self/task/%s/stat", d->d_name);
      if (read_file(path) <= 0) continue;
      const char* close = std::strrchr(buf, ')');  // "tid (name) S ...": the state after the name
      if (close && close[1] == ' ' && close[2] == 'R') ++ours;
    }
    ::closedir(dir);
  }
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (online < 1) return -1;
  const long others = std::max(0L, running - std::max(1L, ours));
  return static_cast<int>(std::max(0L, online - others));
}

/// On unless AQMCHAIN_ADAPTIVE_THREADS=0, or OMP_WAIT_POLICY=active (threads that spin without
/// end: the machine is the caller's alone), or the kernel does not give the counts.
bool adapting() {
  static const bool on = [] {
    const char* off = std::getenv("AQMCHAIN_ADAPTIVE_THREADS");
    if (off && std::strcmp(off, "0") == 0) return false;
    const char* policy = std::getenv("OMP_WAIT_POLICY");
    while (policy && *policy == ' ') ++policy;
    if (policy && ::strncasecmp(policy, "active", 6) == 0) return false;
    return idle_cores() >= 0;
  }();
  return on;
}

}  // namespace

int loop_threads() {
#ifdef _OPENMP
  const int setting = omp_get_max_threads();
  if (setting <= 1 || !adapting()) return setting;
  using Clock = std::chrono::steady_clock;
  static std::atomic<long long> next_reading{0};
  static std::atomic<int> allowed{1 << 20};
  static std::atomic<int> idle_readings{0};
  const long long now = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch()).count();
  long long due = next_reading.load(std::memory_order_relaxed);
  if (now >= due && next_reading.compare_exchange_strong(due, now + 20000, std::memory_order_relaxed)) {
    const int idle = idle_cores();
    if (idle >= 0) {
      const int cap = std::max(1, idle);
      if (cap < allowed.load(std::memory_order_relaxed)) {
        allowed.store(cap, std::memory_order_relaxed);  // busy: fewer threads at once
        idle_readings.store(0, std::memory_order_relaxed);
      } else if (cap > allowed.load(std::memory_order_relaxed) &&
                 idle_readings.fetch_add(1, std::memory_order_relaxed) >= 1) {
        allowed.store(cap, std::memory_order_relaxed);  // idle twice in a row: more threads again
        idle_readings.store(0, std::memory_order_relaxed);
      }
    }
  }
  return std::max(1, std::min(setting, allowed.load(std::memory_order_relaxed)));
#else
  return 1;
#endif
}

int part_threads(long long items, int cap) {
#ifdef _OPENMP
  if (items <= kParallelLoopItems || omp_in_parallel()) return 1;
  return std::max(1, std::min(loop_threads(), cap));
#else
  (void)items;
  (void)cap;
  return 1;
#endif
}

}  // namespace aqm
