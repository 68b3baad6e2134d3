// tools/perf_engine.cpp - remora-perf's two roles, written against the public
// Remora API only.
//
// Out-of-band protocol (connection private data, little-endian hosts):
//   client -> server  Request: magic, version, op, queue depth, largest size.
//   server -> client  Reply: magic, version, region count, then that many
//                     RemoteRegion descriptors (RemoteRegion::serialize, 40
//                     bytes each): [0] the target buffer (remote read+write),
//                     [1] for write_flush_persistent only, a file-backed
//                     persistent region (ProtectionZone::map_file).
//   a rejection carries kRejectMagic followed by the reason as text.
#include "perf_engine.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rdma/fabric.h>

#include <remora/remora.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "perf_report.hpp"
#include "smaps.hpp"
#include "svg_plot.hpp"

namespace remora::perf {

namespace {

using namespace std::chrono_literals;

constexpr std::chrono::milliseconds kConnectTimeout = 10s;
constexpr std::chrono::milliseconds kAcceptWait = 120s;  // server: waiting for a client
constexpr std::chrono::milliseconds kEstablishTimeout = 10s;
constexpr std::chrono::seconds kStallTimeout{10};  // no completion for this long (+ size): give up
constexpr std::chrono::seconds kProgressAfter{2};
constexpr double kTargetSeconds = 1.5;  // calibrated runs aim at this...
constexpr double kMaxSeconds = 2.0;     // ...and stop posting after this
constexpr double kWarmupSeconds = 0.3;  // calibrating warm-up
constexpr std::uint64_t kDefaultItersCap = 5'000'000;
constexpr std::uint64_t kWriteTag = std::uint64_t{1} << 63;  // cookie of the write half of write+flush

// ---- out-of-band protocol ----------------------------------------------------

constexpr std::uint32_t kRequestMagic = 0x31465052;  // "RPF1"
constexpr std::uint32_t kReplyMagic = 0x31525052;    // "RPR1"
constexpr std::uint32_t kControlMagic = 0x31435052;  // "RPC1"
constexpr std::array<std::uint8_t, 4> kRejectMagic{'R', 'P', 'F', 'X'};
constexpr std::uint16_t kVersion = 2;

// Request::flags
constexpr std::uint8_t kBidirectional = 1;  // the server issues the operation too
constexpr std::uint8_t kControl = 2;        // this is the control connection (bidirectional runs)
// ReplyHeader::flags
constexpr std::uint8_t kServerBusyPoll = 1;

// Every connection's request. Connections 0..connections-1 carry data; a
// bidirectional run adds one control connection last, whose request also
// carries the client's buffer for the server's writes and reads (a
// serialized RemoteRegion) unless the operation is send.
struct Request {
  std::uint32_t magic = kRequestMagic;
  std::uint16_t version = kVersion;
  std::uint8_t op = 0;
  std::uint8_t flags = 0;
  std::uint32_t qd = 0;  // per connection
  std::uint16_t connections = 1;
  std::uint16_t index = 0;
  std::uint64_t size = 0;  // largest size the client will use
};
static_assert(sizeof(Request) == 24);
static_assert(sizeof(Request) + RemoteRegion::kSerializedSize <= kMaxPrivateData);

struct ReplyHeader {
  std::uint32_t magic = kReplyMagic;
  std::uint16_t version = kVersion;
  std::uint8_t regions = 0;
  std::uint8_t flags = 0;
};
static_assert(sizeof(ReplyHeader) == 8);
static_assert(sizeof(ReplyHeader) + 2 * RemoteRegion::kSerializedSize <= kMaxPrivateData);

// Messages on the control connection of a bidirectional run: the client
// sends kRun before each of its runs (warm-ups included) and the server,
// having done the same run towards the client, answers kDone with what it
// did.
enum class ControlType : std::uint32_t { run = 1, done = 2 };
struct Control {
  std::uint32_t magic = kControlMagic;
  ControlType type = ControlType::run;
  std::uint64_t size = 0;
  std::uint64_t iters = 0;       // run: at most; done: completed
  std::uint64_t budget_ns = 0;   // run: stop posting after this (0: none)
  std::uint64_t min_done = 0;    // run: but not before this many completed
  std::uint64_t seconds_ns = 0;  // done: first post to last completion
};
static_assert(sizeof(Control) == 48);
constexpr std::size_t kControlSlot = 64;  // bytes per control buffer
constexpr std::size_t kControlRecvs = 4;

// The control connection of a bidirectional run, the same at both ends: its
// own queue, a few small messages in flight.
EndpointOptions control_endpoint_options(CompletionQueue& cq) {
  EndpointOptions eo;
  eo.send_cq = &cq;
  eo.max_outstanding = 8;
  eo.max_recv = kControlRecvs;
  eo.max_message = 4096;
  return eo;
}

template <class T>
std::vector<std::uint8_t> bytes_of(const T& v) {
  std::vector<std::uint8_t> out(sizeof v);
  std::memcpy(out.data(), &v, sizeof v);
  return out;
}

std::vector<std::uint8_t> reject_data(const std::string& reason) {
  std::vector<std::uint8_t> out(kRejectMagic.begin(), kRejectMagic.end());
  const std::size_t n = std::min(reason.size(), kMaxPrivateData - out.size());
  out.insert(out.end(), reason.begin(), reason.begin() + static_cast<std::ptrdiff_t>(n));
  return out;
}

// ---- helpers -----------------------------------------------------------------

std::uint64_t seconds_ns(double s) { return static_cast<std::uint64_t>(s * 1e9); }

std::string msg(std::error_code ec) { return ec.message(); }

std::string size_text(std::size_t n) { return std::to_string(n) + " bytes"; }

#ifdef REMORA_PERF_VERSION
constexpr std::string_view kRemoraVersion = REMORA_PERF_VERSION;
#else
constexpr std::string_view kRemoraVersion = "unknown";
#endif

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw PerfError("cannot write " + path);
}

/// Page-aligned, zeroed (so touched) memory.
struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};
using Buffer = std::unique_ptr<std::uint8_t, FreeDeleter>;

Buffer allocate(std::size_t len) {
  const std::size_t rounded = (len + 4095) / 4096 * 4096;
  void* p = std::aligned_alloc(4096, rounded);
  if (p == nullptr) throw PerfError("cannot allocate " + size_text(rounded));
  std::memset(p, 0, rounded);
  return Buffer(static_cast<std::uint8_t*>(p));
}

/// Waits until the huge pages of the mapping holding `addr` stop changing
/// (the same for 200 ms; 10 s at most) and returns how many bytes are in
/// them: on the same host the library moves a registered region's memory
/// into huge pages in the background, which a measurement must not overlap.
std::size_t wait_huge_pages_settled(const void* addr) {
  using namespace std::chrono;
  const auto until = steady_clock::now() + seconds(10);
  std::size_t last = remora::tools::anon_huge_bytes(addr);
  auto since = steady_clock::now();
  while (steady_clock::now() < until && steady_clock::now() - since < milliseconds(200)) {
    std::this_thread::sleep_for(milliseconds(10));
    if (const std::size_t now = remora::tools::anon_huge_bytes(addr); now != last) {
      last = now;
      since = steady_clock::now();
    }
  }
  return last;
}

