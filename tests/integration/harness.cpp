// tests/integration/harness.cpp - see harness.hpp.
#include "harness.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

using namespace remora;

namespace remora_it {

#ifndef REMORA_TEST_PEER
#error "REMORA_TEST_PEER must name the remora-test-peer binary"
#endif

std::string peer_path() { return REMORA_TEST_PEER; }

std::string scratch_base() {
#ifdef REMORA_TEST_SCRATCH
  std::error_code ec;
  std::filesystem::create_directories(REMORA_TEST_SCRATCH, ec);
  if (!ec) return REMORA_TEST_SCRATCH;
#endif
  return "/tmp";
}

namespace {

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

std::vector<char*> c_argv(const std::vector<std::string>& argv) {
  std::vector<char*> out;
  for (const auto& a : argv) out.push_back(const_cast<char*>(a.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

// ------------------------------------------------------------------ commands

std::string which(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : std::string();
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/sbin:/usr/bin:/sbin:/bin";
  p += ":/usr/sbin:/sbin";
  std::size_t pos = 0;
  while (pos <= p.size()) {
    std::size_t end = p.find(':', pos);
    if (end == std::string::npos) end = p.size();
    std::string dir = p.substr(pos, end - pos);
    if (!dir.empty() && access((dir + "/" + name).c_str(), X_OK) == 0) return dir + "/" + name;
    pos = end + 1;
  }
  return {};
}

CommandResult run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  CommandResult res;
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) != 0) return res;
  auto args = c_argv(argv);
  pid_t pid = fork();
  if (pid < 0) {
    close(pfd[0]);
    close(pfd[1]);
    return res;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(pfd[1], 1);
    dup2(pfd[1], 2);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(pfd[1]);
  const auto deadline = Clock::now() + timeout;
  char buf[4096];
  for (;;) {
    pollfd p{pfd[0], POLLIN, 0};
    int n = poll(&p, 1, remaining_ms(deadline));
    if (n <= 0) break;  // timeout
    ssize_t r = read(pfd[0], buf, sizeof buf);
    if (r <= 0) break;
    res.output.append(buf, static_cast<std::size_t>(r));
  }
  close(pfd[0]);
  int status = 0;
  for (;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (Clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      res.output += "\n[timed out]";
      return res;
    }
    std::this_thread::sleep_for(5ms);
  }
  res.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return res;
}

// ------------------------------------------------------------------ Process

std::unique_ptr<Process> Process::spawn(const std::vector<std::string>& argv) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) return nullptr;
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    return nullptr;
  }
  auto args = c_argv(argv);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {in[0], in[1], out[0], out[1]}) close(fd);
    return nullptr;
  }
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);
    dup2(in[0], 0);
    dup2(out[1], 1);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  std::unique_ptr<Process> p(new Process());
  p->pid_ = pid;
  p->in_ = in[1];
  p->out_ = out[0];
  return p;
}

Process::~Process() {
  kill_now();
  if (in_ >= 0) close(in_);
  if (out_ >= 0) close(out_);
}

void Process::kill_now() {
  if (pid_ <= 0 || reaped_) return;
  ::kill(pid_, SIGKILL);
  // A SIGKILLed process is reaped promptly; bound it anyway.
  const auto deadline = Clock::now() + 10s;
  while (!reaped_ && Clock::now() < deadline) {
    if (waitpid(pid_, &status_, WNOHANG) == pid_) {
      reaped_ = true;
      break;
    }
    std::this_thread::sleep_for(2ms);
  }
}

void Process::signal(int sig) {
  if (pid_ > 0 && !reaped_) ::kill(pid_, sig);
}

