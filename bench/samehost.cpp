// remora-bench-samehost: the same-host baselines of issue 10, measured in
// one run of one program. Every engine copies the same sizes:
//
//   memcpy         single-thread memcpy between two buffers of this process
//   cma            process_vm_writev from this process into a buffer of a
//                  forked child (cross-memory attach); bandwidth per size and
//                  the latency of one 8-byte write
//   cma-pair       writes at queue depth 16 in batches of 16, each write cut
//                  in two: this process moves the lower parts with one
//                  process_vm_writev while the child moves the upper parts
//                  with one process_vm_readv (the most two processes get
//                  from cross-memory attach; 8 KiB and larger)
//   libfabric-shm  libfabric's shm provider, FI_EP_RDM endpoints in this
//                  process and a forked child: fi_write bandwidth at queue
//                  depth 16 (delivery-complete and default completion) and
//                  the latency of one 8-byte delivery-complete write
//
// Depends on libfabric and the standard library only (the option parser and
// the watchdog limit come from the header-only tools/cli.hpp and
// tools/watchdog.hpp). Nothing here may hang: every wait has a deadline, and
// an alarm re-armed before each measurement kills the child and exits 3 if
// one measurement stalls for the watchdog limit.
#include <fcntl.h>
#include <poll.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "bench_stats.hpp"
#include "cli.hpp"
#include "watchdog.hpp"

namespace {

using remora::bench::add_batch;
using remora::bench::Batch;
using remora::bench::cpu_seconds;
using remora::bench::errno_text;
using remora::bench::fixed;
using remora::bench::host_ticks;
using remora::bench::median;
using remora::bench::number;
using remora::bench::percentile;
using remora::bench::steal_percent;

using Clock = std::chrono::steady_clock;
using remora::tools::UsageError;

constexpr std::string_view kProgram = "remora-bench-samehost";
constexpr std::size_t kMaxSize = std::size_t{1} << 30;
constexpr std::size_t kLatencySize = 8;                // the latency rows always copy 8 bytes
constexpr unsigned kQueueDepth = 16;                   // libfabric-shm bandwidth
constexpr auto kWaitLimit = std::chrono::seconds(10);  // one wait for a peer or a completion

// ---------------------------------------------------------------- options

struct Config {
  std::vector<std::size_t> sizes{8, 4096, 65536, 1048576};
  unsigned reps = 5;
  double duration_s = 0.3;
  bool json = false;
  std::string only;      // empty: every engine
  std::size_t span = 0;  // --target-span: 0, or the targets' length, which the copies walk
  bool help = false;
};

constexpr remora::tools::Option<Config> kOptions[] = {
    {"--size", "BYTES[,BYTES...]", "sizes to copy (k, m, g suffixes; default 8,4096,65536,1048576)",
     [](Config& c, std::string_view v) { c.sizes = remora::tools::parse_size_list("--size", v, kMaxSize); }},
    {"--reps", "N", "repetitions per engine and size; the figures are their medians (default 5)",
     [](Config& c, std::string_view v) {
       const auto n = remora::tools::parse_u64("--reps", v);
       if (n == 0 || n > 1000) throw UsageError("--reps: between 1 and 1000");
       c.reps = static_cast<unsigned>(n);
     }},
    {"-D|--duration", "SECONDS", "length of one repetition of one engine and size (default 0.3)",
     [](Config& c, std::string_view v) { c.duration_s = remora::tools::parse_seconds("--duration", v, 0.001, 60); }},
    {"--only", "ENGINE[,ENGINE...]", "run only these engines: memcpy, cma, cma-pair, libfabric-shm",
     [](Config& c, std::string_view v) {
       for (std::string_view rest = v;;) {
         const auto comma = rest.find(',');
         const auto name = rest.substr(0, comma);
         if (name != "memcpy" && name != "cma" && name != "cma-pair" && name != "libfabric-shm")
           throw UsageError("--only: unknown engine '" + std::string(name) +
                            "' (memcpy, cma, cma-pair, libfabric-shm)");
         if (comma == std::string_view::npos) break;
         rest.remove_prefix(comma + 1);
       }
       c.only = "," + std::string(v) + ",";
     }},
    {"--target-span", "BYTES",
     "every target (memcpy's destination, the child's buffer) is this long when\n"
     "a size is shorter, and the copies of that size walk it, each at the offset\n"
     "after the last one's (default: targets as long as the largest size, every\n"
     "copy at offset 0)",
     [](Config& c, std::string_view v) { c.span = remora::tools::parse_size("--target-span", v, kMaxSize); }},
    {"--json", "", "one JSON object per row (and per skipped engine) instead of the table",
     [](Config& c, std::string_view) { c.json = true; }},
    {"--help", "", "this text", [](Config& c, std::string_view) { c.help = true; }},
};

// The length of the targets of a run whose largest size is `largest`.
std::size_t target_length(const Config& c, std::size_t largest) { return std::max(largest, c.span); }

// Where the `i`-th copy of `size` bytes lands in the target: walking a
// --target-span longer than `size`, else at 0.
std::size_t walk_at(const Config& c, std::uint64_t i, std::size_t size) {
  return c.span > size ? static_cast<std::size_t>(i % (c.span / size)) * size : 0;
}

// The bytes from the target's start that `writes` writes of `size` bytes
// placed by walk_at from i = 0 cover (what the child checks after a
// measurement): every slot they reached, at most the span's; the first
// `size` when the target is not walked.
std::size_t walked_bytes(const Config& c, std::uint64_t writes, std::size_t size) {
  if (c.span <= size) return size;
  return static_cast<std::size_t>(std::min<std::uint64_t>(writes, c.span / size)) * size;
}

bool wanted(const Config& c, std::string_view engine) {
  return c.only.empty() || c.only.find("," + std::string(engine) + ",") != std::string::npos;
}

// ---------------------------------------------------------------- watchdog

volatile sig_atomic_t g_child = 0;  // the child to kill when the watchdog fires
unsigned g_watchdog_s = 60;

void on_alarm(int) {
  static constexpr char kMsg[] = "remora-bench-samehost: error: watchdog: a measurement stalled, giving up\n";
  const ssize_t ignored = write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
  (void)ignored;
  if (g_child > 0) kill(static_cast<pid_t>(g_child), SIGKILL);
  _exit(3);
}

// Called before every measurement: the process ends if this one is not over
// within the limit.
void arm_watchdog() { alarm(g_watchdog_s); }

// ---------------------------------------------------------------- results

struct Row {
  std::string engine;
  std::string op;  // "copy", "write" (bandwidth), "write_lat" (one at a time)
  std::size_t size = 0;
  unsigned qd = 1;
  std::string completion;  // "" where it means nothing
  std::vector<double> gbps, p50_us, p99_us, cpu_us_per_op;
  std::uint64_t ops = 0;          // over every repetition
  std::vector<double> steal_pct;  // per repetition where /proc/stat told it
};

class Output {
 public:
  explicit Output(const Config& c) : config_(c) {}