// The persistent region's backing file. Removed at exit, on SIGINT/SIGTERM,
// and by the watchdog (emergency_cleanup).
char g_backing_file[PATH_MAX] = {};
std::atomic<bool> g_backing_file_set{false};

void remove_backing_file() noexcept {
  if (g_backing_file_set.exchange(false)) ::unlink(g_backing_file);
}

extern "C" void on_terminate_signal(int sig) {
  remove_backing_file();
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

struct BackingFile {
  BackingFile() {
    const char* dir = std::getenv("TMPDIR");
    if (dir == nullptr || *dir == '\0') dir = "/tmp";
    std::string templ = std::string(dir) + "/remora-perf-XXXXXX";
    if (templ.size() >= sizeof g_backing_file) throw PerfError("TMPDIR is too long: " + std::string(dir));
    std::memcpy(g_backing_file, templ.c_str(), templ.size() + 1);
    const int fd = ::mkstemp(g_backing_file);
    if (fd < 0) throw PerfError("cannot create the persistent region's file " + templ + ": " + std::strerror(errno));
    ::close(fd);
    path = g_backing_file;
    g_backing_file_set = true;
    std::signal(SIGINT, on_terminate_signal);
    std::signal(SIGTERM, on_terminate_signal);
  }
  ~BackingFile() { remove_backing_file(); }
  BackingFile(const BackingFile&) = delete;
  BackingFile& operator=(const BackingFile&) = delete;
  std::string path;
};

/// The local IPv4 address the kernel would use to reach host:port.
std::string local_address_towards(const std::string& host, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (getaddrinfo(host.c_str(), service.c_str(), &hints, &res) != 0 || res == nullptr)
    throw PerfError("cannot resolve '" + host + "' to an IPv4 address");
  std::string out;
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    sockaddr_in local{};
    socklen_t len = sizeof local;
    if (::connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET_ADDRSTRLEN] = {};
      if (inet_ntop(AF_INET, &local.sin_addr, buf, sizeof buf) != nullptr) out = buf;
    }
    ::close(fd);
  }
  freeaddrinfo(res);
  if (out.empty() || out == "0.0.0.0")
    throw PerfError("no route to '" + host + "': give the local address with --address");
  return out;
}

Fabric open_fabric(const Config& cfg, const std::string& address) {
  FabricOptions fo;
  fo.provider = cfg.provider;
  fo.address = address;
  fo.busy_poll = cfg.busy_poll;
  auto fabric = Fabric::open(fo);
  if (!fabric) {
    std::string hint;
    if (fabric.error() == Errc::not_supported)
      hint = " (no such provider, or it has no MSG+RMA endpoint on that address; see remora-info)";
    throw PerfError("opening provider '" + cfg.provider + "' on " + address + ": " + msg(fabric.error()) + hint);
  }
  return std::move(*fabric);
}

// ---- receives and control messages -----------------------------------------------

/// `per_ep` posted receives of `size` bytes on each of a set of endpoints,
/// posted again as they complete (their completions arrive on `cq`). The
/// server's in a send run; the client's too in a bidirectional send run.
class Receiver {
 public:
  void setup(ProtectionZone& zone, std::vector<Endpoint*> eps, CompletionQueue& cq, std::size_t size,
             std::size_t per_ep) {
    eps_ = std::move(eps);
    cq_ = &cq;
    size_ = size;
    per_ep_ = per_ep;
    const std::size_t total = per_ep_ * eps_.size();
    mem_ = allocate(total * size_);
    auto mr = zone.register_memory(mem_.get(), total * size_, Access::local_write);
    if (!mr) throw PerfError("registering the receive buffers (" + size_text(total * size_) + "): " + msg(mr.error()));
    mr_ = std::move(*mr);
    for (std::size_t i = 0; i < total; ++i) post(i);
  }

  bool active() const { return cq_ != nullptr; }
  std::size_t per_endpoint() const { return per_ep_; }
  std::uint64_t received() const { return received_; }

  /// Takes the receive completions there are and posts their buffers again.
  void pump() {
    if (cq_ == nullptr) return;
    std::array<Completion, 32> comps;
    handle(std::span(comps.data(), cq_->poll(comps)));
  }

  /// pump(), waiting up to `timeout` for a first completion.
  void wait(std::chrono::milliseconds timeout) {
    std::array<Completion, 32> comps;
    auto n = cq_->wait(comps, timeout);
    if (!n) {
      if (n.error() != Errc::timeout) throw PerfError("waiting for receives: " + msg(n.error()));
      return;
    }
    handle(std::span(comps.data(), *n));
  }

 private:
  void handle(std::span<const Completion> comps) {
    for (const Completion& c : comps) {
      if (c.status == Errc::flushed) continue;  // the connection is closing
      if (c.status)
        std::fprintf(stderr, "remora-perf: warning: receive failed: %s\n", c.status.message().c_str());
      else
        ++received_;
      const auto slot = static_cast<std::size_t>(c.cookie);
      if (slot < per_ep_ * eps_.size()) post(slot);
    }
  }

  void post(std::size_t slot) {
    Endpoint& ep = *eps_[slot / per_ep_];
    if (ep.state() != EndpointState::connected) return;  // leaving
    const Segment seg(mr_, slot * size_, size_);
    if (auto r = ep.recv(std::span(&seg, 1), slot); !r && ep.state() == EndpointState::connected)
      throw PerfError("posting a receive: " + msg(r.error()));
  }

  std::vector<Endpoint*> eps_;
  CompletionQueue* cq_ = nullptr;
  std::size_t size_ = 0;
  std::size_t per_ep_ = 0;
  std::uint64_t received_ = 0;
  Buffer mem_;
  MemoryRegion mr_;
};

/// The control connection of a bidirectional run: Control messages, sent
/// and received with Remora sends on their own endpoint and queue.
class ControlChannel {
 public:
  void setup(ProtectionZone& zone, Endpoint& ep, CompletionQueue& cq) {
    ep_ = &ep;
    cq_ = &cq;
    mem_ = allocate(kControlSlot * (kControlRecvs + 1));
    auto mr =
        zone.register_memory(mem_.get(), kControlSlot * (kControlRecvs + 1), Access::local_read | Access::local_write);
    if (!mr) throw PerfError("registering the control buffers: " + msg(mr.error()));
    mr_ = std::move(*mr);
    for (std::size_t i = 0; i < kControlRecvs; ++i) post_recv(i);
  }

  bool active() const { return ep_ != nullptr; }

  /// Sends `c` and waits for its completion (pumping `rx` meanwhile).
  void send(const Control& c, Receiver* rx) {
    std::memcpy(mem_.get() + kControlRecvs * kControlSlot, &c, sizeof c);
    const Segment seg(mr_, kControlRecvs * kControlSlot, sizeof c);
    if (auto r = ep_->send(std::span(&seg, 1), kSendCookie); !r)
      throw PerfError("sending a control message: " + msg(r.error()));
    const std::uint64_t deadline = now_ns() + 10'000'000'000ULL;
    while (!send_done_) {
      poll_once(rx, std::chrono::milliseconds(1));
      if (now_ns() > deadline) throw PerfError("a control message was not delivered within 10 s");
    }
    send_done_ = false;
  }