bool Process::stop(std::chrono::milliseconds timeout) {
  if (pid_ <= 0 || reaped_) return false;
  ::kill(pid_, SIGSTOP);
  const auto deadline = Clock::now() + timeout;
  const std::string task_dir = "/proc/" + std::to_string(pid_) + "/task";
  for (;;) {
    // Stopped when every thread's state (field 3 of stat) is 'T'.
    bool all = true, any = false;
    std::error_code ec;
    for (const auto& t : std::filesystem::directory_iterator(task_dir, ec)) {
      FILE* f = std::fopen((t.path().string() + "/stat").c_str(), "r");
      if (!f) continue;
      char buf[512] = {};
      std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
      std::fclose(f);
      const char* close_paren = std::strrchr(buf, ')');
      if (n == 0 || close_paren == nullptr || close_paren[1] == 0) continue;
      any = true;
      if (close_paren[2] != 'T' && close_paren[2] != 't') all = false;
    }
    if (any && all) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
}

bool Process::send(const std::string& line) {
  if (in_ < 0) return false;
  std::string s = line + "\n";
  return ::write(in_, s.data(), s.size()) == static_cast<ssize_t>(s.size());
}

void Process::close_stdin() {
  if (in_ >= 0) close(in_);
  in_ = -1;
}

bool Process::read_some(int timeout_ms) {
  if (eof_ || out_ < 0) return false;
  pollfd p{out_, POLLIN, 0};
  int n = ::poll(&p, 1, timeout_ms);
  if (n <= 0) return n == 0;
  char buf[8192];
  ssize_t r = ::read(out_, buf, sizeof buf);
  if (r <= 0) {
    eof_ = true;
    return false;
  }
  partial_.append(buf, static_cast<std::size_t>(r));
  for (std::size_t nl; (nl = partial_.find('\n')) != std::string::npos;) {
    lines_.push_back(partial_.substr(0, nl));
    taken_.push_back(false);
    partial_.erase(0, nl + 1);
  }
  return true;
}

void Process::drain() {
  while (!eof_) {
    std::size_t before = lines_.size() + partial_.size();
    if (!read_some(0)) break;
    if (lines_.size() + partial_.size() == before) break;
  }
}

std::optional<std::string> Process::wait_line(std::string_view prefix, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::size_t scanned = 0;
  for (;;) {
    for (; scanned < lines_.size(); ++scanned) {
      if (!taken_[scanned] && std::string_view(lines_[scanned]).substr(0, prefix.size()) == prefix) {
        taken_[scanned] = true;
        return lines_[scanned];
      }
    }
    if (eof_ || Clock::now() >= deadline) return std::nullopt;
    if (!read_some(remaining_ms(deadline))) {
      if (eof_) continue;  // scan what arrived with the EOF
    }
  }
}

std::string Process::transcript() const {
  std::string s;
  for (const auto& l : lines_) {
    s += "  | ";
    s += l.size() > 300 ? l.substr(0, 300) + "..." : l;
    s += "\n";
  }
  return s;
}

std::optional<int> Process::wait_exit(std::chrono::milliseconds timeout) {
  if (reaped_) return status_;
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (waitpid(pid_, &status_, WNOHANG) == pid_) {
      reaped_ = true;
      return status_;
    }
    if (Clock::now() >= deadline) return std::nullopt;
    drain();
    std::this_thread::sleep_for(5ms);
  }
}

// ------------------------------------------------------------------ Peer

std::unique_ptr<Peer> Peer::start(const std::vector<std::string>& args, const std::vector<std::string>& prefix,
                                  std::chrono::milliseconds timeout) {
  std::vector<std::string> argv = prefix;
  argv.push_back(peer_path());
  argv.insert(argv.end(), args.begin(), args.end());
  auto proc = Process::spawn(argv);
  if (!proc) {
    ADD_FAILURE() << "could not spawn " << peer_path();
    return nullptr;
  }
  auto ready = proc->wait_line("READY ", timeout);
  if (!ready) {
    ADD_FAILURE() << "peer did not become ready within " << timeout.count() << " ms\n" << proc->transcript();
    return nullptr;
  }
  std::unique_ptr<Peer> peer(new Peer());
  peer->proc_ = std::move(proc);
  peer->port_ = static_cast<std::uint16_t>(std::stoul(field(*ready, "port")));
  peer->size_ = std::stoul(field(*ready, "size"));
  // Region order: the --regions argument (default rw,ro,wo).
  std::vector<std::string> order{"rw", "ro", "wo"};
  for (std::size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--regions") {
      order.clear();
      std::string list = args[i + 1];
      std::size_t pos = 0;
      while (pos <= list.size()) {
        std::size_t end = list.find(',', pos);
        if (end == std::string::npos) end = list.size();
        if (end > pos) order.push_back(list.substr(pos, end - pos));
        pos = end + 1;
      }
    }
  }
  for (std::size_t i = 0; i < order.size(); ++i) peer->order_[order[i]] = i;
  for (const char* name : {"rw", "ro", "wo", "file"}) {
    std::string hex = field(*ready, name);
    if (hex.empty()) continue;
    auto bytes = from_hex(hex);
    if (!bytes) {
      ADD_FAILURE() << "bad descriptor hex for " << name;
      return nullptr;
    }
    auto rr = RemoteRegion::parse(*bytes);
    if (!rr) {
      ADD_FAILURE() << "descriptor for " << name << " does not parse: " << rr.error().message();
      return nullptr;
    }
    peer->regions_[name] = *rr;
  }
  char tmpl[] = "/tmp/remora-it-dump-XXXXXX";
  int fd = mkstemp(tmpl);
  if (fd >= 0) close(fd);
  peer->dump_path_ = tmpl;
  return peer;
}