  void header() {
    if (config_.json) return;
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    std::printf("# %s  host %s  cpus %ld  libfabric %u.%u  reps %u  %.3g s per repetition  target span %zu\n",
                kProgram.data(), host, sysconf(_SC_NPROCESSORS_ONLN), FI_MAJOR(fi_version()), FI_MINOR(fi_version()),
                config_.reps, config_.duration_s, config_.span);
    std::printf("%-14s %-9s %8s %3s %-10s %9s %9s %9s %10s %7s\n", "engine", "op", "size", "qd", "completion", "GB/s",
                "p50 us", "p99 us", "CPU us/op", "steal %");
    std::fflush(stdout);
  }

  void row(const Row& r) {
    const bool lat = !r.p50_us.empty();
    const double gbps = median(r.gbps), cpu = median(r.cpu_us_per_op);
    const std::string steal = r.steal_pct.empty() ? std::string("null") : number(median(r.steal_pct));
    if (config_.json) {
      std::string line = "{\"engine\":\"" + remora::tools::json_escape(r.engine) + "\",\"op\":\"" + r.op +
                         "\",\"size\":" + std::to_string(r.size) + ",\"qd\":" + std::to_string(r.qd) +
                         ",\"completion\":" + (r.completion.empty() ? std::string("null") : "\"" + r.completion + "\"");
      line += ",\"gbps\":" + number(gbps) + ",\"gbps_min\":" + number(*std::min_element(r.gbps.begin(), r.gbps.end())) +
              ",\"gbps_max\":" + number(*std::max_element(r.gbps.begin(), r.gbps.end()));
      line += ",\"lat_p50_us\":" + (lat ? number(median(r.p50_us)) : "null");
      line += ",\"lat_p50_us_min\":" + (lat ? number(*std::min_element(r.p50_us.begin(), r.p50_us.end())) : "null");
      line += ",\"lat_p50_us_max\":" + (lat ? number(*std::max_element(r.p50_us.begin(), r.p50_us.end())) : "null");
      line += ",\"lat_p99_us\":" + (lat ? number(median(r.p99_us)) : "null");
      line += ",\"span\":" + std::to_string(config_.span > r.size ? config_.span : 0);
      line += ",\"cpu_us_per_op\":" + number(cpu) + ",\"steal_pct\":" + steal + ",\"ops\":" + std::to_string(r.ops) +
              ",\"reps\":" + std::to_string(r.gbps.size()) + "}";
      std::printf("%s\n", line.c_str());
    } else {
      std::printf("%-14s %-9s %8zu %3u %-10s %9.3f %9s %9s %10.3f %7s\n", r.engine.c_str(), r.op.c_str(), r.size, r.qd,
                  r.completion.empty() ? "-" : r.completion.c_str(), gbps, lat ? fixed(median(r.p50_us)).c_str() : "-",
                  lat ? fixed(median(r.p99_us)).c_str() : "-", cpu,
                  r.steal_pct.empty() ? "-" : fixed(median(r.steal_pct), 1).c_str());
    }
    std::fflush(stdout);
  }

  // An engine that could not run here: a JSON object or a note, never a failure.
  void skipped(std::string_view engine, const std::string& why) {
    if (config_.json)
      std::printf("{\"engine\":\"%s\",\"skipped\":\"%s\"}\n", engine.data(), remora::tools::json_escape(why).c_str());
    else
      std::printf("# %s skipped: %s\n", engine.data(), why.c_str());
    std::fflush(stdout);
  }

  void note(const std::string& text) {
    if (config_.json)
      std::printf("{\"note\":\"%s\"}\n", remora::tools::json_escape(text).c_str());
    else
      std::printf("# %s\n", text.c_str());
    std::fflush(stdout);
  }

