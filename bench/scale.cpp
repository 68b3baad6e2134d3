// remora-bench-scale: many connections into one target zone.
//
//   remora-bench-scale [--connections 10,100,1000] [--batch 64] [--json]
//
// The program runs itself a second time as the target (--serve): one zone,
// one 4 KiB region with every privilege, one listener on 127.0.0.1, and a
// loop that accepts every request with default endpoint options and one
// completion queue for all of them. The initiator, also one zone with one
// completion queue, opens connections in batches (`--batch` connects in
// flight) until it holds each count of --connections, and after each step
// reports for both sides: the set-up time per connection of that step, the
// resident memory and the open file descriptors per connection (the change
// since before the first connection, divided by the connections held), and
// the time of a poll of the initiator's queue that finds nothing.
// At the end every connection does an 8-byte write and a VISIBILITY flush,
// and the time until all of them completed is reported.
//
// Both processes need about as many file descriptors as connections times
// the fds per connection: raise `ulimit -n` for large counts.
//
// The connections use the tcp provider: REMORA_SAMEHOST is set to 0 unless
// it is set already (REMORA_SAMEHOST=1 measures the same-host direct path).
#include <poll.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "remora/remora.hpp"

namespace {

using namespace remora;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char* what, const std::error_code& ec) {
  std::fprintf(stderr, "remora-bench-scale: %s: %s\n", what, ec.message().c_str());
  std::exit(1);
}

template <typename T>
T must(Result<T> r, const char* what) {
  if (!r) die(what, r.error());
  return std::move(*r);
}

void must(Result<void> r, const char* what) {
  if (!r) die(what, r.error());
}

long rss_kib() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

long open_fds() {
  long n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
  }
  return n - 1;  // the directory stream itself
}

void raise_fd_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

std::string to_hex(const std::vector<std::uint8_t>& v) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (auto b : v) {
    s += d[b >> 4];
    s += d[b & 15];
  }
  return s;
}

std::vector<std::uint8_t> from_hex(const std::string& s) {
  std::vector<std::uint8_t> v;
  for (std::size_t i = 0; i + 1 < s.size(); i += 2)
    v.push_back(static_cast<std::uint8_t>(std::stoul(s.substr(i, 2), nullptr, 16)));
  return v;
}

// ---------------------------------------------------------------- target

int serve() {
  raise_fd_limit();
  const long rss0 = rss_kib(), fds0 = open_fds();
  auto fabric = must(Fabric::open({}), "Fabric::open");
  auto zone = must(fabric.create_zone(), "create_zone");
  auto cq = must(zone.create_cq(), "create_cq");
  std::vector<std::uint8_t> mem(4096, 0);
  auto mr = must(zone.register_memory(mem.data(), mem.size(), Access::all), "register_memory");
  auto lis = must(zone.listen("127.0.0.1", 0), "listen");
  std::printf("READY port=%u region=%s\n", lis.port(), to_hex(must(mr.remote(), "remote").serialize()).c_str());
  std::fflush(stdout);
  std::vector<Endpoint> eps;
  std::string in;
  for (;;) {
    pollfd fds[2] = {{0, POLLIN, 0}, {lis.fd(), POLLIN, 0}};
    if (::poll(fds, 2, 100) < 0) continue;
    for (;;) {
      auto req = lis.next_request(0ms);
      if (!req) break;
      EndpointOptions eo;
      eo.send_cq = &cq;
      eps.push_back(must(zone.create_endpoint(eo), "create_endpoint"));
      must(req->accept(eps.back()), "accept");
    }
    Completion c[64];
    while (cq.poll(c) > 0) {
    }
    if (fds[0].revents & (POLLIN | POLLHUP)) {
      char buf[256];
      ssize_t r = ::read(0, buf, sizeof buf);
      if (r <= 0) return 0;
      in.append(buf, static_cast<std::size_t>(r));
      for (std::size_t nl; (nl = in.find('\n')) != std::string::npos; in.erase(0, nl + 1)) {
        if (in.compare(0, nl, "stats") == 0) {
          std::printf("STATS conns=%zu rss_kib=%ld fds=%ld\n", eps.size(), rss_kib() - rss0, open_fds() - fds0);
          std::fflush(stdout);
        } else if (in.compare(0, nl, "quit") == 0) {
          return 0;
        }
      }
    }
  }
}