  /// A received message, if one is waiting (pumping `rx`, waiting up to
  /// `timeout` for one).
  std::optional<Control> poll(Receiver* rx, std::chrono::milliseconds timeout) {
    if (received_.empty()) poll_once(rx, timeout);
    if (received_.empty()) return std::nullopt;
    const Control c = received_.front();
    received_.erase(received_.begin());
    return c;
  }

  /// Waits up to `timeout` for a message of `type`.
  Control wait(ControlType type, std::chrono::nanoseconds timeout, Receiver* rx, const std::string& what) {
    const std::uint64_t deadline = now_ns() + static_cast<std::uint64_t>(timeout.count());
    while (true) {
      if (auto c = poll(rx, std::chrono::milliseconds(1))) {
        if (c->type != type) throw PerfError(what + ": unexpected control message");
        return *c;
      }
      if (now_ns() > deadline) throw PerfError(what + ": no answer on the control connection");
      if (ep_->state() != EndpointState::connected)
        throw PerfError(what + ": the control connection is gone (" + to_string(ep_->state()) + ")");
    }
  }

 private:
  static constexpr std::uint64_t kSendCookie = ~std::uint64_t{0};

  void poll_once(Receiver* rx, std::chrono::milliseconds timeout) {
    std::array<Completion, 8> comps;
    std::size_t n = 0;
    if (rx != nullptr && rx->active()) {
      rx->pump();
      n = cq_->poll(comps);  // spin: the data receives need us
    } else {
      auto r = cq_->wait(comps, timeout);
      if (!r && r.error() != Errc::timeout) throw PerfError("waiting for a control message: " + msg(r.error()));
      n = r ? *r : 0;
    }
    for (std::size_t i = 0; i < n; ++i) {
      const Completion& c = comps[i];
      if (c.status == Errc::flushed) continue;
      if (c.status) throw PerfError("control connection: " + c.status.message());
      if (c.cookie == kSendCookie) {
        send_done_ = true;
        continue;
      }
      const auto slot = static_cast<std::size_t>(c.cookie);
      if (slot >= kControlRecvs) continue;
      Control m;
      std::memcpy(&m, mem_.get() + slot * kControlSlot, sizeof m);
      if (c.length < sizeof m || m.magic != kControlMagic) throw PerfError("malformed control message");
      received_.push_back(m);
      post_recv(slot);
    }
  }

  void post_recv(std::size_t slot) {
    if (ep_->state() != EndpointState::connected) return;
    const Segment seg(mr_, slot * kControlSlot, kControlSlot);
    if (auto r = ep_->recv(std::span(&seg, 1), slot); !r && ep_->state() == EndpointState::connected)
      throw PerfError("posting a control receive: " + msg(r.error()));
  }

  Endpoint* ep_ = nullptr;
  CompletionQueue* cq_ = nullptr;
  Buffer mem_;
  MemoryRegion mr_;
  std::vector<Control> received_;
  bool send_done_ = false;
};

// ---- the measured loop ---------------------------------------------------------

/// Issues one operation over a set of connections, `qd` outstanding on each
/// (slot s on connection s % connections), timing each from post to
/// completion: the client's side of every run, and the server's in a
/// bidirectional run.
class Issuer {
 public:
  void setup(Op op, unsigned qd, std::vector<Endpoint*> eps, CompletionQueue& cq, MemoryRegion& local,
             const RemoteRegion& target, Receiver* rx, std::string_view side) {
    op_ = op;
    qd_ = qd;
    eps_ = std::move(eps);
    cq_ = &cq;
    local_ = &local;
    target_ = target;
    rx_ = rx;
    side_ = side;
  }

  /// Writes and reads walk the target, each at the offset after the last
  /// one's (from 0 again at its end), when it is longer than `largest`, the
  /// largest size of the run (a server's --target-span); otherwise each is
  /// at offset 0.
  void walk(std::size_t largest) { walk_ = target_.length() > largest; }

  unsigned slots() const { return qd_ * static_cast<unsigned>(eps_.size()); }

  /// --wait: with nothing completed, sleep in poll(2) on the queue's fd
  /// (event-driven, as librpma and DAT programs waiting on a completion
  /// channel do) instead of polling again at once.
  void set_wait(bool wait) {
    wait_fd_ = -1;
    if (wait) wait_fd_ = cq_->fd();
  }