 private:
  const Config& config_;
};

// ---------------------------------------------------------------- helpers

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Page-aligned, touched memory (so no measurement pays first-touch faults).
struct Buffer {
  explicit Buffer(std::size_t size, int fill) : size_((size + 4095) / 4096 * 4096) {
    data_ = static_cast<std::byte*>(std::aligned_alloc(4096, size_));
    if (data_ == nullptr) throw Error("cannot allocate " + std::to_string(size) + " bytes");
    std::memset(data_, fill, size_);
  }
  ~Buffer() { std::free(data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  std::byte* data() const { return data_; }

 private:
  std::size_t size_;
  std::byte* data_;
};

// The byte written in the measurements of one size: a different one per
// size, so that the child's check sees this size's data, not an earlier one's.
int fill_byte(std::size_t size) { return static_cast<int>(0x40 + (size * 7 + size / 4096) % 0x3f); }

// Runs `op(n)` (which performs n operations) in chunks of `chunk` until
// `duration` has passed.
template <class F>
Batch timed(double duration, std::uint64_t chunk, F&& op) {
  Batch b;
  arm_watchdog();
  const auto host0 = host_ticks();
  const double cpu0 = cpu_seconds();
  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::duration<double>(duration);
  Clock::time_point now;
  do {
    op(chunk);
    b.ops += chunk;
    now = Clock::now();
  } while (now < end);
  b.seconds = std::chrono::duration<double>(now - t0).count();
  b.cpu = cpu_seconds() - cpu0;
  b.steal_pct = steal_percent(host0, host_ticks());
  return b;
}

/// Latency rows: `one()` does one operation and waits for it; each is timed
/// on its own, after a warm-up of a quarter of the duration, and every
/// repetition adds its p50 and p99 to `r`.
template <typename F>
void measure_latency(Row& r, double duration, unsigned reps, F&& one) {
  std::vector<double> samples;
  auto timed_ones = [&](std::uint64_t n) {
    for (std::uint64_t i = 0; i < n; ++i) {
      const auto t0 = Clock::now();
      one();
      samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
  };
  timed(duration / 4, 64, timed_ones);
  for (unsigned rep = 0; rep < reps; ++rep) {
    samples.clear();
    add_batch(r, timed(duration, 64, timed_ones));
    r.p50_us.push_back(percentile(samples, 0.50));
    r.p99_us.push_back(percentile(samples, 0.99));
  }
}

// ---------------------------------------------------------------- child protocol
//
// Parent and child talk over a socketpair in messages of a 4-byte length and
// that many bytes. The child first sends "ok" + its details or "error: ...".
// Then the parent sends "check SIZE BYTE" (the child answers "ok" when its
// first SIZE bytes all hold BYTE, else "bad") or closes its end (the child
// exits).

void send_msg(int fd, std::string_view m) {
  const auto len = static_cast<std::uint32_t>(m.size());
  std::string wire(reinterpret_cast<const char*>(&len), sizeof len);
  wire += m;
  std::size_t done = 0;
  while (done < wire.size()) {
    const ssize_t n = send(fd, wire.data() + done, wire.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(errno_text("send to the peer process"));
    done += static_cast<std::size_t>(n);
  }
}

// One message, or nullopt when the peer closed. Throws after `limit`.
std::optional<std::string> recv_msg(int fd, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  auto read_exact = [&](char* p, std::size_t n, bool eof_ok) -> bool {
    std::size_t done = 0;
    while (done < n) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) throw Error("the peer process did not answer within " + std::to_string(limit.count()) + " ms");
      pollfd pfd{fd, POLLIN, 0};
      const int pr = poll(&pfd, 1, static_cast<int>(std::min<long long>(left, 1000)));
      if (pr < 0 && errno != EINTR) throw Error(errno_text("poll"));
      if (pr <= 0) continue;
      const ssize_t r = recv(fd, p + done, n - done, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throw Error(errno_text("recv from the peer process"));
      if (r == 0) {
        if (eof_ok && done == 0) return false;
        throw Error("the peer process closed the connection mid-message");
      }
      done += static_cast<std::size_t>(r);
    }
    return true;
  };
  std::uint32_t len = 0;
  if (!read_exact(reinterpret_cast<char*>(&len), sizeof len, true)) return std::nullopt;
  if (len > (1u << 20)) throw Error("oversized message from the peer process");
  std::string m(len, '\0');
  read_exact(m.data(), len, false);
  return m;
}

// Ready to read (a message or the peer's close) without blocking.
bool readable(int fd) {
  pollfd pfd{fd, POLLIN, 0};
  return poll(&pfd, 1, 0) > 0;
}

// The child's command loop: answers "check" until the parent closes its end.
// `progress` is called between looks at the socket (libfabric-shm: drive the
// endpoint); without one the child sleeps in poll.
void child_serve(int fd, const std::byte* buffer, const std::function<void()>& progress) {
  while (true) {
    if (progress) {
      for (int i = 0; i < 1024; ++i) progress();
      if (!readable(fd)) continue;
    }
    // The parent can be busy measuring for a long time between two commands.
    const auto m = recv_msg(fd, std::chrono::hours(24));
    if (!m) return;
    std::size_t size = 0;
    int byte = 0;
    if (std::sscanf(m->c_str(), "check %zu %d", &size, &byte) == 2) {
      bool ok = true;
      for (std::size_t i = 0; i < size && ok; ++i) ok = buffer[i] == static_cast<std::byte>(byte);
      send_msg(fd, ok ? "ok" : "bad");
    } else {
      send_msg(fd, "error: unknown command");
    }
  }
}

// A forked child, killed and reaped on destruction if still there.
class Child {
 public:
  // Forks; the child runs `body(fd)` and exits with its status.
  explicit Child(const std::function<int(int)>& body) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) throw Error(errno_text("socketpair"));
    const pid_t parent = getpid();
    std::fflush(stdout);
    std::fflush(stderr);
    pid_ = fork();
    if (pid_ < 0) {
      close(sv[0]);
      close(sv[1]);
      throw Error(errno_text("fork"));
    }
    if (pid_ == 0) {
      close(sv[0]);
      // Never outlive the parent.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      alarm(0);
      int rc = 1;
      try {
        rc = body(sv[1]);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s (child): error: %s\n", kProgram.data(), e.what());
      }
      std::fflush(stderr);
      _exit(rc);
    }
    close(sv[1]);
    fd_ = sv[0];
    g_child = pid_;
  }
  ~Child() { finish(); }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  int fd() const { return fd_; }
  pid_t pid() const { return pid_; }

  // Closes the socket (the child's signal to leave) and reaps the child:
  // its exit status, or -1 if it had to be killed after 5 s.
  int finish() {
    if (fd_ >= 0) {
      close(fd_);
      fd_ = -1;
    }
    if (pid_ <= 0) return status_;
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    int st = 0;
    while (true) {
      const pid_t w = waitpid(pid_, &st, WNOHANG);
      if (w == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        break;
      }
      if (w < 0 && errno != EINTR) break;
      if (Clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &st, 0);
        status_ = -1;
        break;
      }
      usleep(1000);
    }
    pid_ = 0;
    g_child = 0;
    return status_;
  }

