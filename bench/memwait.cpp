// remora-bench-memwait: a write ping-pong whose sides wait on memory.
//
//   remora-bench-memwait [--iters N] [--size BYTES] [--signal-every N]
//
// The program forks: the parent listens on 127.0.0.1, the child connects,
// and each registers a buffer of SIZE bytes that the other writes. Round i:
// the parent writes SIZE bytes into the child's buffer, the last byte
// holding the round's number, and reads its own buffer's last byte until
// the child's answer holds it; the child waits for the parent's write the
// same way, then writes its answer. Neither side polls its completion
// queue to wait: one write in N is signalled (--signal-every, default 16),
// and after that write's round its side polls until the completion came;
// the others are posted unsignalled. Round i writes from slot i % N of the
// side's source buffer (N slots of SIZE bytes): a slot is written again
// only after the signalled write that ends its cycle completed, as the
// library may read a source until its write completes. The way
// perftest's write latency test runs, and the way programs do that have
// the peer look at the bytes (a flag after the data) instead of sending it
// a message.
//
// Printed: the round trip per round (post of the parent's write to the
// child's answer seen) as median, 99th percentile, mean and maximum, and
// the CPU time of both processes per round, all over the measured rounds
// (1,000 rounds of warm-up come first). Both processes spin, so on a machine
// with fewer than two free CPUs the figures mostly measure the scheduler.
//
// The connection is made the usual way, so between processes of one host
// it takes the same-host path unless REMORA_SAMEHOST=0.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "remora/remora.hpp"

namespace {

using namespace remora;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char* what, const std::string& why) {
  std::fprintf(stderr, "remora-bench-memwait: %s: %s\n", what, why.c_str());
  std::exit(1);
}

template <typename T>
T must(Result<T> r, const char* what) {
  if (!r) die(what, r.error().message());
  return std::move(*r);
}

void must(Result<void> r, const char* what) {
  if (!r) die(what, r.error().message());
}

struct Settings {
  long iters = 20000;
  std::size_t size = 8;
  long signal_every = 16;
};

/// The value round `i` puts into the last byte (never 0, the buffers'
/// first content).
std::uint8_t mark(long i) { return static_cast<std::uint8_t>(i % 255 + 1); }

/// Reads `b` until it holds `v`; gives up after 10 s (a write that never
/// lands).
void wait_for(const std::uint8_t& b, std::uint8_t v, long round) {
  const auto until = Clock::now() + 10s;
  std::uint32_t spins = 0;
  while (std::atomic_ref<const std::uint8_t>(b).load(std::memory_order_acquire) != v) {
    if (++spins % 4096 == 0 && Clock::now() > until)
      die("wait", "round " + std::to_string(round) + ": no write in 10 s");
  }
}

/// The side's endpoint, its queue, the peer's buffer and its own source
/// slots.
struct Side {
  CompletionQueue& cq;
  Endpoint& ep;
  RemoteRegion peer;
  std::vector<std::uint8_t>& src;
  MemoryRegion& src_mr;
  long signalled = 0;

  void write(long i, const Settings& s) {
    // Round i's source is slot i % N: a slot is written again only after
    // the signalled write that ends its cycle completed (reap), which says
    // every write before it completed too; the library may read a source
    // until then.
    const std::size_t at = static_cast<std::size_t>(i % s.signal_every) * s.size;
    src[at + s.size - 1] = mark(i);
    const Segment seg(src_mr, at, s.size);
    const bool signal = (i + 1) % s.signal_every == 0;
    must(ep.write({&seg, 1}, peer, 0, static_cast<std::uint64_t>(i), signal ? PostFlags::none : PostFlags::unsignalled),
         "post a write");
    if (signal) ++signalled;
  }
  /// Polls until every signalled write completed.
  void reap() {
    const auto until = Clock::now() + 10s;
    Completion c[16];
    while (signalled > 0) {
      const std::size_t n = cq.poll(c);
      for (std::size_t k = 0; k < n; ++k)
        if (c[k].status) die("completion", c[k].status.message());
      signalled -= static_cast<long>(n);
      if (n == 0 && Clock::now() > until) die("poll", "a signalled write did not complete in 10 s");
    }
  }
};