  /// Runs `iters` operations. With budget_ns non-zero, stops posting once
  /// that much time passed and at least min_done operations completed.
  /// Prints progress lines after `progress_after_ns` (0: never); with
  /// `duration` (-D) they count time.
  Measurement measure(std::size_t size, std::uint64_t iters, std::uint64_t budget_ns, std::uint64_t min_done,
                      bool measured, std::uint64_t progress_after_ns = 0, double duration = 0) {
    const unsigned slots = this->slots();
    std::vector<std::uint64_t> t_post(slots, 0);
    std::vector<std::uint32_t> free_slots;
    free_slots.reserve(slots);
    for (unsigned i = slots; i-- > 0;) free_slots.push_back(i);

    Measurement m;
    m.size = size;
    m.qd = qd_;
    if (measured) m.lat_ns.reserve(std::min<std::uint64_t>(iters, std::uint64_t{1} << 22));

    std::uint64_t posted = 0, done = 0;
    const double cpu_start = tools::cpu_seconds();
    const tools::HostTicks host_start = tools::host_ticks();
    const std::uint64_t t_start = now_ns();
    std::uint64_t t_last = t_start;
    std::uint64_t next_report = progress_after_ns != 0 ? t_start + progress_after_ns : UINT64_MAX;
    // A stall: no completion for 10 s, plus the time one operation may take
    // at a pessimistic 20 MB/s (a persistent flush of a large range).
    const std::uint64_t stall_ns =
        static_cast<std::uint64_t>(std::chrono::nanoseconds(kStallTimeout).count()) + size / 20 * 1000;
    std::uint64_t empty_polls = 0;
    std::uint64_t limit = iters;
    std::array<Completion, 64> comps;
    // --wait: this thread drives the queue each time it wakes (poll()), so
    // the zone's agent leaves the endpoints to it.
    const auto asleep = wait_fd_ >= 0 ? cq_->sleeper() : CompletionQueue::Sleeper();

    while (done < limit || done < posted) {
      while (posted < limit && !free_slots.empty()) {
        const std::uint32_t slot = free_slots.back();
        const std::uint64_t t = now_ns();
        if (!post(slot, size, posted)) break;  // request queue full: reap first
        t_post[slot] = t;
        free_slots.pop_back();
        ++posted;
      }
      if (rx_ != nullptr) rx_->pump();
      const std::size_t n = cq_->poll(comps);
      if (n > 0) {
        const std::uint64_t t = now_ns();
        for (std::size_t i = 0; i < n; ++i) {
          const Completion& c = comps[i];
          if (c.status) {
            const bool write_half = (c.cookie & kWriteTag) != 0;
            throw PerfError(std::string(side_) + ": " + std::string(op_name(op_)) + " of " + size_text(size) +
                            " failed" + (write_half ? " (its write)" : "") + ": " + c.status.message() + " (" +
                            states() + ")");
          }
          if ((c.cookie & kWriteTag) != 0 || c.cookie >= slots) continue;  // not ours to count
          const auto slot = static_cast<std::uint32_t>(c.cookie);
          if (measured) m.lat_ns.push_back(t - t_post[slot]);
          free_slots.push_back(slot);
          ++done;
        }
        t_last = t;
        empty_polls = 0;
        if (budget_ns != 0 && t - t_start >= budget_ns && done >= min_done) limit = posted;
        if (t >= next_report && done < limit) {
          print_progress("remora-perf", op_name(op_), size, done, limit, static_cast<double>(t - t_start) / 1e9,
                         duration);
          next_report = t + 1'000'000'000;
        }
      } else {
        // --wait: sleep on the queue's fd; the checks below then follow
        // every sleep instead of every 1024th empty poll.
        const bool slept = wait_fd_ >= 0 && posted > done;
        if (slept) {
          pollfd pfd{wait_fd_, POLLIN, 0};
          (void)::poll(&pfd, 1, 100);
        }
        if (!slept && ++empty_polls % 1024 != 0) continue;
        const std::uint64_t t = now_ns();
        if (t - t_last > stall_ns)
          throw PerfError(std::string(side_) + ": " + std::string(op_name(op_)) + " of " + size_text(size) +
                          ": no completion for " + std::to_string(stall_ns / 1'000'000'000) + " s (" +
                          std::to_string(posted - done) + " outstanding, " + states() + ")");
        for (Endpoint* ep : eps_) {
          const EndpointState st = ep->state();
          if (st != EndpointState::connected && cq_->size() == 0)
            throw PerfError(std::string(side_) + ": the connection is gone (endpoint " + std::string(to_string(st)) +
                            ") during " + std::string(op_name(op_)) + " of " + size_text(size));
        }
      }
    }
    m.iters = done;
    m.seconds = static_cast<double>(t_last - t_start) / 1e9;
    m.cpu_seconds = tools::cpu_seconds() - cpu_start;
    m.steal_pct = tools::steal_percent(host_start, tools::host_ticks());
    return m;
  }

 private:
  std::string states() const {
    std::string out = "endpoint";
    for (const Endpoint* ep : eps_) out += std::string(" ") + to_string(ep->state());
    return out;
  }

  /// Posts the operation(s) of one iteration. False when the request queue
  /// is full (nothing was posted).
  bool post(std::uint32_t slot, std::size_t size, std::uint64_t seq) {
    Endpoint& ep = *eps_[slot % eps_.size()];
    const Segment seg(*local_, 0, size);
    const std::span<const Segment> src(&seg, 1);
    const std::uint64_t at = walk_ ? seq % (target_.length() / size) * size : 0;
    Result<void> r;
    switch (op_) {
      case Op::write: r = ep.write(src, target_, at, slot); break;
      case Op::read: r = ep.read(src, target_, at, slot); break;
      case Op::send: r = ep.send(src, slot); break;
      case Op::atomic_write: r = ep.atomic_write(target_, 0, seq, slot); break;
      case Op::write_flush_visibility:
      case Op::write_flush_persistent: {
        r = ep.write(src, target_, 0, kWriteTag | slot, PostFlags::unsignalled);
        if (!r) break;
        const FlushType type = op_ == Op::write_flush_persistent ? FlushType::persistent : FlushType::visibility;
        r = ep.flush(target_, 0, size, type, slot);
        if (!r) throw PerfError("posting the flush of " + size_text(size) + " after its write: " + msg(r.error()));
        break;
      }
    }
    if (r) return true;
    if (r.error() == Errc::queue_full) return false;
    throw PerfError(std::string(side_) + ": posting " + std::string(op_name(op_)) + " of " + size_text(size) + ": " +
                    msg(r.error()) + " (endpoint " + to_string(ep.state()) + ")");
  }

  Op op_ = Op::write;
  unsigned qd_ = 1;
  std::vector<Endpoint*> eps_;
  CompletionQueue* cq_ = nullptr;
  int wait_fd_ = -1;
  MemoryRegion* local_ = nullptr;
  RemoteRegion target_;
  bool walk_ = false;
  Receiver* rx_ = nullptr;
  std::string_view side_;
};

/// Receives per connection for messages of `size` at queue depth `qd`
/// over `connections` connections: two per outstanding send, at most 256,
/// and at most 256 MiB in all (but two at least).
std::size_t receives_per_connection(std::size_t size, unsigned qd, unsigned connections) {
  const std::size_t by_memory = (std::size_t{256} << 20) / size / std::max(connections, 1u);
  return std::clamp<std::size_t>(2 * std::size_t{std::max(qd, 1u)}, 2,
                                 std::max<std::size_t>(2, std::min<std::size_t>(256, by_memory)));
}

std::string libfabric_version() {
  const std::uint32_t v = fi_version();
  return std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v));
}

// ---- client ------------------------------------------------------------------

class Client {
 public:
  explicit Client(const Config& cfg)
      : cfg_(cfg), max_size_(*std::max_element(cfg.sizes.begin(), cfg.sizes.end())), bidir_(cfg.bidirectional) {}

