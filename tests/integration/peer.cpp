// remora-test-peer: the passive target of the two-process integration tests.
//
// Target mode (default): opens a Fabric and a zone, registers regions inside
// one larger allocation with unregistered guard bytes (0xA5, 4 KiB) before and
// after each, optionally maps a persistent file region, listens and prints
//
//   READY port=<port> pid=<pid> size=<region size> rw=<hex descriptor> ...
//
// on stdout (one line, flushed). It accepts every connection request (keeps
// serving the others when one breaks) and answers the client's private data
// with common.hpp's accept_reply(); requests whose private data starts with
// "REJECT" are rejected with reject_reply(). After accepting it makes no
// library calls on the data path: the zone's target agent serves writes,
// reads, atomic writes and flushes. It only waits for connection events
// (reported as "EVENT conn=<n> type=<type>") and, with --recv N, posts N
// receives per connection and reports them ("RECV ..."; with --echo it sends
// each received message back, immediate + 1).
//
// Commands on stdin, one per line:
//   dump PATH      write the whole allocation (guards included) to PATH,
//                  answer "DUMPED guards=ok|bad ..."
//   guards         answer "GUARDS ok|bad ..."
//   disconnect N   gracefully disconnect connection N
//   state N        answer "STATE conn=N state=<state>"
//   poke-guard     damage one guard byte (to check that the checks detect it)
//   quit           (also EOF on stdin, SIGTERM, SIGINT) check the guards,
//                  print "BYE guards=ok|bad", exit 0 when intact, 3 when not.
//
// Client mode (the two-host test): --client HOST:PORT --bind ADDR --desc HEX
// connects, writes a gather list, flushes to visibility, reads it back, checks
// it and prints "CLIENT ok" (exit 0), "CLIENT unreachable" (exit 2) or
// "CLIENT FAIL <why>" (exit 1). With
// --hold it then keeps the connection open until stdin closes.
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <remora/remora.hpp>

#include "common.hpp"

using namespace remora;
using namespace remora_it;
using namespace std::chrono_literals;

namespace {

void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void say(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stdout, fmt, ap);
  va_end(ap);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

[[noreturn]] void die(const char* what, std::error_code ec) {
  say("FATAL %s: %s", what, ec.message().c_str());
  std::fflush(stdout);
  std::_Exit(2);
}

template <class T>
T must(Result<T> r, const char* what) {
  if (!r) die(what, r.error());
  return std::move(*r);
}

struct Options {
  std::string listen = "127.0.0.1";
  std::uint16_t port = 0;
  bool busy_poll = false;
  std::vector<std::string> regions{"rw", "ro", "wo"};
  std::size_t size = kDefaultRegionSize;
  std::string file;
  std::size_t file_size = kDefaultRegionSize;
  std::uint32_t recv = 0;
  bool echo = false;
  // client mode
  std::string client;
  std::string bind;
  std::string desc;
  bool hold = false;
};

void usage() {
  std::fprintf(stderr,
               "usage: remora-test-peer [--listen ADDR] [--port N] [--busy-poll] [--regions rw,ro,wo]\n"
               "                        [--size BYTES] [--file PATH [--file-size BYTES]] [--recv N [--echo]]\n"
               "       remora-test-peer --client HOST:PORT --bind ADDR --desc HEX [--busy-poll] [--hold]\n");
  std::exit(64);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage();
      return argv[++i];
    };
    if (a == "--listen")
      o.listen = next();
    else if (a == "--port")
      o.port = static_cast<std::uint16_t>(std::stoul(next()));
    else if (a == "--busy-poll")
      o.busy_poll = true;
    else if (a == "--regions") {
      o.regions.clear();
      std::string list = next();
      std::size_t pos = 0;
      while (pos <= list.size()) {
        std::size_t end = list.find(',', pos);
        if (end == std::string::npos) end = list.size();
        if (end > pos) o.regions.push_back(list.substr(pos, end - pos));
        pos = end + 1;
      }
    } else if (a == "--size")
      o.size = std::stoul(next());
    else if (a == "--file")
      o.file = next();
    else if (a == "--file-size")
      o.file_size = std::stoul(next());
    else if (a == "--recv")
      o.recv = static_cast<std::uint32_t>(std::stoul(next()));
    else if (a == "--echo")
      o.echo = true;
    else if (a == "--client")
      o.client = next();
    else if (a == "--bind")
      o.bind = next();
    else if (a == "--desc")
      o.desc = next();
    else if (a == "--hold")
      o.hold = true;
    else
      usage();
  }
  for (const auto& r : o.regions)
    if (r != "rw" && r != "ro" && r != "wo") usage();
  if (o.size == 0 || o.size % 8) usage();
  return o;
}