// ------------------------------------------------------------- initiator

struct Target {
  pid_t pid = -1;
  FILE* out = nullptr;  // its stdout
  int in = -1;          // its stdin

  std::string line() {
    char buf[4096];
    if (!std::fgets(buf, sizeof buf, out)) {
      std::fprintf(stderr, "remora-bench-scale: the target stopped\n");
      std::exit(1);
    }
    return buf;
  }
  std::string ask(const char* cmd, bool answer = true) {
    std::string c = std::string(cmd) + "\n";
    if (::write(in, c.data(), c.size()) != static_cast<ssize_t>(c.size())) std::exit(1);
    return answer ? line() : std::string();
  }
};

Target start_target(const char* self) {
  int to[2], from[2];
  if (pipe(to) != 0 || pipe(from) != 0) std::exit(1);
  Target t;
  t.pid = fork();
  if (t.pid == 0) {
    dup2(to[0], 0);
    dup2(from[1], 1);
    close(to[1]);
    close(from[0]);
    execl(self, self, "--serve", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(to[0]);
  close(from[1]);
  t.in = to[1];
  t.out = fdopen(from[0], "r");
  return t;
}

long field(const std::string& s, const char* key) {
  auto p = s.find(std::string(key) + "=");
  return p == std::string::npos ? -1 : std::atol(s.c_str() + p + std::strlen(key) + 1);
}

std::string field_str(const std::string& s, const char* key) {
  auto p = s.find(std::string(key) + "=");
  if (p == std::string::npos) return {};
  p += std::strlen(key) + 1;
  return s.substr(p, s.find_first_of(" \n", p) - p);
}

int run(const std::vector<std::size_t>& steps, std::size_t batch, bool json) {
  raise_fd_limit();
  Target t = start_target("/proc/self/exe");
  const std::string ready = t.line();
  const auto port = static_cast<std::uint16_t>(field(ready, "port"));
  auto remote = RemoteRegion::parse(from_hex(field_str(ready, "region")));
  if (!remote) die("region descriptor", remote.error());

  const long rss0 = rss_kib(), fds0 = open_fds();
  auto fabric = must(Fabric::open({}), "Fabric::open");
  auto zone = must(fabric.create_zone(), "create_zone");
  auto cq = must(zone.create_cq(), "create_cq");
  std::vector<std::uint8_t> local(8, 0x5A);
  auto lmr =
      must(zone.register_memory(local.data(), local.size(), Access::local_read | Access::local_write), "register");
  std::vector<Endpoint> eps;
  if (!json)
    std::printf("%10s %14s %16s %16s %12s %12s %12s\n", "conns", "setup ms/conn", "init KiB/conn", "target KiB/conn",
                "init fds/c", "target fds/c", "poll us");
  for (std::size_t want : steps) {
    const std::size_t before = eps.size();
    const auto t0 = Clock::now();
    while (eps.size() < want) {
      const std::size_t first = eps.size(), n = std::min(batch, want - eps.size());
      for (std::size_t i = 0; i < n; ++i) {
        EndpointOptions eo;
        eo.send_cq = &cq;
        eps.push_back(must(zone.create_endpoint(eo), "create_endpoint"));
        must(eps.back().connect("127.0.0.1", port), "connect");
      }
      for (std::size_t i = first; i < eps.size(); ++i) {
        auto ev = must(eps[i].next_event(60s), "waiting for the connection");
        if (ev.type != ConnectionEventType::established) {
          std::fprintf(stderr, "remora-bench-scale: connection %zu: %s\n", i, to_string(ev.type));
          return 1;
        }
      }
    }
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    // A poll that finds nothing while every connection is idle: what a
    // program polling one queue for all its connections pays between
    // completions. Up to 20,000 polls or 200 ms.
    Completion none[1];
    std::size_t polls = 0;
    const auto p0 = Clock::now();
    while (polls < 20000 && Clock::now() - p0 < 200ms) {
      (void)cq.poll(none);
      ++polls;
    }
    const double poll_us =
        std::chrono::duration<double, std::micro>(Clock::now() - p0).count() / static_cast<double>(polls);
    const std::string st = t.ask("stats");
    const double n = static_cast<double>(eps.size());
    const double per = want > before ? ms / static_cast<double>(want - before) : 0;
    const double irss = static_cast<double>(rss_kib() - rss0) / n, trss = static_cast<double>(field(st, "rss_kib")) / n;
    const double ifd = static_cast<double>(open_fds() - fds0) / n, tfd = static_cast<double>(field(st, "fds")) / n;
    if (json)
      std::printf(
          "{\"conns\":%zu,\"setup_ms_per_conn\":%.3f,\"initiator_kib_per_conn\":%.1f,"
          "\"target_kib_per_conn\":%.1f,\"initiator_fds_per_conn\":%.2f,\"target_fds_per_conn\":%.2f,"
          "\"empty_poll_us\":%.3f}\n",
          eps.size(), per, irss, trss, ifd, tfd, poll_us);
    else
      std::printf("%10zu %14.3f %16.1f %16.1f %12.2f %12.2f %12.3f\n", eps.size(), per, irss, trss, ifd, tfd, poll_us);
    std::fflush(stdout);
  }
  // An 8-byte write and a VISIBILITY flush on every connection.
  Segment s(lmr, 0, 8);
  const auto t0 = Clock::now();
  for (std::size_t i = 0; i < eps.size(); ++i) {
    const std::uint64_t off = (i * 8) % remote->length();
    must(eps[i].write({&s, 1}, *remote, off, 2 * i), "write");
    must(eps[i].flush(*remote, off, 8, FlushType::visibility, 2 * i + 1), "flush");
  }
  std::size_t done = 0, failed = 0;
  Completion c[64];
  while (done < 2 * eps.size()) {
    auto r = cq.wait(c, 60s);
    if (!r || *r == 0) break;
    for (std::size_t i = 0; i < *r; ++i) failed += c[i].status ? 1 : 0;
    done += *r;
  }
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (json)
    std::printf("{\"conns\":%zu,\"write_flush_all_ms\":%.3f,\"completed\":%zu,\"failed\":%zu}\n", eps.size(), ms, done,
                failed);
  else
    std::printf("write + VISIBILITY flush on all %zu connections: %.1f ms, %zu of %zu completed, %zu failed\n",
                eps.size(), ms, done, 2 * eps.size(), failed);
  const bool ok = failed == 0 && done == 2 * eps.size();
  t.ask("quit", false);
  eps.clear();
  int status = 0;
  waitpid(t.pid, &status, 0);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  // Both processes are on this host: without this their connections would
  // take the same-host direct path. The benchmark measures the transport
  // (issue 9) unless REMORA_SAMEHOST is set already; the target inherits it.
  ::setenv("REMORA_SAMEHOST", "0", 0);
  std::vector<std::size_t> steps{10, 100, 1000};
  std::size_t batch = 64;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--serve") return serve();
    if (a == "--json") {
      json = true;
    } else if (a == "--connections" && i + 1 < argc) {
      steps.clear();
      std::string v = argv[++i];
      for (std::size_t p = 0; p < v.size();) {
        const std::size_t q = std::min(v.find(',', p), v.size());
        steps.push_back(std::stoul(v.substr(p, q - p)));
        p = q + 1;
      }
    } else if (a == "--batch" && i + 1 < argc) {
      batch = std::max<std::size_t>(1, std::stoul(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: remora-bench-scale [--connections N1,N2,...] [--batch B] [--json]\n");
      return a == "--help" ? 0 : 2;
    }
  }
  return run(steps, batch, json);
}
