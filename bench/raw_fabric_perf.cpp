// remora-bench-raw: the raw libfabric baseline that remora-perf is compared
// against. Same command line and output as remora-perf; every operation is
// posted directly with libfabric calls (see bench/README.md).
#include "raw/engine.hpp"
#include "raw/fabric.hpp"
#include "raw/options.hpp"

#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <thread>

namespace {

constexpr std::string_view kProgram = "remora-bench-raw";

// Ends the process if the run is not over in time, so that no benchmark can
// hang forever. The limit is REMORA_BENCH_WATCHDOG_S seconds (default 900).
class Watchdog {
public:
    explicit Watchdog(std::chrono::seconds limit)
        : thread_([this, limit] {
              std::unique_lock lock(mutex_);
              if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
                  std::fprintf(stderr, "%s: error: watchdog: still running after %lld s, giving up\n",
                               kProgram.data(), static_cast<long long>(limit.count()));
                  std::fflush(stderr);
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

std::chrono::seconds watchdog_limit() {
    std::uint64_t secs = 900;
    if (const char* env = std::getenv("REMORA_BENCH_WATCHDOG_S")) {
        std::string_view v(env);
        std::uint64_t parsed = 0;
        auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), parsed);
        if (ec == std::errc{} && p == v.data() + v.size() && parsed > 0) secs = parsed;
    }
    return std::chrono::seconds(secs);
}

}  // namespace

int main(int argc, char** argv) {
    rbench::Config cfg;
    try {
        cfg = rbench::parse_command_line(argc, argv);
    } catch (const rbench::UsageError& e) {
        std::fprintf(stderr, "%s: %s (see --help)\n", kProgram.data(), e.what());
        return 2;
    }
    if (cfg.help) {
        std::fputs(rbench::usage_text(kProgram).c_str(), stdout);
        return 0;
    }
    try {
        Watchdog watchdog(watchdog_limit());
        if (cfg.role == rbench::Role::server)
            rbench::run_server(cfg);
        else
            rbench::run_client(cfg);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: error: %s\n", kProgram.data(), e.what());
        return 1;
    }
    return 0;
}