  // Asks the child whether its first `size` bytes hold `byte`.
  void check(std::size_t size, int byte) {
    send_msg(fd_, "check " + std::to_string(size) + " " + std::to_string(byte));
    const auto a = recv_msg(fd_, kWaitLimit);
    if (!a || *a != "ok")
      throw Error("the child's buffer does not hold the " + std::to_string(size) + " bytes written (" +
                  (a ? *a : std::string("closed")) + ")");
  }

 private:
  pid_t pid_ = 0;
  int fd_ = -1;
  int status_ = 0;
};

// ---------------------------------------------------------------- memcpy

void run_memcpy(const Config& cfg, Output& out) {
  for (const std::size_t size : cfg.sizes) {
    Buffer src(size, fill_byte(size)), dst(target_length(cfg, size), 0);
    Row r{"memcpy", "copy", size, 1, "", {}, {}, {}, {}, 0};
    // About 1 MiB of copies between two looks at the clock.
    const std::uint64_t chunk = std::max<std::uint64_t>(1, (std::size_t{1} << 20) / size);
    std::uint64_t next = 0;
    auto copy = [&](std::uint64_t n) {
      for (std::uint64_t i = 0; i < n; ++i) {
        std::memcpy(dst.data() + walk_at(cfg, next++, size), src.data(), size);
        // The copy must happen every time: the compiler may not assume
        // the destination unread.
        asm volatile("" : : "r"(dst.data()) : "memory");
      }
    };
    timed(cfg.duration_s / 4, chunk, copy);  // warm-up
    for (unsigned rep = 0; rep < cfg.reps; ++rep) add_batch(r, timed(cfg.duration_s, chunk, copy));
    if (std::memcmp(dst.data(), src.data(), size) != 0) throw Error("memcpy: the destination differs");
    out.row(r);
  }
}

// ---------------------------------------------------------------- cma

// The address of the child's buffer, from its first message ("ok ADDR").
std::uintptr_t child_buffer(Child& child, std::string_view engine) {
  const auto hello = recv_msg(child.fd(), kWaitLimit);
  std::uintptr_t remote = 0;
  if (!hello || std::sscanf(hello->c_str(), "ok %" SCNuPTR, &remote) != 1)
    throw Error(std::string(engine) + ": the child did not send its buffer's address");
  return remote;
}

void run_cma(const Config& cfg, Output& out) {
  const std::size_t max_size = std::max(*std::max_element(cfg.sizes.begin(), cfg.sizes.end()), kLatencySize);
  const std::size_t target_len = target_length(cfg, max_size);
  Child child([target_len](int fd) {
    Buffer target(target_len, 0);
    send_msg(fd, "ok " + std::to_string(reinterpret_cast<std::uintptr_t>(target.data())));
    child_serve(fd, target.data(), nullptr);
    return 0;
  });
  const pid_t pid = child.pid();
  const std::uintptr_t remote = child_buffer(child, "cma");

  Buffer src(max_size, 0);
  auto write_once = [&](std::size_t size, std::size_t at = 0) {
    iovec local{src.data(), size};
    iovec far{reinterpret_cast<void*>(remote + at), size};
    const ssize_t n = process_vm_writev(pid, &local, 1, &far, 1, 0);
    if (n == static_cast<ssize_t>(size)) return 0;
    return n < 0 ? errno : EIO;
  };
  if (const int e = write_once(kLatencySize); e != 0) {
    // Refused here (ptrace rules, seccomp, no such call): a fact to report.
    out.skipped("cma", std::string("process_vm_writev refused: ") + std::strerror(e) +
                           (e == EPERM ? " (ptrace scope: see /proc/sys/kernel/yama/ptrace_scope)" : ""));
    return;
  }
  std::uint64_t next = 0;
  auto writes = [&](std::size_t size) {
    next = 0;
    return [&, size](std::uint64_t n) {
      for (std::uint64_t i = 0; i < n; ++i)
        if (const int e = write_once(size, walk_at(cfg, next++, size)); e != 0)
          throw Error(std::string("process_vm_writev: ") + std::strerror(e));
    };
  };
  for (const std::size_t size : cfg.sizes) {
    std::memset(src.data(), fill_byte(size), size);
    Row r{"cma", "write", size, 1, "", {}, {}, {}, {}, 0};
    const std::uint64_t chunk = std::max<std::uint64_t>(1, (std::size_t{256} << 10) / size);
    timed(cfg.duration_s / 4, chunk, writes(size));
    for (unsigned rep = 0; rep < cfg.reps; ++rep) add_batch(r, timed(cfg.duration_s, chunk, writes(size)));
    child.check(walked_bytes(cfg, next, size), fill_byte(size));  // the last repetition's writes
    out.row(r);
  }
  // Latency: every 8-byte write timed on its own.
  {
    std::memset(src.data(), fill_byte(kLatencySize), kLatencySize);
    Row r{"cma", "write_lat", kLatencySize, 1, "", {}, {}, {}, {}, 0};
    measure_latency(r, cfg.duration_s, cfg.reps, [&] {
      if (const int e = write_once(kLatencySize); e != 0)
        throw Error(std::string("process_vm_writev: ") + std::strerror(e));
    });
    child.check(kLatencySize, fill_byte(kLatencySize));
    out.row(r);
  }
  if (const int st = child.finish(); st != 0) throw Error("cma: the child exited with status " + std::to_string(st));
}

// ---------------------------------------------------------------- cma-pair
//
// The most two processes get from cross-memory attach for writes of one
// size at queue depth 16: the writes go in batches of 16, and each batch is
// cut at the page boundary nearest the middle of every write. This process
// moves the lower parts with one process_vm_writev call while the child
// moves the upper parts from this process's source with one
// process_vm_readv call, each pinning the other's pages; both spin on a
// shared page between batches. It is the same-host direct path's split
// (docs/design.md, "The peer moves half") without anything else the path
// does: no checks, no completions, no last bytes placed after the rest.

// The batch handed to the child, in memory both processes map.
struct PairJob {
  std::atomic<std::uint64_t> posted{0};  // batches posted (the job below is for this one)
  std::atomic<std::uint64_t> done{0};    // batches the child finished
  std::atomic<std::int64_t> err{0};      // the child's errno when its call came up short
  std::size_t size = 0, cut = 0;
  std::size_t at[kQueueDepth] = {};  // the writes' offsets in the child's target
};

void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

void run_cma_pair(const Config& cfg, Output& out) {
  std::vector<std::size_t> sizes;
  for (const std::size_t size : cfg.sizes)
    if (size >= 2 * 4096) sizes.push_back(size);  // a cut needs two pages
  if (sizes.empty()) return;
  const std::size_t max_size = *std::max_element(sizes.begin(), sizes.end());
  void* shared = mmap(nullptr, sizeof(PairJob), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) throw Error(errno_text("mmap the shared job"));
  struct Unmap {
    void* p;
    ~Unmap() { munmap(p, sizeof(PairJob)); }
  } unmap{shared};
  auto* job = new (shared) PairJob;
  // The source, allocated before the fork: the child knows its address.
  Buffer src(max_size, 0);
  const pid_t parent = getpid();
  const std::size_t target_len = target_length(cfg, max_size);
  Child child([&](int fd) {
    Buffer target(target_len, 0);
    send_msg(fd, "ok " + std::to_string(reinterpret_cast<std::uintptr_t>(target.data())));
    std::uint64_t seen = 0;
    child_serve(fd, target.data(), [&] {
      const std::uint64_t n = job->posted.load(std::memory_order_acquire);
      if (n == seen) {
        relax();
        return;
      }
      seen = n;
      iovec mine[kQueueDepth], theirs[kQueueDepth];
      const std::size_t part = job->size - job->cut;
      for (unsigned k = 0; k < kQueueDepth; ++k) {
        mine[k] = iovec{target.data() + job->at[k] + job->cut, part};
        theirs[k] = iovec{src.data() + job->cut, part};
      }
      const ssize_t moved = process_vm_readv(parent, mine, kQueueDepth, theirs, kQueueDepth, 0);
      job->err.store(moved == static_cast<ssize_t>(part * kQueueDepth) ? 0 : (moved < 0 ? errno : EIO),
                     std::memory_order_relaxed);
      job->done.store(n, std::memory_order_release);
    });
    return 0;
  });
  const pid_t pid = child.pid();
  const std::uintptr_t remote = child_buffer(child, "cma-pair");
  {
    iovec local{src.data(), kLatencySize}, far{reinterpret_cast<void*>(remote), kLatencySize};
    if (process_vm_writev(pid, &local, 1, &far, 1, 0) != static_cast<ssize_t>(kLatencySize)) {
      const int e = errno;
      out.skipped("cma-pair", std::string("process_vm_writev refused: ") + std::strerror(e));
      return;
    }
  }
  std::uint64_t batches = 0, next = 0;
  auto batch = [&](std::size_t size) {
    const std::size_t cut = size / 2 / 4096 * 4096;
    iovec local[kQueueDepth], far[kQueueDepth];
    job->size = size;
    job->cut = cut;
    for (unsigned k = 0; k < kQueueDepth; ++k) {
      job->at[k] = walk_at(cfg, next++, size);
      local[k] = iovec{src.data(), cut};
      far[k] = iovec{reinterpret_cast<void*>(remote + job->at[k]), cut};
    }
    job->posted.store(++batches, std::memory_order_release);
    const ssize_t moved = process_vm_writev(pid, local, kQueueDepth, far, kQueueDepth, 0);
    if (moved != static_cast<ssize_t>(cut * kQueueDepth))
      throw Error(std::string("cma-pair: process_vm_writev: ") + (moved < 0 ? std::strerror(errno) : "short"));
    const auto deadline = Clock::now() + kWaitLimit;
    for (unsigned spins = 0; job->done.load(std::memory_order_acquire) != batches; ++spins) {
      relax();
      if (spins % 4096 == 4095 && Clock::now() > deadline) throw Error("cma-pair: the child's part did not end");
    }
    return static_cast<int>(job->err.load(std::memory_order_relaxed));
  };
  if (const int e = batch(sizes.front()); e != 0) {
    // The child may not read this process (ptrace scope 1 lets a process
    // attach to its descendants only).
    out.skipped("cma-pair", std::string("the child's process_vm_readv refused: ") + std::strerror(e) +
                                (e == EPERM ? " (ptrace scope: see /proc/sys/kernel/yama/ptrace_scope)" : ""));
    return;
  }
  for (const std::size_t size : sizes) {
    std::memset(src.data(), fill_byte(size), size);
    next = 0;
    Row r{"cma-pair", "write", size, kQueueDepth, "", {}, {}, {}, {}, 0};
    auto run = [&](std::uint64_t n) {
      for (std::uint64_t i = 0; i < n; i += kQueueDepth)
        if (const int e = batch(size); e != 0)
          throw Error(std::string("cma-pair: the child's process_vm_readv: ") + std::strerror(e));
    };
    const std::uint64_t chunk = std::max<std::uint64_t>(kQueueDepth, (std::size_t{1} << 20) / size);
    timed(cfg.duration_s / 4, chunk, run);
    for (unsigned rep = 0; rep < cfg.reps; ++rep) add_batch(r, timed(cfg.duration_s, chunk, run));
    child.check(walked_bytes(cfg, next, size), fill_byte(size));
    out.row(r);
  }
  if (const int st = child.finish(); st != 0)
    throw Error("cma-pair: the child exited with status " + std::to_string(st));
}

// ---------------------------------------------------------------- libfabric shm

void check_fi(long rc, const char* what) {
  if (rc >= 0) return;
  throw Error(std::string(what) + ": " + fi_strerror(static_cast<int>(-rc)) + " (" + std::to_string(rc) + ")");
}

// One FI_EP_RDM endpoint of the shm provider with its CQ, AV and one
// registered buffer. Closed in reverse order of opening.
class ShmEndpoint {
 public:
  // Null (and `why`) when the provider is not there.
  static std::unique_ptr<ShmEndpoint> open(std::string* why) {
    fi_info* hints = fi_allocinfo();
    if (hints == nullptr) throw Error("fi_allocinfo failed");
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_RMA;
    hints->mode = FI_CONTEXT;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->fabric_attr->prov_name = strdup("shm");  // freed by fi_freeinfo
    fi_info* info = nullptr;
    const int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info);
    fi_freeinfo(hints);
    if (rc != 0 || info == nullptr) {
      *why = std::string("no shm provider with FI_EP_RDM and FI_RMA (fi_getinfo: ") + fi_strerror(-rc) + ")";
      return nullptr;
    }
    return std::unique_ptr<ShmEndpoint>(new ShmEndpoint(info));
  }