  void run() {
    connect_all();
    const std::string_view completion = completion_name(cfg_.op);
    Report report({kEngine, op_name(cfg_.op), completion}, cfg_.qd, cfg_.json, cfg_.report_gbits);
    RunSettings rs{"remora-perf",
                   kEngine,
                   kRemoraVersion,
                   libfabric_version(),
                   address_,
                   completion,
                   server_busy_poll_ ? "busy-poll" : "asleep"};
    JsonObject settings = common_settings(cfg_, rs);
    settings.str("client_agent", cfg_.busy_poll ? "busy-poll" : "asleep");
    report.set_settings(settings.text());
    JsonObject extra;
    extra.integer("connections", cfg_.connections).boolean("bidirectional", bidir_);
    extra.num("setup_ms_per_connection", setup_mean_ms()).num("setup_ms_max", setup_max_ms());
    extra.num("setup_ms_total", setup_total_ms());
    report.set_extra(extra.members());
    report.begin();
    if (cfg_.connections > 1 || bidir_) {
      char line[256];
      std::snprintf(line, sizeof line,
                    "%u connection%s%s: set-up %.2f ms per connection on average (max %.2f ms, total %.2f ms)%s",
                    cfg_.connections, cfg_.connections == 1 ? "" : "s", bidir_ ? " + 1 control" : "", setup_mean_ms(),
                    setup_max_ms(), setup_total_ms(),
                    bidir_ ? "; bidirectional: bandwidth and Mops are both directions' sum, latency the client's" : "");
      report.note(line);
    }
    for (const std::size_t size : cfg_.sizes) {
      Measurement m;
      const std::uint64_t after = static_cast<std::uint64_t>(std::chrono::nanoseconds(kProgressAfter).count());
      if (cfg_.duration != 0) {
        // -D: a short time-bounded warm-up, then the run for that long.
        (void)phase(size, kMaxIters, seconds_ns(warmup_seconds(cfg_.duration)), 1, false, 0);
        m = phase(size, kMaxIters, seconds_ns(cfg_.duration), 1, true, after);
      } else if (cfg_.iters != 0) {
        // Fixed count (what bench/compare.sh uses): the warm-up of remora-bench-raw.
        (void)phase(size, warmup_iters(cfg_.iters), 0, 0, false, 0);
        m = phase(size, cfg_.iters, 0, 0, true, after);
      } else {
        // Calibrated: the warm-up measures the rate; the run aims at
        // kTargetSeconds and stops posting at kMaxSeconds (at least `floor`).
        // Progress lines only if it overruns its budget by a second.
        const std::uint64_t floor = min_iters();
        const std::uint64_t iters = calibrate(size, floor);
        m = phase(size, iters, seconds_ns(kMaxSeconds), floor, true, seconds_ns(kMaxSeconds) + 1'000'000'000);
      }
      report.add(m);
    }
    for (auto& ep : eps_)
      if (auto r = ep.disconnect(); !r) throw PerfError("disconnecting: " + msg(r.error()));
    if (ctl_ep_.valid())
      if (auto r = ctl_ep_.disconnect(); !r) throw PerfError("disconnecting the control connection: " + msg(r.error()));
    if (!cfg_.plot.empty()) write_plot(report.rows());
  }

 private:
  /// One run of `size` (the warm-ups too); in a bidirectional run the
  /// server does the same run towards us at the same time.
  Measurement phase(std::size_t size, std::uint64_t iters, std::uint64_t budget_ns, std::uint64_t min_done,
                    bool measured, std::uint64_t progress_after_ns) {
    if (bidir_) {
      Control c;
      c.type = ControlType::run;
      c.size = size;
      c.iters = iters;
      c.budget_ns = budget_ns;
      c.min_done = min_done;
      ctl_.send(c, &rx_);
    }
    Measurement m = issuer_.measure(size, iters, budget_ns, min_done, measured, progress_after_ns, cfg_.duration);
    if (bidir_) {
      // The server's run lasts about as long as ours: allow twice that, and
      // a stall's time on top.
      const std::uint64_t stall = static_cast<std::uint64_t>(std::chrono::nanoseconds(kStallTimeout).count());
      const std::uint64_t ours = static_cast<std::uint64_t>(m.seconds * 1e9);
      const Control done =
          ctl_.wait(ControlType::done, std::chrono::nanoseconds(budget_ns + 2 * ours + 2 * stall + size / 20 * 1000),
                    &rx_, "waiting for the server's half of size " + std::to_string(size));
      m.has_peer = true;
      m.peer_iters = done.iters;
      m.peer_seconds = static_cast<double>(done.seconds_ns) / 1e9;
    }
    return m;
  }

  void connect_all() {
    address_ = cfg_.address.empty() ? local_address_towards(cfg_.host, cfg_.port) : cfg_.address;
    fabric_ = open_fabric(cfg_, address_);
    auto zone = fabric_.create_zone();
    if (!zone) throw PerfError("creating a protection zone: " + msg(zone.error()));
    zone_ = std::move(*zone);
    const unsigned n = cfg_.connections;
    auto cq = zone_.create_cq(2 * cfg_.qd * n + 64);
    if (!cq) throw PerfError("creating a completion queue: " + msg(cq.error()));
    cq_ = std::move(*cq);

    local_ = allocate(max_size_);
    auto mr = zone_.register_memory(local_.get(), max_size_, Access::local_read | Access::local_write);
    if (!mr) throw PerfError("registering " + size_text(max_size_) + " of local memory: " + msg(mr.error()));
    local_mr_ = std::move(*mr);

    const bool bidir_send = bidir_ && cfg_.op == Op::send;
    const std::size_t nrecv = bidir_send ? receives_per_connection(max_size_, cfg_.qd, n) : 0;
    if (bidir_send) {
      auto rcq = zone_.create_cq(static_cast<std::uint32_t>(nrecv * n + 64));
      if (!rcq) throw PerfError("creating the receive queue: " + msg(rcq.error()));
      rcq_ = std::move(*rcq);
    }
    if (bidir_ && !bidir_send) {
      // The buffer the server writes to and reads from.
      peer_mem_ = allocate(max_size_);
      auto pmr = zone_.register_memory(peer_mem_.get(), max_size_, Access::remote_read | Access::remote_write);
      if (!pmr) throw PerfError("registering " + size_text(max_size_) + " for the server: " + msg(pmr.error()));
      peer_mr_ = std::move(*pmr);
    }

    eps_.reserve(n);
    for (unsigned i = 0; i < n; ++i) {
      EndpointOptions eo;
      eo.send_cq = &cq_;
      eo.max_outstanding = 2 * cfg_.qd + 8;  // write+flush holds two per iteration
      if (bidir_send) {
        eo.recv_cq = &rcq_;
        eo.max_recv = static_cast<std::uint32_t>(nrecv);
        eo.max_message = static_cast<std::uint32_t>(std::max<std::size_t>(max_size_, 4096));
      } else {
        eo.max_recv = 64;
        eo.max_message = 4096;  // the client receives only control replies
      }
      Request req;
      req.index = static_cast<std::uint16_t>(i);
      eps_.push_back(connect_one(eo, req, "connection " + std::to_string(i + 1) + "/" + std::to_string(n)));
    }
    if (bidir_) {
      auto ccq = zone_.create_cq(64);
      if (!ccq) throw PerfError("creating the control queue: " + msg(ccq.error()));
      ctl_cq_ = std::move(*ccq);
      const EndpointOptions eo = control_endpoint_options(ctl_cq_);
      Request req;
      req.flags = kControl;
      req.index = static_cast<std::uint16_t>(n);
      std::vector<std::uint8_t> extra;
      if (peer_mr_.valid()) {
        const auto d = peer_mr_.remote()->serialize();
        extra.assign(d.begin(), d.end());
      }
      ctl_ep_ = connect_one(eo, req, "the control connection", extra);
      ctl_.setup(zone_, ctl_ep_, ctl_cq_);
    }
    std::vector<Endpoint*> ptrs;
    for (auto& ep : eps_) ptrs.push_back(&ep);
    if (bidir_send) rx_.setup(zone_, ptrs, rcq_, max_size_, nrecv);
    issuer_.setup(cfg_.op, cfg_.qd, ptrs, cq_, local_mr_, target_, rx_.active() ? &rx_ : nullptr, "client");
    issuer_.walk(max_size_);
    issuer_.set_wait(cfg_.wait);
  }

  Endpoint connect_one(const EndpointOptions& eo, Request req, const std::string& what,
                       const std::vector<std::uint8_t>& extra = {}) {
    auto ep = zone_.create_endpoint(eo);
    if (!ep) {
      std::string why = "creating an endpoint";
      if (eo.max_message > 4096) why += " for messages of " + size_text(eo.max_message);
      throw PerfError(why + ": " + msg(ep.error()));
    }
    req.op = static_cast<std::uint8_t>(cfg_.op);
    req.flags |= bidir_ ? kBidirectional : 0;
    req.qd = cfg_.qd;
    req.connections = static_cast<std::uint16_t>(cfg_.connections);
    req.size = max_size_;
    std::vector<std::uint8_t> pd = bytes_of(req);
    pd.insert(pd.end(), extra.begin(), extra.end());
    const std::string where = cfg_.host + ":" + std::to_string(cfg_.port) + " (" + what + ")";
    const std::uint64_t t0 = now_ns();
    if (auto r = ep->connect(cfg_.host, cfg_.port, pd); !r)
      throw PerfError("connecting to " + where + ": " + msg(r.error()));
    auto ev = ep->next_event(kConnectTimeout);
    if (!ev) {
      throw PerfError("connecting to " + where + ": no answer within " +
                      std::to_string(kConnectTimeout.count() / 1000) + " s (" + msg(ev.error()) + ")");
    }
    switch (ev->type) {
      case ConnectionEventType::established: break;
      case ConnectionEventType::rejected: {
        const auto& d = ev->private_data;
        std::string why = "the server rejected the connection";
        if (d.size() >= kRejectMagic.size() && std::equal(kRejectMagic.begin(), kRejectMagic.end(), d.begin()))
          why += ": " + std::string(d.begin() + kRejectMagic.size(), d.end());
        throw PerfError("connecting to " + where + ": " + why);
      }
      case ConnectionEventType::unreachable:
        throw PerfError("connecting to " + where +
                        ": refused or unreachable (is a remora-perf server listening on that address and port?)");
      default: throw PerfError("connecting to " + where + ": unexpected event " + std::string(to_string(ev->type)));
    }
    if ((req.flags & kControl) == 0) setup_ms_.push_back(static_cast<double>(now_ns() - t0) / 1e6);
    if ((req.flags & kControl) == 0 && req.index == 0) parse_reply(ev->private_data, where);
    return std::move(*ep);
  }

  void parse_reply(const std::vector<std::uint8_t>& d, const std::string& where) {
    ReplyHeader h;
    if (d.size() < sizeof h) throw PerfError(where + ": the server sent no region descriptor (not remora-perf?)");
    std::memcpy(&h, d.data(), sizeof h);
    if (h.magic != kReplyMagic || h.version != kVersion)
      throw PerfError(where + ": the server is not a remora-perf server of this version");
    const std::size_t need = sizeof h + std::size_t{h.regions} * RemoteRegion::kSerializedSize;
    if (h.regions < 1 || d.size() < need) throw PerfError(where + ": truncated server reply");
    server_busy_poll_ = (h.flags & kServerBusyPoll) != 0;
    std::vector<RemoteRegion> regions;
    for (std::size_t i = 0; i < h.regions; ++i) {
      auto r = RemoteRegion::parse(
          std::span(d).subspan(sizeof h + i * RemoteRegion::kSerializedSize, RemoteRegion::kSerializedSize));
      if (!r) throw PerfError(where + ": bad region descriptor from the server: " + msg(r.error()));
      regions.push_back(*r);
    }
    target_ = regions[0];
    if (cfg_.op == Op::write_flush_persistent) {
      if (regions.size() < 2 || !regions[1].persistent())
        throw PerfError(where + ": the server offered no persistent region");
      target_ = regions[1];
    }
    if (target_.length() < max_size_)
      throw PerfError(where + ": the server's region (" + size_text(target_.length()) + ") is smaller than --size");
  }

  /// Smallest default iteration count: 1000 for latency ops, else 4 per slot.
  std::uint64_t min_iters() const {
    return op_is_latency(cfg_.op) ? 1000 : std::max<std::uint64_t>(16, 4 * std::uint64_t{issuer_.slots()});
  }

  /// Warm-up that also measures the rate; returns the iteration count for
  /// about kTargetSeconds.
  std::uint64_t calibrate(std::size_t size, std::uint64_t floor) {
    const Measurement w = phase(size, kMaxIters, seconds_ns(kWarmupSeconds), 16, false, 0);
    const double rate = w.seconds > 0 ? static_cast<double>(w.iters) / w.seconds : 1e6;
    const auto want = static_cast<std::uint64_t>(rate * kTargetSeconds);
    return std::clamp<std::uint64_t>(want, floor, kDefaultItersCap);
  }

  double setup_total_ms() const {
    double t = 0;
    for (const double v : setup_ms_) t += v;
    return t;
  }
  double setup_mean_ms() const {
    return setup_ms_.empty() ? 0 : setup_total_ms() / static_cast<double>(setup_ms_.size());
  }
  double setup_max_ms() const { return setup_ms_.empty() ? 0 : *std::max_element(setup_ms_.begin(), setup_ms_.end()); }

  void write_plot(const std::vector<Row>& rows) const {
    plot::Series series;
    series.name =
        std::string(kEngine) + " " + std::string(op_name(cfg_.op)) + " (" + std::string(completion_name(cfg_.op)) + ")";
    if (cfg_.connections > 1) series.name += ", " + std::to_string(cfg_.connections) + " connections";
    if (bidir_) series.name += ", bidirectional";
    for (const Row& r : rows)
      series.points.push_back(
          {static_cast<double>(r.size), cfg_.report_gbits ? r.summary.gbits : r.summary.gbps, r.summary.p50_us});
    plot::PlotOptions po;
    po.title = cfg_.plot_title.empty() ? "remora-perf " + std::string(op_name(cfg_.op)) + ", qd " +
                                             std::to_string(cfg_.qd) + ", provider " + cfg_.provider
                                       : cfg_.plot_title;
    po.bandwidth_unit = cfg_.report_gbits ? "Gb/s" : "GB/s";
    write_text_file(cfg_.plot, plot::render_svg({series}, po));
  }

  const Config& cfg_;
  const std::size_t max_size_;
  const bool bidir_;
  std::string address_;
  bool server_busy_poll_ = false;
  std::vector<double> setup_ms_;
  // Declaration order is teardown order reversed: the endpoints go first,
  // then the regions, then the memory under them.
  Fabric fabric_;
  ProtectionZone zone_;
  CompletionQueue cq_;
  CompletionQueue rcq_;
  CompletionQueue ctl_cq_;
  Buffer local_;
  Buffer peer_mem_;
  MemoryRegion local_mr_;
  MemoryRegion peer_mr_;
  Receiver rx_;
  ControlChannel ctl_;
  std::vector<Endpoint> eps_;
  Endpoint ctl_ep_;
  RemoteRegion target_;
  Issuer issuer_;
};

// ---- server ------------------------------------------------------------------

class Server {
 public:
  explicit Server(const Config& cfg) : cfg_(cfg) {}