double cpu_seconds(int who) {
  rusage u{};
  getrusage(who, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

/// One side's run; returns its CPU time (s) over the measured rounds.
double run(bool parent, int port_pipe, const Settings& s, std::vector<double>* rtt) {
  Fabric fabric = must(Fabric::open({.address = "127.0.0.1"}), "open the fabric");
  ProtectionZone zone = must(fabric.create_zone(), "create a zone");
  CompletionQueue cq = must(zone.create_cq(), "create a completion queue");
  std::vector<std::uint8_t> src(s.size * static_cast<std::size_t>(s.signal_every), 0), dst(s.size, 0);
  MemoryRegion src_mr = must(zone.register_memory(src.data(), src.size(), Access::local_read), "register the source");
  MemoryRegion dst_mr = must(zone.register_memory(dst.data(), dst.size(), Access::remote_write), "register the target");
  const std::vector<std::uint8_t> mine = must(dst_mr.remote(), "describe the target").serialize();
  EndpointOptions eo;
  eo.send_cq = &cq;
  Endpoint ep = must(zone.create_endpoint(eo), "create an endpoint");
  RemoteRegion peer;
  if (parent) {
    Listener lis = must(zone.listen("127.0.0.1", 0), "listen");
    const std::uint16_t port = lis.port();
    if (::write(port_pipe, &port, sizeof port) != static_cast<ssize_t>(sizeof port)) die("pipe", "write");
    ConnectionRequest req = must(lis.next_request(10s), "wait for the child");
    peer = must(RemoteRegion::parse(req.private_data()), "parse the child's descriptor");
    must(req.accept(ep, mine), "accept");
    const ConnectionEvent ev = must(ep.next_event(10s), "wait for the connection");
    if (ev.type != ConnectionEventType::established) die("connect", to_string(ev.type));
  } else {
    std::uint16_t port = 0;
    if (::read(port_pipe, &port, sizeof port) != static_cast<ssize_t>(sizeof port)) die("pipe", "read");
    const std::vector<std::uint8_t> theirs = must(ep.connect_and_wait("127.0.0.1", port, mine, 10s), "connect");
    peer = must(RemoteRegion::parse(theirs), "parse the parent's descriptor");
  }
  Side side{cq, ep, peer, src, src_mr};
  const std::uint8_t& last = dst[s.size - 1];
  // 1,000 rounds of warm-up (the same-host path set up, pages touched),
  // then the measured ones.
  const long warm = 1000;
  double cpu0 = 0;
  for (long i = 0; i < warm + s.iters; ++i) {
    if (i == warm) cpu0 = cpu_seconds(RUSAGE_SELF);
    if (parent) {
      const auto t0 = Clock::now();
      side.write(i, s);
      wait_for(last, mark(i), i);
      if (i >= warm) rtt->push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    } else {
      wait_for(last, mark(i), i);
      side.write(i, s);
    }
    if ((i + 1) % s.signal_every == 0) side.reap();
  }
  side.reap();
  const double cpu = cpu_seconds(RUSAGE_SELF) - cpu0;
  // The parent's last write was answered: both are done with the buffers.
  (void)ep.disconnect();
  return cpu;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--iters" && v) {
      s.iters = std::atol(v), ++i;
    } else if (a == "--size" && v) {
      s.size = static_cast<std::size_t>(std::atol(v)), ++i;
    } else if (a == "--signal-every" && v) {
      s.signal_every = std::atol(v), ++i;
    } else {
      std::fprintf(stderr, "usage: remora-bench-memwait [--iters N] [--size BYTES] [--signal-every N]\n");
      return 2;
    }
  }
  if (s.iters < 1 || s.size < 1 || s.signal_every < 1) {
    std::fprintf(stderr, "remora-bench-memwait: --iters, --size and --signal-every must be at least 1\n");
    return 2;
  }
  // p: the listener's port to the child; q: the child's CPU time back.
  int p[2], q[2];
  if (pipe(p) != 0 || pipe(q) != 0) die("pipe", std::strerror(errno));
  const pid_t child = fork();
  if (child < 0) die("fork", std::strerror(errno));
  if (child == 0) {
    ::close(p[1]);
    ::close(q[0]);
    const double cpu = run(false, p[0], s, nullptr);
    std::exit(::write(q[1], &cpu, sizeof cpu) == static_cast<ssize_t>(sizeof cpu) ? 0 : 1);
  }
  ::close(p[0]);
  ::close(q[1]);
  std::vector<double> rtt;
  rtt.reserve(static_cast<std::size_t>(s.iters));
  double cpu = run(true, p[1], s, &rtt);
  double child_cpu = 0;
  if (::read(q[0], &child_cpu, sizeof child_cpu) != static_cast<ssize_t>(sizeof child_cpu)) die("child", "no CPU time");
  cpu += child_cpu;
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die("child", "it failed");
  std::vector<double> sorted = rtt;
  std::sort(sorted.begin(), sorted.end());
  double sum = 0;
  for (double x : rtt) sum += x;
  const auto at = [&](double q) {
    return sorted[static_cast<std::size_t>(q * static_cast<double>(sorted.size() - 1))];
  };
  std::printf(
      "size %zu  signal-every %ld  rounds %ld  rtt p50 %.2f us  p99 %.2f us  mean %.2f us  max %.1f us  "
      "CPU %.2f us/round (both processes)\n",
      s.size, s.signal_every, s.iters, at(0.5), at(0.99), sum / static_cast<double>(rtt.size()), sorted.back(),
      cpu * 1e6 / static_cast<double>(s.iters));
  return 0;
}