Peer::~Peer() {
  if (proc_) proc_->kill_now();
  if (!dump_path_.empty()) std::remove(dump_path_.c_str());
}

std::optional<std::vector<std::uint8_t>> Peer::dump(std::string* guards, std::chrono::milliseconds timeout) {
  if (!proc_->send("dump " + dump_path_)) return std::nullopt;
  auto line = proc_->wait_line("DUMPED ", timeout);
  if (!line) return std::nullopt;
  if (guards) *guards = line->substr(line->find("guards=") + 7);
  std::vector<std::uint8_t> out;
  FILE* f = std::fopen(dump_path_.c_str(), "rb");
  if (!f) return std::nullopt;
  std::uint8_t buf[65536];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.insert(out.end(), buf, buf + n);
  std::fclose(f);
  std::remove(dump_path_.c_str());
  return out;
}

bool Peer::wait_event(int conn, const std::string& type, std::chrono::milliseconds timeout) {
  return proc_->wait_line("EVENT conn=" + std::to_string(conn) + " type=" + type + " ", timeout).has_value();
}

std::optional<int> Peer::quit(std::chrono::milliseconds timeout) {
  proc_->send("quit");
  auto st = proc_->wait_exit(timeout);
  std::remove(dump_path_.c_str());
  return st;
}

// ------------------------------------------------------------------ checks

