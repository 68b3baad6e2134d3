// tools/watchdog.hpp - ends a tool that runs too long, so that no benchmark
// (remora-perf, remora-bench-raw) can hang forever. Header-only, standard
// library only.
#pragma once

#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <mutex>
#include <string_view>
#include <system_error>
#include <thread>

namespace remora::tools {

/// The limit from the first of `env_names` that holds a positive number of
/// seconds, else `fallback`.
inline std::chrono::seconds watchdog_limit(std::initializer_list<const char*> env_names,
                                           std::chrono::seconds fallback = std::chrono::seconds(900)) {
  for (const char* name : env_names) {
    const char* env = std::getenv(name);
    if (env == nullptr) continue;
    const std::string_view v(env);
    std::uint64_t secs = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), secs);
    if (ec == std::errc{} && p == v.data() + v.size() && secs > 0) return std::chrono::seconds(secs);
  }
  return fallback;
}

/// While alive, a thread that, once `limit` has passed, prints
/// "<program>: error: watchdog: ..." on stderr, calls `on_expiry` (which
/// must be async-signal-safe: other threads are still running) and ends
/// the process with status 3.
class Watchdog {
 public:
  Watchdog(std::chrono::seconds limit, std::string_view program, void (*on_expiry)() noexcept = nullptr)
      : thread_([this, limit, program, on_expiry] {
          std::unique_lock lock(mutex_);
          if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
            std::fprintf(stderr, "%.*s: error: watchdog: still running after %lld s, giving up\n",
                         static_cast<int>(program.size()), program.data(), static_cast<long long>(limit.count()));
            std::fflush(stderr);
            if (on_expiry != nullptr) on_expiry();
            std::_Exit(3);
          }
        }) {}

  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

}  // namespace remora::tools