Access access_of(const std::string& mode) {
  if (mode == "rw") return Access::all;
  if (mode == "ro") return Access::remote_read;  // remote read only
  return Access::remote_write;                   // "wo": remote write only
}

// ---------------------------------------------------------------- client mode

int run_client(const Options& o) {
  auto fail = [](const char* why, std::error_code ec = {}) {
    say("CLIENT FAIL %s%s%s", why, ec ? ": " : "", ec ? ec.message().c_str() : "");
    return 1;
  };
  const auto colon = o.client.rfind(':');
  if (colon == std::string::npos || o.bind.empty()) return fail("bad --client/--bind");
  const std::string host = o.client.substr(0, colon);
  const auto port = static_cast<std::uint16_t>(std::stoul(o.client.substr(colon + 1)));
  auto bytes = from_hex(o.desc);
  if (!bytes) return fail("bad --desc");
  auto rr = RemoteRegion::parse(*bytes);
  if (!rr) return fail("parse descriptor", rr.error());

  FabricOptions fo;
  fo.address = o.bind;
  fo.busy_poll = o.busy_poll;
  auto fabric = Fabric::open(fo);
  if (!fabric) return fail("Fabric::open", fabric.error());
  auto zone = fabric->create_zone();
  if (!zone) return fail("create_zone", zone.error());
  auto cq = zone->create_cq();
  if (!cq) return fail("create_cq", cq.error());
  EndpointOptions eo;
  eo.send_cq = &*cq;
  auto ep = zone->create_endpoint(eo);
  if (!ep) return fail("create_endpoint", ep.error());

  std::vector<std::uint8_t> pdata(220);
  for (std::size_t i = 0; i < pdata.size(); ++i) pdata[i] = static_cast<std::uint8_t>(i * 3 + 1);
  auto reply = ep->connect_and_wait(host, port, pdata, 10s);
  if (!reply && reply.error() == Errc::unreachable) {
    say("CLIENT unreachable");
    return 2;
  }
  if (!reply) return fail("connect", reply.error());
  if (*reply != accept_reply(pdata)) return fail("accept private data mismatch");

  const std::size_t len = 8192;
  if (rr->length() < len + 64) return fail("region too small");
  std::vector<std::uint8_t> buf(2 * len, 0);
  auto mr = zone->register_memory(buf.data(), buf.size(), Access::local_read | Access::local_write);
  if (!mr) return fail("register_memory", mr.error());
  for (std::size_t i = 0; i < len; ++i) buf[i] = static_cast<std::uint8_t>(0xC3 ^ (i * 13));
  Segment src[3] = {Segment(*mr, 0, 1000), Segment(*mr, 1000, 3000), Segment(*mr, 4000, len - 4000)};
  auto wait_one = [&](std::uint64_t cookie) -> std::error_code {
    Completion c[1];
    auto n = cq->wait(c, 10s);
    if (!n) return n.error();
    if (c[0].cookie != cookie) return make_error_code(Errc::malformed);
    return c[0].status;
  };
  if (auto r = ep->write(src, *rr, 64, 1); !r) return fail("post write", r.error());
  if (auto ec = wait_one(1)) return fail("write completion", ec);
  if (auto r = ep->flush(*rr, 64, len, FlushType::visibility, 2); !r) return fail("post flush", r.error());
  if (auto ec = wait_one(2)) return fail("flush completion", ec);
  Segment dst[2] = {Segment(*mr, len, 5000), Segment(*mr, len + 5000, len - 5000)};
  if (auto r = ep->read(dst, *rr, 64, 3); !r) return fail("post read", r.error());
  if (auto ec = wait_one(3)) return fail("read completion", ec);
  if (std::memcmp(buf.data(), buf.data() + len, len) != 0) return fail("read back differs from written data");
  if (o.hold) {
    // Keep the connection (with a read outstanding that the target answers)
    // until stdin closes or the process is killed.
    say("CLIENT ok bytes=%zu holding", len);
    char b[64];
    while (::read(0, b, sizeof b) > 0) {
    }
  } else {
    say("CLIENT ok bytes=%zu", len);
  }
  (void)ep->disconnect();
  return 0;
}