  void run() {
    listen();
    accept_all();
    serve();
  }

 private:
  void listen() {
    const std::string address = cfg_.listen_address();
    fabric_ = open_fabric(cfg_, address);
    auto zone = fabric_.create_zone();
    if (!zone) throw PerfError("creating a protection zone: " + msg(zone.error()));
    zone_ = std::move(*zone);
    auto lis = zone_.listen(address, cfg_.port);
    if (!lis) {
      std::string hint = lis.error() == Errc::address_in_use ? " (is another server running there?)" : "";
      throw PerfError("listening on " + address + ":" + std::to_string(cfg_.port) + ": " + msg(lis.error()) + hint);
    }
    listener_ = std::move(*lis);
    std::fprintf(stderr, "remora-perf: server listening on %s:%u (provider %s, interface %s, target agent %s)\n",
                 address.c_str(), static_cast<unsigned>(listener_.port()), fabric_.info().provider.c_str(),
                 fabric_.info().domain_name.c_str(), cfg_.busy_poll ? "busy-polling" : "asleep when idle");
    std::fflush(stderr);
  }

  // Accepts the client's connections: `connections` data connections, then
  // the control connection of a bidirectional run. Rejecting the client
  // (bad request, not enough resources) ends the run with an error, after
  // telling the client why.
  void accept_all() {
    std::uint64_t t0 = 0;
    while (true) {
      const bool first = eps_.empty();
      auto req = listener_.next_request(first ? kAcceptWait : kConnectTimeout);
      if (!req) {
        if (req.error() == Errc::timeout)
          throw PerfError(first ? "no client connected within " + std::to_string(kAcceptWait.count() / 1000) + " s"
                                : "the client stopped connecting after " + std::to_string(eps_.size()) +
                                      " connection(s)");
        throw PerfError("waiting for a connection: " + msg(req.error()));
      }
      if (first) t0 = now_ns();
      Request r;
      const auto& pd = req->private_data();
      if (pd.size() < sizeof r)
        return reject(*req, "connection request without benchmark parameters (not remora-perf?)");
      std::memcpy(&r, pd.data(), sizeof r);
      if (r.magic != kRequestMagic || r.version != kVersion)
        return reject(*req, "connection request from another program or remora-perf version");
      if (first) configure(*req, r);
      const bool control = (r.flags & kControl) != 0;
      if (r.op != static_cast<std::uint8_t>(op_) || r.size != size_ || r.connections != connections_ ||
          ((r.flags & kBidirectional) != 0) != bidir_ || r.index != eps_.size() ||
          control != (eps_.size() == connections_))
        return reject(*req, "connection request out of order or not matching the first one");
      if (control) {
        accept_control(*req, r, pd);
        break;
      }
      accept_data(*req);
      if (eps_.size() == connections_ && !bidir_) break;
    }
    std::vector<Endpoint*> ptrs;
    for (auto& ep : eps_) ptrs.push_back(&ep);
    if (op_ == Op::send) rx_.setup(zone_, ptrs, rcq_, size_, nrecv_);
    if (bidir_) {
      local_mem_ = allocate(size_);
      auto mr = zone_.register_memory(local_mem_.get(), size_, Access::local_read | Access::local_write);
      if (!mr) throw PerfError("registering the server's own buffer: " + msg(mr.error()));
      local_mr_ = std::move(*mr);
      issuer_.setup(op_, qd_, ptrs, scq_, local_mr_, peer_target_, rx_.active() ? &rx_ : nullptr, "server");
    }
    std::string what = std::to_string(connections_) + " connection" + (connections_ == 1 ? "" : "s");
    if (bidir_) what += " + 1 control, bidirectional";
    if (connections_ > 1 || bidir_) what += " (set-up " + std::to_string((now_ns() - t0) / 1'000'000) + " ms in all)";
    std::fprintf(stderr, "remora-perf: client connected: op %.*s, buffer %s, %s%s%s\n",
                 static_cast<int>(op_name(op_).size()), op_name(op_).data(), size_text(size_).c_str(), what.c_str(),
                 op_ == Op::send ? (", " + std::to_string(nrecv_) + " receives posted per connection").c_str() : "",
                 backing_ ? (", persistent region in " + backing_->path).c_str() : "");
    std::fflush(stderr);
  }