  ~ShmEndpoint() { close_all(); }
  ShmEndpoint(const ShmEndpoint&) = delete;
  ShmEndpoint& operator=(const ShmEndpoint&) = delete;

  void close_all() {
    if (mr_ != nullptr) fi_close(&mr_->fid);
    if (ep_ != nullptr) fi_close(&ep_->fid);
    if (av_ != nullptr) fi_close(&av_->fid);
    if (cq_ != nullptr) fi_close(&cq_->fid);
    if (domain_ != nullptr) fi_close(&domain_->fid);
    if (fabric_ != nullptr) fi_close(&fabric_->fid);
    fi_freeinfo(info_);
    mr_ = nullptr;
    ep_ = nullptr;
    av_ = nullptr;
    cq_ = nullptr;
    domain_ = nullptr;
    fabric_ = nullptr;
    info_ = nullptr;
  }

  void register_buffer(std::byte* p, std::size_t size, std::uint64_t access) {
    check_fi(fi_mr_reg(domain_, p, size, access, 0, /*requested_key=*/0x5a11, 0, &mr_, nullptr), "fi_mr_reg");
    buffer_ = p;
  }
  std::string name() const {
    std::array<char, 256> buf{};
    std::size_t len = buf.size();
    check_fi(fi_getname(&ep_->fid, buf.data(), &len), "fi_getname");
    return std::string(buf.data(), len);
  }
  // What an initiator needs: the target address to use for offset 0 of the
  // registered buffer and its key.
  std::uint64_t remote_base() const {
    return (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<std::uintptr_t>(buffer_) : 0;
  }
  std::uint64_t key() const { return fi_mr_key(mr_); }
  void* desc() const { return fi_mr_desc(mr_); }
  fi_addr_t insert(const std::string& peer) {
    fi_addr_t a = FI_ADDR_UNSPEC;
    const int n = fi_av_insert(av_, peer.data(), 1, &a, 0, nullptr);
    if (n != 1) throw Error("fi_av_insert: " + std::to_string(n));
    return a;
  }
  fid_ep* ep() const { return ep_; }
  fid_cq* cq() const { return cq_; }

  // Reads up to 16 completions; returns how many; throws on an error entry.
  std::size_t poll() {
    fi_cq_entry entries[16];
    const ssize_t n = fi_cq_read(cq_, entries, 16);
    if (n > 0) return static_cast<std::size_t>(n);
    if (n == -FI_EAGAIN) return 0;
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(cq_, &err, 0);
      throw Error(std::string("shm completion error: ") + fi_strerror(err.err) + " (" + std::to_string(err.err) + ")");
    }
    check_fi(n, "fi_cq_read");
    return 0;
  }