// ---------------------------------------------------------------- target mode

struct Conn {
  int n = 0;
  Endpoint ep;
  std::vector<std::uint8_t> rxbuf;
  MemoryRegion rxmr;
  std::vector<std::uint8_t> txbuf;  // echo copies
  MemoryRegion txmr;
};

constexpr std::size_t kRecvSlot = 4096;

class Target {
 public:
  explicit Target(const Options& o) : o_(o) {}

  int run() {
    // Block the stop signals before any library thread exists, so that every
    // thread inherits the mask and they are taken only through the signalfd.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    sigfd_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);

    FabricOptions fo;
    fo.address = o_.listen;
    fo.busy_poll = o_.busy_poll;
    fabric_ = must(Fabric::open(fo), "Fabric::open");
    zone_ = must(fabric_.create_zone(), "create_zone");
    cq_ = must(zone_.create_cq(), "create_cq");

    // One allocation, [guard][region][guard] per region.
    total_ = o_.regions.size() * region_stride(o_.size);
    if (total_ > 0) {
      void* p = mmap(nullptr, total_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) die("mmap", std::error_code(errno, std::generic_category()));
      mem_ = static_cast<std::uint8_t*>(p);
      std::memset(mem_, kGuardByte, total_);
    }
    std::string line = "READY port=";
    std::vector<std::pair<std::string, RemoteRegion>> descs;
    for (std::size_t i = 0; i < o_.regions.size(); ++i) {
      std::uint8_t* base = mem_ + region_offset(i, o_.size);
      for (std::size_t b = 0; b < o_.size; ++b) base[b] = initial_byte(i, b);
      regions_.push_back(must(zone_.register_memory(base, o_.size, access_of(o_.regions[i])), "register_memory"));
      descs.emplace_back(o_.regions[i], must(regions_.back().remote(), "remote"));
    }
    if (!o_.file.empty()) {
      file_ = must(zone_.map_file(o_.file, o_.file_size, Access::all), "map_file");
      descs.emplace_back("file", must(file_.remote(), "remote"));
    }
    listener_ = must(zone_.listen(o_.listen, o_.port), "listen");
    line += std::to_string(listener_.port());
    line += " pid=" + std::to_string(getpid());
    line += " size=" + std::to_string(o_.size);
    for (auto& [name, d] : descs) line += " " + name + "=" + to_hex(d.serialize());
    say("%s", line.c_str());

    loop();

    const std::string g = check_guards();
    say("BYE guards=%s", g.c_str());
    for (auto& c : conns_) c->ep.close();
    conns_.clear();
    listener_.close();
    regions_.clear();
    file_.close();
    cq_ = CompletionQueue();
    zone_.close();
    fabric_.close();
    if (mem_) munmap(mem_, total_);
    return g == "ok" ? 0 : 3;
  }