  /// The first request sets up what every connection shares.
  void configure(ConnectionRequest& req, const Request& r) {
    if (r.op > static_cast<std::uint8_t>(Op::send)) return reject(req, "unknown operation in the request");
    op_ = static_cast<Op>(r.op);
    if (r.size == 0 || r.size > cfg_.size_max)
      return reject(
          req, "size " + std::to_string(r.size) + " is above the server's --size-max " + std::to_string(cfg_.size_max));
    if (r.connections == 0 || r.connections > Config::kMaxConnections)
      return reject(req, "bad connection count " + std::to_string(r.connections));
    if ((r.flags & kControl) != 0 || r.index != 0) return reject(req, "the first connection request is not the first");
    size_ = static_cast<std::size_t>(r.size);
    connections_ = r.connections;
    qd_ = std::max<std::uint32_t>(r.qd, 1);
    bidir_ = (r.flags & kBidirectional) != 0;
    if (bidir_ && op_ != Op::write && op_ != Op::read && op_ != Op::send)
      return reject(req, "bidirectional runs are for write, read and send");

    Result<MemoryRegion> mr = Errc::invalid_argument;
    // --target-span: a longer target, which the client's writes and reads
    // walk (Issuer::walk).
    const std::size_t target_len = std::max(size_, cfg_.target_span);
    if (cfg_.shared_target) {
      mr = zone_.allocate(target_len, Access::remote_read | Access::remote_write);
    } else {
      target_mem_ = allocate(target_len);
      mr = zone_.register_memory(target_mem_.get(), target_len, Access::remote_read | Access::remote_write);
    }
    if (!mr) return reject(req, "registering " + size_text(target_len) + ": " + msg(mr.error()));
    if (cfg_.target_span != 0 && !cfg_.shared_target) {
      const std::size_t huge = wait_huge_pages_settled(target_mem_.get());
      std::fprintf(stderr, "remora-perf: target %s, of which %s in huge pages\n", size_text(target_len).c_str(),
                   size_text(huge).c_str());
    }
    target_mr_ = std::move(*mr);
    regions_.push_back(*target_mr_.remote());

    if (op_ == Op::write_flush_persistent) {
      backing_ = std::make_unique<BackingFile>();
      auto pmr = zone_.map_file(backing_->path, size_, Access::remote_read | Access::remote_write);
      if (!pmr) return reject(req, "mapping " + backing_->path + ": " + msg(pmr.error()));
      persist_mr_ = std::move(*pmr);
      regions_.push_back(*persist_mr_.remote());
    }

    auto cq = zone_.create_cq(bidir_ ? 2 * qd_ * connections_ + 64 : 256);
    if (!cq) return reject(req, "creating a completion queue: " + msg(cq.error()));
    scq_ = std::move(*cq);
    if (op_ == Op::send) {
      nrecv_ = receives_per_connection(size_, qd_, connections_);
      auto rcq = zone_.create_cq(static_cast<std::uint32_t>(nrecv_ * connections_ + 64));
      if (!rcq) return reject(req, "creating the receive queue: " + msg(rcq.error()));
      rcq_ = std::move(*rcq);
    }
    eps_.reserve(connections_);
  }