 private:
  explicit ShmEndpoint(fi_info* info) : info_(info) {
    try {
      set_up();
    } catch (...) {
      close_all();
      throw;
    }
  }
  void set_up() {
    check_fi(fi_fabric(info_->fabric_attr, &fabric_, nullptr), "fi_fabric");
    check_fi(fi_domain(fabric_, info_, &domain_, nullptr), "fi_domain");
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_CONTEXT;
    cq_attr.wait_obj = FI_WAIT_NONE;  // fi_cq_sread on shm spins forever: poll only
    cq_attr.size = 256;
    check_fi(fi_cq_open(domain_, &cq_attr, &cq_, nullptr), "fi_cq_open");
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_MAP;
    check_fi(fi_av_open(domain_, &av_attr, &av_, nullptr), "fi_av_open");
    check_fi(fi_endpoint(domain_, info_, &ep_, nullptr), "fi_endpoint");
    check_fi(fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)");
    check_fi(fi_ep_bind(ep_, &av_->fid, 0), "fi_ep_bind(av)");
    check_fi(fi_enable(ep_), "fi_enable");
  }

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_av* av_ = nullptr;
  fid_ep* ep_ = nullptr;
  fid_mr* mr_ = nullptr;
  std::byte* buffer_ = nullptr;
};