::testing::AssertionResult guards_intact(const std::vector<std::uint8_t>& dump, std::size_t nregions,
                                         std::size_t region_size) {
  if (dump.size() != nregions * region_stride(region_size))
    return ::testing::AssertionFailure() << "dump has " << dump.size() << " bytes, expected "
                                         << nregions * region_stride(region_size);
  for (std::size_t r = 0; r < nregions; ++r) {
    const std::size_t base = region_offset(r, region_size);
    for (std::size_t b = 0; b < kGuard; ++b) {
      if (dump[base - kGuard + b] != kGuardByte)
        return ::testing::AssertionFailure() << "guard before region " << r << " changed at -" << (kGuard - b) << " (0x"
                                             << std::hex << int(dump[base - kGuard + b]) << ")";
      if (dump[base + region_size + b] != kGuardByte)
        return ::testing::AssertionFailure() << "guard after region " << r << " changed at +" << b << " (0x" << std::hex
                                             << int(dump[base + region_size + b]) << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult region_equals(const std::vector<std::uint8_t>& dump, std::size_t index,
                                         std::size_t region_size, std::size_t off,
                                         const std::vector<std::uint8_t>& expect) {
  const std::size_t base = region_offset(index, region_size) + off;
  if (base + expect.size() > dump.size()) return ::testing::AssertionFailure() << "range outside the dump";
  for (std::size_t i = 0; i < expect.size(); ++i)
    if (dump[base + i] != expect[i])
      return ::testing::AssertionFailure() << "region " << index << " byte " << off + i << " is 0x" << std::hex
                                           << int(dump[base + i]) << ", expected 0x" << int(expect[i]);
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult region_pristine(const std::vector<std::uint8_t>& dump, std::size_t index,
                                           std::size_t region_size) {
  std::vector<std::uint8_t> expect(region_size);
  for (std::size_t i = 0; i < region_size; ++i) expect[i] = initial_byte(index, i);
  return region_equals(dump, index, region_size, 0, expect);
}

// ------------------------------------------------------------------ TempDir

TempDir::TempDir(const std::string& base) {
  std::string tmpl = base + "/remora-it-XXXXXX";
  if (mkdtemp(tmpl.data())) path_ = tmpl;
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

// ------------------------------------------------------------------ Client

::testing::AssertionResult Client::init(bool busy_poll, std::size_t local_size) {
  FabricOptions fo;
  fo.busy_poll = busy_poll;
  fo.same_host = same_host;
  auto f = Fabric::open(fo);
  if (!f) return ::testing::AssertionFailure() << "Fabric::open: " << f.error().message();
  fabric_ = std::move(*f);
  auto z = fabric_.create_zone();
  if (!z) return ::testing::AssertionFailure() << "create_zone: " << z.error().message();
  zone_ = std::move(*z);
  auto q = zone_.create_cq();
  if (!q) return ::testing::AssertionFailure() << "create_cq: " << q.error().message();
  cq_ = std::move(*q);
  size_ = local_size;
  buf_ = std::unique_ptr<std::uint8_t, void (*)(std::uint8_t*)>(
      static_cast<std::uint8_t*>(std::aligned_alloc(4096, local_size)), [](std::uint8_t* p) { std::free(p); });
  std::memset(buf_.get(), 0, local_size);
  auto m = zone_.register_memory(buf_.get(), local_size, Access::local_read | Access::local_write);
  if (!m) return ::testing::AssertionFailure() << "register_memory: " << m.error().message();
  mr_ = std::move(*m);
  return ::testing::AssertionSuccess();
}

Result<Endpoint> Client::endpoint(std::uint32_t max_outstanding) {
  EndpointOptions eo;
  eo.send_cq = &cq_;
  eo.max_outstanding = max_outstanding;
  return zone_.create_endpoint(eo);
}

::testing::AssertionResult Client::connect(Endpoint& ep, std::uint16_t port, const std::vector<std::uint8_t>& pdata,
                                           std::vector<std::uint8_t>* reply, const std::string& host,
                                           std::uint32_t max_outstanding) {
  auto e = endpoint(max_outstanding);
  if (!e) return ::testing::AssertionFailure() << "create_endpoint: " << e.error().message();
  ep = std::move(*e);
  auto r = ep.connect_and_wait(host, port, pdata, 10s);
  if (!r) return ::testing::AssertionFailure() << "connect to " << host << ":" << port << ": " << r.error().message();
  if (ep.state() != EndpointState::connected)
    return ::testing::AssertionFailure() << "state after establishment: " << to_string(ep.state());
  if (reply) *reply = std::move(*r);
  return ::testing::AssertionSuccess();
}

std::vector<Completion> Client::collect(std::size_t n, std::chrono::milliseconds timeout) {
  std::vector<Completion> out;
  const auto deadline = Clock::now() + timeout;
  Completion c[32];
  while (out.size() < n) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    auto got = cq_.wait(std::span<Completion>(c, std::min<std::size_t>(32, n - out.size())), left);
    if (!got) break;
    out.insert(out.end(), c, c + *got);
  }
  return out;
}

::testing::AssertionResult Client::wait_cookie(std::uint64_t cookie, Completion* out,
                                               std::chrono::milliseconds timeout) {
  auto got = collect(1, timeout);
  if (got.empty())
    return ::testing::AssertionFailure() << "no completion for cookie " << cookie << " within " << timeout.count()
                                         << " ms";
  if (got[0].cookie != cookie)
    return ::testing::AssertionFailure() << "expected cookie " << cookie << ", got " << got[0].cookie << " ("
                                         << to_string(got[0].op) << ", " << got[0].status.message() << ")";
  if (out) *out = got[0];
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult Client::expect_no_completion(std::chrono::milliseconds quiet) {
  Completion c[1];
  auto got = cq_.wait(c, quiet);
  if (got)
    return ::testing::AssertionFailure() << "unexpected completion: cookie " << c[0].cookie << " " << to_string(c[0].op)
                                         << " " << c[0].status.message();
  return ::testing::AssertionSuccess();
}

// ------------------------------------------------------------------ misc

std::vector<std::uint8_t> make_pdata(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed + i * 29 + (i >> 3));
  return v;
}

::testing::AssertionResult expect_event(Endpoint& ep, ConnectionEventType type, std::chrono::milliseconds timeout,
                                        ConnectionEvent* out) {
  auto ev = ep.next_event(timeout);
  if (!ev)
    return ::testing::AssertionFailure() << "no connection event (wanted " << to_string(type) << ") within "
                                         << timeout.count() << " ms: " << ev.error().message();
  if (ev->type != type)
    return ::testing::AssertionFailure() << "got event " << to_string(ev->type) << ", wanted " << to_string(type);
  if (out) *out = std::move(*ev);
  return ::testing::AssertionSuccess();
}

void fill(std::uint8_t* p, std::size_t n, std::uint8_t seed) {
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>(seed * 37 + i * 11 + (i >> 9));
}

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  fill(v.data(), n, seed);
  return v;
}

}  // namespace remora_it