 private:
  void loop() {
    bool stdin_open = true;
    for (;;) {
      std::vector<pollfd> fds;
      std::vector<Conn*> owners;  // parallel to fds; null for non-endpoint fds
      auto add = [&](int fd, Conn* c) {
        fds.push_back(pollfd{fd, POLLIN, 0});
        owners.push_back(c);
      };
      add(sigfd_, nullptr);
      add(stdin_open ? 0 : -1, nullptr);
      add(listener_.fd(), nullptr);
      add(cq_.fd(), nullptr);
      for (auto& c : conns_) add(c->ep.event_fd(), c.get());
      int n = ::poll(fds.data(), fds.size(), 500);
      if (n < 0 && errno != EINTR) return;
      if (fds[0].revents & POLLIN) {
        signalfd_siginfo si;
        (void)!::read(sigfd_, &si, sizeof si);
        say("SIGNAL %u", si.ssi_signo);
        return;
      }
      if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
        if (!read_commands()) stdin_open = false;
        if (quit_) return;
        if (!stdin_open) return;  // the test went away: stop
      }
      accept_requests();
      completions();
      for (std::size_t i = 4; i < fds.size(); ++i)
        if (fds[i].revents & POLLIN) events(*owners[i]);
    }
  }

  // Returns false on EOF.
  bool read_commands() {
    char buf[4096];
    ssize_t r = ::read(0, buf, sizeof buf);
    if (r <= 0) return false;
    inbuf_.append(buf, static_cast<std::size_t>(r));
    for (std::size_t nl; (nl = inbuf_.find('\n')) != std::string::npos;) {
      std::string cmd = inbuf_.substr(0, nl);
      inbuf_.erase(0, nl + 1);
      command(cmd);
      if (quit_) return true;
    }
    return true;
  }

  Conn* conn(const std::string& arg) {
    int n = std::atoi(arg.c_str());
    for (auto& c : conns_)
      if (c->n == n) return c.get();
    return nullptr;
  }

  void command(const std::string& cmd) {
    const auto sp = cmd.find(' ');
    const std::string verb = cmd.substr(0, sp);
    const std::string arg = sp == std::string::npos ? "" : cmd.substr(sp + 1);
    if (verb == "quit") {
      quit_ = true;
    } else if (verb == "guards") {
      say("GUARDS %s", check_guards().c_str());
    } else if (verb == "dump") {
      FILE* f = std::fopen(arg.c_str(), "wb");
      bool ok = f != nullptr && (total_ == 0 || std::fwrite(mem_, 1, total_, f) == total_);
      if (f) ok = std::fclose(f) == 0 && ok;
      say("DUMPED %s guards=%s", ok ? "ok" : "write-failed", check_guards().c_str());
    } else if (verb == "disconnect") {
      Conn* c = conn(arg);
      auto r = c ? c->ep.disconnect() : Result<void>(Errc::invalid_handle);
      say("DISCONNECTED conn=%s rc=%s", arg.c_str(), r ? "ok" : r.error().message().c_str());
    } else if (verb == "poke-guard") {
      // Test-of-the-test: damage the guard after region 0 (local store, not
      // a remote operation) so the tests can see that the checks bite.
      if (total_ > 0) mem_[region_offset(0, o_.size) + o_.size + 17] ^= 0xFF;
      say("POKED");
    } else if (verb == "state") {
      Conn* c = conn(arg);
      say("STATE conn=%s state=%s", arg.c_str(), c ? to_string(c->ep.state()) : "none");
    } else {
      say("UNKNOWN %s", cmd.c_str());
    }
  }

  std::string check_guards() const {
    for (std::size_t i = 0; i < o_.regions.size(); ++i) {
      const std::uint8_t* base = mem_ + region_offset(i, o_.size);
      for (std::size_t b = 1; b <= kGuard; ++b)
        if (base[-static_cast<std::ptrdiff_t>(b)] != kGuardByte)
          return "bad region=" + o_.regions[i] + " before offset=-" + std::to_string(b);
      for (std::size_t b = 0; b < kGuard; ++b)
        if (base[o_.size + b] != kGuardByte)
          return "bad region=" + o_.regions[i] + " after offset=" + std::to_string(b);
    }
    return "ok";
  }

  void accept_requests() {
    for (;;) {
      auto req = listener_.next_request(0ms);
      if (!req) return;
      const auto& pd = req->private_data();
      const int n = ++next_conn_;
      const bool reject =
          pd.size() >= kRejectPrefix.size() && std::memcmp(pd.data(), kRejectPrefix.data(), kRejectPrefix.size()) == 0;
      if (reject) {
        auto r = req->reject(reject_reply(pd));
        say("REJECTED conn=%d rc=%s pdata=%s", n, r ? "ok" : r.error().message().c_str(), to_hex(pd).c_str());
        continue;
      }
      auto c = std::make_unique<Conn>();
      c->n = n;
      EndpointOptions eo;
      eo.send_cq = &cq_;
      eo.max_recv = std::max<std::uint32_t>(o_.recv, 1);
      c->ep = must(zone_.create_endpoint(eo), "create_endpoint");
      if (o_.recv > 0) {
        c->rxbuf.assign(o_.recv * kRecvSlot, 0);
        c->rxmr =
            must(zone_.register_memory(c->rxbuf.data(), c->rxbuf.size(), Access::local_read | Access::local_write),
                 "register rx");
        c->txbuf.assign(o_.recv * kRecvSlot, 0);
        c->txmr =
            must(zone_.register_memory(c->txbuf.data(), c->txbuf.size(), Access::local_read | Access::local_write),
                 "register tx");
      }
      auto r = req->accept(c->ep, accept_reply(pd));
      say("ACCEPTED conn=%d rc=%s pdata=%s", n, r ? "ok" : r.error().message().c_str(), to_hex(pd).c_str());
      if (!r) continue;
      for (std::uint32_t i = 0; i < o_.recv; ++i) post_recv(*c, i);
      by_id_[c->ep.id()] = c.get();
      conns_.push_back(std::move(c));
    }
  }

  void post_recv(Conn& c, std::uint32_t slot) {
    Segment s(c.rxmr, slot * kRecvSlot, kRecvSlot);
    auto r = c.ep.recv({&s, 1}, static_cast<std::uint64_t>(c.n) * 1000 + slot);
    if (!r) say("RECV-POST conn=%d rc=%s", c.n, r.error().message().c_str());
  }

  void completions() {
    Completion cs[16];
    for (;;) {
      std::size_t n = cq_.poll(cs);
      if (n == 0) return;
      for (std::size_t i = 0; i < n; ++i) completion(cs[i]);
    }
  }

  void completion(const Completion& c) {
    auto it = by_id_.find(c.endpoint_id);
    Conn* conn = it == by_id_.end() ? nullptr : it->second;
    const int cn = conn ? conn->n : -1;
    // Status: "ok" or the remora::Errc value.
    const std::string st = c.status ? std::to_string(c.status.value()) : "ok";
    if (c.op == Opcode::recv || c.op == Opcode::recv_write_imm) {
      const std::uint32_t slot = static_cast<std::uint32_t>(c.cookie % 1000);
      std::string data;
      if (conn && c.op == Opcode::recv && !c.status && slot < o_.recv)
        data = to_hex({conn->rxbuf.data() + slot * kRecvSlot, static_cast<std::size_t>(c.length)});
      say("RECV conn=%d cookie=%" PRIu64 " op=%s status=%s len=%" PRIu64 " has_imm=%d imm=%u data=%s", cn, c.cookie,
          to_string(c.op), st.c_str(), c.length, c.has_imm ? 1 : 0, c.imm, data.c_str());
      if (!conn || c.status || slot >= o_.recv) return;
      if (o_.echo && c.op == Opcode::recv) {
        std::memcpy(conn->txbuf.data() + slot * kRecvSlot, conn->rxbuf.data() + slot * kRecvSlot, c.length);
        Segment s(conn->txmr, slot * kRecvSlot, c.length);
        auto r = c.has_imm ? conn->ep.send_imm({&s, 1}, c.imm + 1, 900000 + c.cookie)
                           : conn->ep.send({&s, 1}, 900000 + c.cookie);
        if (!r) say("ECHO-POST conn=%d rc=%s", cn, r.error().message().c_str());
      }
      post_recv(*conn, slot);
      return;
    }
    say("SENT conn=%d cookie=%" PRIu64 " op=%s status=%s", cn, c.cookie, to_string(c.op), st.c_str());
  }

  void events(Conn& c) {
    for (;;) {
      auto ev = c.ep.next_event(0ms);
      if (!ev) return;
      say("EVENT conn=%d type=%s pdata=%zu", c.n, to_string(ev->type), ev->private_data.size());
    }
  }

  const Options& o_;
  int sigfd_ = -1;
  Fabric fabric_;
  ProtectionZone zone_;
  CompletionQueue cq_;
  std::uint8_t* mem_ = nullptr;
  std::size_t total_ = 0;
  std::vector<MemoryRegion> regions_;
  MemoryRegion file_;
  Listener listener_;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::map<std::uint64_t, Conn*> by_id_;
  int next_conn_ = 0;
  std::string inbuf_;
  bool quit_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  Options o = parse(argc, argv);
  if (!o.client.empty()) return run_client(o);
  Target t(o);
  return t.run();
}