std::string to_hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (const char c : bytes) {
    s += kDigits[(static_cast<unsigned char>(c) >> 4) & 0xf];
    s += kDigits[static_cast<unsigned char>(c) & 0xf];
  }
  return s;
}
std::string from_hex(std::string_view hex) {
  std::string s;
  auto val = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) s += static_cast<char>(val(hex[i]) << 4 | val(hex[i + 1]));
  return s;
}

// The initiator's side of the measurements.
class ShmWriter {
 public:
  ShmWriter(ShmEndpoint& ep, fi_addr_t peer, std::uint64_t base, std::uint64_t key, std::byte* src)
      : ep_(ep), peer_(peer), base_(base), key_(key), src_(src) {}

  // The next stream() starts at the target's offset 0.
  void restart_walk() { walked_ = 0; }
  // Writes stream() posted since restart_walk().
  std::uint64_t walked() const { return walked_; }

  // Posts one write to offset `at` of the target; false when the provider
  // says to retry later.
  bool post(std::size_t size, bool delivery, fi_context* ctx, std::size_t at = 0) {
    ssize_t rc;
    if (delivery) {
      iovec iov{src_, size};
      void* desc = ep_.desc();
      fi_rma_iov rma{base_ + at, size, key_};
      fi_msg_rma msg{};
      msg.msg_iov = &iov;
      msg.desc = &desc;
      msg.iov_count = 1;
      msg.addr = peer_;
      msg.rma_iov = &rma;
      msg.rma_iov_count = 1;
      msg.context = ctx;
      rc = fi_writemsg(ep_.ep(), &msg, FI_DELIVERY_COMPLETE | FI_COMPLETION);
    } else {
      rc = fi_write(ep_.ep(), src_, size, ep_.desc(), peer_, base_ + at, key_, ctx);
    }
    if (rc == -FI_EAGAIN) return false;
    check_fi(rc, delivery ? "fi_writemsg(FI_DELIVERY_COMPLETE)" : "fi_write");
    return true;
  }