  void accept_data(ConnectionRequest& req) {
    EndpointOptions eo;
    eo.send_cq = &scq_;
    eo.max_outstanding = bidir_ ? 2 * qd_ + 8 : 16;  // without --bidirectional the server posts nothing
    if (op_ == Op::send) {
      eo.recv_cq = &rcq_;
      eo.max_recv = static_cast<std::uint32_t>(nrecv_);
      eo.max_message = static_cast<std::uint32_t>(std::max<std::size_t>(size_, 4096));
    } else {
      eo.max_recv = 64;  // control requests (atomic write, flush)
      eo.max_message = 4096;
    }
    auto ep = zone_.create_endpoint(eo);
    if (!ep) {
      std::string what = "creating an endpoint";
      if (op_ == Op::send) what += " for messages of " + size_text(size_) + " (EndpointOptions::max_message)";
      return reject(req, what + ": " + msg(ep.error()));
    }
    ReplyHeader h;
    h.regions = static_cast<std::uint8_t>(regions_.size());
    h.flags = cfg_.busy_poll ? kServerBusyPoll : 0;
    std::vector<std::uint8_t> reply = bytes_of(h);
    for (const auto& rr : regions_) {
      const auto d = rr.serialize();
      reply.insert(reply.end(), d.begin(), d.end());
    }
    establish(req, *ep, reply);
    eps_.push_back(std::move(*ep));
  }

  void accept_control(ConnectionRequest& req, const Request& r, const std::vector<std::uint8_t>& pd) {
    (void)r;
    if (op_ != Op::send) {
      if (pd.size() < sizeof(Request) + RemoteRegion::kSerializedSize)
        return reject(req, "the control request has no client buffer");
      auto region = RemoteRegion::parse(std::span(pd).subspan(sizeof(Request), RemoteRegion::kSerializedSize));
      if (!region) return reject(req, "bad client buffer descriptor: " + msg(region.error()));
      if (region->length() < size_) return reject(req, "the client's buffer is smaller than its largest size");
      peer_target_ = *region;
    }
    auto cq = zone_.create_cq(64);
    if (!cq) return reject(req, "creating the control queue: " + msg(cq.error()));
    ctl_cq_ = std::move(*cq);
    const EndpointOptions eo = control_endpoint_options(ctl_cq_);
    auto ep = zone_.create_endpoint(eo);
    if (!ep) return reject(req, "creating the control endpoint: " + msg(ep.error()));
    ReplyHeader h;
    h.flags = cfg_.busy_poll ? kServerBusyPoll : 0;
    establish(req, *ep, bytes_of(h));
    ctl_ep_ = std::move(*ep);
    ctl_.setup(zone_, ctl_ep_, ctl_cq_);
  }

  void establish(ConnectionRequest& req, Endpoint& ep, const std::vector<std::uint8_t>& reply) {
    if (auto a = req.accept(ep, reply); !a) throw PerfError("accepting the connection: " + msg(a.error()));
    auto ev = ep.next_event(kEstablishTimeout);
    if (!ev) throw PerfError("accepting the connection: not established within 10 s (" + msg(ev.error()) + ")");
    if (ev->type != ConnectionEventType::established)
      throw PerfError("accepting the connection: " + std::string(to_string(ev->type)));
  }

  [[noreturn]] void reject(ConnectionRequest& req, const std::string& why) {
    (void)req.reject(reject_data(why));
    throw PerfError("rejected the client: " + why);
  }

  // Until the client leaves. Without --bidirectional only `send` needs the
  // server to do anything (every other operation is served by the zone's
  // target agent); with it, the server runs what the control connection
  // asks for.
  void serve() {
    std::vector<Endpoint*> open;
    for (auto& ep : eps_) open.push_back(&ep);
    if (ctl_ep_.valid()) open.push_back(&ctl_ep_);
    bool lost = false;
    std::uint64_t runs = 0;
    while (!open.empty()) {
      bool waited = false;
      if (bidir_ && ctl_ep_.state() == EndpointState::connected) {
        if (auto c = ctl_.poll(rx_.active() ? &rx_ : nullptr, std::chrono::milliseconds(20))) {
          serve_run(*c);
          ++runs;
        } else if (rx_.active()) {
          rx_.wait(1ms);  // between runs: the client's last messages
        }
        waited = true;
      } else if (rx_.active()) {
        rx_.wait(100ms);
        waited = true;
      }
      for (std::size_t i = 0; i < open.size();) {
        auto ev = open[i]->next_event(!waited && i == 0 ? 200ms : 0ms);
        waited = true;
        if (!ev) {
          if (ev.error() != Errc::timeout) throw PerfError("waiting for the client to leave: " + msg(ev.error()));
          ++i;
          continue;
        }
        if (ev->type == ConnectionEventType::disconnected || ev->type == ConnectionEventType::lost) {
          lost = lost || ev->type == ConnectionEventType::lost;
          open.erase(open.begin() + static_cast<std::ptrdiff_t>(i));
        } else {
          ++i;
        }
      }
    }
    std::fprintf(stderr, "remora-perf: client %s", lost ? "lost" : "disconnected");
    if (op_ == Op::send)
      std::fprintf(stderr, " (%llu messages received)", static_cast<unsigned long long>(rx_.received()));
    if (bidir_) std::fprintf(stderr, " (%llu runs of our own)", static_cast<unsigned long long>(runs));
    std::fputc('\n', stderr);
  }

  /// A bidirectional run: the same operation towards the client.
  void serve_run(const Control& c) {
    if (c.type != ControlType::run || c.size == 0 || c.size > size_ || c.iters == 0)
      throw PerfError("bad run request on the control connection");
    const Measurement m = issuer_.measure(static_cast<std::size_t>(c.size), c.iters, c.budget_ns, c.min_done, false);
    Control done;
    done.type = ControlType::done;
    done.size = c.size;
    done.iters = m.iters;
    done.seconds_ns = static_cast<std::uint64_t>(m.seconds * 1e9);
    ctl_.send(done, rx_.active() ? &rx_ : nullptr);
  }

  const Config& cfg_;
  Op op_ = Op::write;
  std::size_t size_ = 0;
  std::size_t nrecv_ = 0;
  unsigned connections_ = 1;
  unsigned qd_ = 1;
  bool bidir_ = false;
  std::vector<RemoteRegion> regions_;
  RemoteRegion peer_target_;
  Fabric fabric_;
  ProtectionZone zone_;
  Listener listener_;
  CompletionQueue scq_;
  CompletionQueue rcq_;
  CompletionQueue ctl_cq_;
  std::unique_ptr<BackingFile> backing_;
  Buffer target_mem_;
  Buffer local_mem_;
  MemoryRegion target_mr_;
  MemoryRegion persist_mr_;
  MemoryRegion local_mr_;
  Receiver rx_;
  ControlChannel ctl_;
  std::vector<Endpoint> eps_;
  Endpoint ctl_ep_;
  Issuer issuer_;
};

}  // namespace

void run_server(const Config& cfg) {
  Server server(cfg);
  server.run();
}

void run_client(const Config& cfg) {
  Client client(cfg);
  client.run();
}

void emergency_cleanup() noexcept { remove_backing_file(); }

}  // namespace remora::perf