  // Whether the provider takes FI_DELIVERY_COMPLETE: one write with it,
  // waited for. Returns the reason when it does not.
  std::optional<std::string> try_delivery() {
    fi_context ctx{};
    try {
      while (!post(kLatencySize, true, &ctx)) ep_.poll();
      complete(1);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::nullopt;
  }

  // Waits for `n` completions (bounded by kWaitLimit without any).
  void complete(std::size_t n) {
    auto deadline = Clock::now() + kWaitLimit;
    while (n > 0) {
      const std::size_t got = ep_.poll();
      if (got > 0) {
        n -= std::min(n, got);
        deadline = Clock::now() + kWaitLimit;
      } else if (Clock::now() > deadline) {
        throw Error("shm: no completion within " + std::to_string(kWaitLimit.count()) + " s");
      }
    }
  }

  // `n` writes of `size` bytes keeping `qd` posted, walking the target
  // (walk_at) when `cfg` gives it a span: each at the offset after the last
  // one's, of this call or the calls before it since restart_walk() (each
  // call is one chunk of a timed run: starting every call at offset 0 would
  // walk only its first n writes' bytes, which the caches hold).
  void stream(const Config& cfg, std::uint64_t n, std::size_t size, bool delivery, unsigned qd) {
    std::uint64_t posted = 0, done = 0;
    auto deadline = Clock::now() + kWaitLimit;
    while (done < n) {
      while (posted < n && posted - done < qd &&
             post(size, delivery, &ctx_[posted % kQueueDepth], walk_at(cfg, walked_, size))) {
        ++posted;
        ++walked_;
      }
      const std::size_t got = ep_.poll();
      if (got > 0) {
        done += got;
        deadline = Clock::now() + kWaitLimit;
      } else if (Clock::now() > deadline) {
        throw Error("shm: no completion within " + std::to_string(kWaitLimit.count()) + " s");
      }
    }
  }

 private:
  ShmEndpoint& ep_;
  fi_addr_t peer_;
  std::uint64_t base_, key_;
  std::byte* src_;
  fi_context ctx_[kQueueDepth]{};
  std::uint64_t walked_ = 0;  // writes stream() posted since restart_walk()
};

void run_shm(const Config& cfg, Output& out) {
  const std::size_t max_size = std::max(*std::max_element(cfg.sizes.begin(), cfg.sizes.end()), kLatencySize);
  // The child opens libfabric after the fork; so does the parent (no
  // libfabric state is shared across fork).
  const std::size_t target_len = target_length(cfg, max_size);
  Child child([target_len](int fd) {
    Buffer target(target_len, 0);
    std::string why;
    auto ep = ShmEndpoint::open(&why);
    if (!ep) {
      send_msg(fd, "absent " + why);
      return 0;
    }
    ep->register_buffer(target.data(), target_len, FI_REMOTE_WRITE);
    send_msg(fd,
             "ok " + std::to_string(ep->remote_base()) + " " + std::to_string(ep->key()) + " " + to_hex(ep->name()));
    const auto peer = recv_msg(fd, kWaitLimit);
    if (!peer) return 0;
    ep->insert(from_hex(*peer));
    // The target must make progress calls: spin on its CQ (shm's
    // fi_cq_sread would spin too, and ignore its timeout).
    child_serve(fd, target.data(), [&ep] { ep->poll(); });
    return 0;
  });
  const auto hello = recv_msg(child.fd(), kWaitLimit);
  if (!hello) throw Error("libfabric-shm: the child left without a word");
  if (hello->starts_with("absent ")) {
    out.skipped("libfabric-shm", hello->substr(7));
    return;
  }
  std::uint64_t base = 0, key = 0;
  char name_hex[1024] = "";
  if (std::sscanf(hello->c_str(), "ok %" SCNu64 " %" SCNu64 " %1000s", &base, &key, name_hex) != 3)
    throw Error("libfabric-shm: the child sent '" + *hello + "'");

  std::string why;
  auto ep = ShmEndpoint::open(&why);
  if (!ep) {
    out.skipped("libfabric-shm", why);
    return;
  }
  Buffer src(max_size, 0);
  ep->register_buffer(src.data(), max_size, FI_WRITE);
  const fi_addr_t peer = ep->insert(from_hex(name_hex));
  send_msg(child.fd(), to_hex(ep->name()));

  ShmWriter writer(*ep, peer, base, key, src.data());
  arm_watchdog();
  const auto refused = writer.try_delivery();
  if (refused) out.note("libfabric-shm refuses FI_DELIVERY_COMPLETE (" + *refused + "): default completion only");
  std::vector<bool> modes;
  if (!refused) modes.push_back(true);
  modes.push_back(false);
  for (const bool delivery : modes) {
    for (const std::size_t size : cfg.sizes) {
      // Each mode its own byte, so that the check after it sees its writes.
      const int fill = fill_byte(size) ^ (delivery ? 0 : 0x80);
      std::memset(src.data(), fill, size);
      Row r{"libfabric-shm", "write", size, kQueueDepth, delivery ? "delivery" : "default", {}, {}, {}, {}, 0};
      const std::uint64_t chunk = std::max<std::uint64_t>(kQueueDepth, (std::size_t{1} << 20) / size);
      auto run = [&](std::uint64_t n) { writer.stream(cfg, n, size, delivery, kQueueDepth); };
      writer.restart_walk();
      timed(cfg.duration_s / 4, chunk, run);
      for (unsigned rep = 0; rep < cfg.reps; ++rep) add_batch(r, timed(cfg.duration_s, chunk, run));
      // A default completion says nothing of the target: check after one
      // delivery-complete write where there is one, else after a pause.
      if (!refused) {
        fi_context ctx{};
        while (!writer.post(size, true, &ctx)) ep->poll();
        writer.complete(1);
      } else {
        usleep(100000);
      }
      child.check(walked_bytes(cfg, writer.walked(), size), fill);
      out.row(r);
    }
  }
  // Latency: one 8-byte write at a time, posted and polled for.
  {
    const bool delivery = !refused;
    std::memset(src.data(), fill_byte(kLatencySize), kLatencySize);
    Row r{"libfabric-shm", "write_lat", kLatencySize, 1, delivery ? "delivery" : "default", {}, {}, {}, {}, 0};
    fi_context ctx{};
    measure_latency(r, cfg.duration_s, cfg.reps, [&] {
      while (!writer.post(kLatencySize, delivery, &ctx)) ep->poll();
      writer.complete(1);
    });
    if (!delivery) usleep(100000);
    child.check(kLatencySize, fill_byte(kLatencySize));
    out.row(r);
  }
  ep.reset();  // close the endpoint before the child goes
  if (const int st = child.finish(); st != 0)
    throw Error("libfabric-shm: the child exited with status " + std::to_string(st));
}

std::string usage() {
  return std::string("usage: ") + kProgram.data() +
         " [--size BYTES[,BYTES...]] [--reps N] [-D SECONDS] [--only ENGINE[,...]] [--target-span BYTES]\n"
         " [--json]\n\n"
         "Same-host baselines, one run: single-thread memcpy, process_vm_writev into a child process\n"
         "(cma), the same split over both processes (cma-pair) and libfabric's shm provider between two\n"
         "processes. Latency rows copy 8 bytes.\n"
         "The watchdog limit (seconds one measurement may take) is REMORA_BENCH_WATCHDOG_S, else\n"
         "REMORA_PERF_WATCHDOG_S, else 60.\n\noptions:\n" +
         remora::tools::options_help<Config>(kOptions);
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  try {
    remora::tools::parse_options<Config>(kOptions, argc, argv, cfg);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n%s", kProgram.data(), e.what(), usage().c_str());
    return 2;
  }
  if (cfg.help) {
    std::printf("%s", usage().c_str());
    return 0;
  }
  g_watchdog_s = static_cast<unsigned>(
      remora::tools::watchdog_limit({"REMORA_BENCH_WATCHDOG_S", "REMORA_PERF_WATCHDOG_S"}, std::chrono::seconds(60))
          .count());
  struct sigaction sa {};
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Output out(cfg);
  out.header();
  int rc = 0;
  struct Engine {
    std::string_view name;
    void (*run)(const Config&, Output&);
  };
  for (const Engine& e : {Engine{"memcpy", run_memcpy}, Engine{"cma", run_cma}, Engine{"cma-pair", run_cma_pair},
                          Engine{"libfabric-shm", run_shm}}) {
    if (!wanted(cfg, e.name)) continue;
    try {
      e.run(cfg, out);
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "%s: error: %s: %s\n", kProgram.data(), e.name.data(), ex.what());
      rc = 1;
    }
  }
  alarm(0);
  return rc;
}
