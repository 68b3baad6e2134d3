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
#include <sys/socket.h>
#include <unistd.h>

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
#include <memory>
#include <span>

#include "perf_report.hpp"

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
constexpr std::array<std::uint8_t, 4> kRejectMagic{'R', 'P', 'F', 'X'};
constexpr std::uint16_t kVersion = 1;

struct Request {
  std::uint32_t magic = kRequestMagic;
  std::uint16_t version = kVersion;
  std::uint8_t op = 0;
  std::uint8_t reserved = 0;
  std::uint32_t qd = 0;
  std::uint32_t reserved2 = 0;
  std::uint64_t size = 0;  // largest size the client will use
};
static_assert(sizeof(Request) == 24);

struct ReplyHeader {
  std::uint32_t magic = kReplyMagic;
  std::uint16_t version = kVersion;
  std::uint8_t regions = 0;
  std::uint8_t reserved = 0;
};
static_assert(sizeof(ReplyHeader) == 8);
static_assert(sizeof(ReplyHeader) + 2 * RemoteRegion::kSerializedSize <= kMaxPrivateData);

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

// ---- client ------------------------------------------------------------------

class Client {
 public:
  explicit Client(const Config& cfg) : cfg_(cfg), max_size_(*std::max_element(cfg.sizes.begin(), cfg.sizes.end())) {}

  void run() {
    connect();
    const Report report({kEngine, op_name(cfg_.op), completion_name(cfg_.op)}, cfg_.qd, cfg_.json);
    report.begin();
    for (const std::size_t size : cfg_.sizes) {
      Measurement m;
      if (cfg_.iters != 0) {
        // Fixed count (what bench/compare.sh uses): the warm-up of remora-bench-raw.
        (void)measure(size, warmup_iters(cfg_.iters), 0, 0, false);
        m = measure(size, cfg_.iters, 0, 0, true);
      } else {
        // Calibrated: the warm-up measures the rate; the run aims at
        // kTargetSeconds and stops posting at kMaxSeconds (at least `floor`).
        const std::uint64_t floor = min_iters();
        const std::uint64_t iters = calibrate(size, floor);
        m = measure(size, iters, seconds_ns(kMaxSeconds), floor, true);
      }
      report.add(m);
    }
    if (auto r = ep_.disconnect(); !r) throw PerfError("disconnecting: " + msg(r.error()));
  }

 private:
  void connect() {
    const std::string address = cfg_.address.empty() ? local_address_towards(cfg_.host, cfg_.port) : cfg_.address;
    fabric_ = open_fabric(cfg_, address);
    auto zone = fabric_.create_zone();
    if (!zone) throw PerfError("creating a protection zone: " + msg(zone.error()));
    zone_ = std::move(*zone);
    auto cq = zone_.create_cq(2 * cfg_.qd + 64);
    if (!cq) throw PerfError("creating a completion queue: " + msg(cq.error()));
    cq_ = std::move(*cq);

    local_ = allocate(max_size_);
    auto mr = zone_.register_memory(local_.get(), max_size_, Access::local_read | Access::local_write);
    if (!mr) throw PerfError("registering " + size_text(max_size_) + " of local memory: " + msg(mr.error()));
    local_mr_ = std::move(*mr);

    EndpointOptions eo;
    eo.send_cq = &cq_;
    eo.max_outstanding = 2 * cfg_.qd + 8;  // write+flush holds two per iteration
    eo.max_recv = 64;
    eo.max_message = 4096;  // the client receives only control replies
    auto ep = zone_.create_endpoint(eo);
    if (!ep) throw PerfError("creating an endpoint: " + msg(ep.error()));
    ep_ = std::move(*ep);

    Request req;
    req.op = static_cast<std::uint8_t>(cfg_.op);
    req.qd = cfg_.qd;
    req.size = max_size_;
    const std::string where = cfg_.host + ":" + std::to_string(cfg_.port);
    if (auto r = ep_.connect(cfg_.host, cfg_.port, bytes_of(req)); !r)
      throw PerfError("connecting to " + where + ": " + msg(r.error()));
    auto ev = ep_.next_event(kConnectTimeout);
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
    parse_reply(ev->private_data, where);
  }

  void parse_reply(const std::vector<std::uint8_t>& d, const std::string& where) {
    ReplyHeader h;
    if (d.size() < sizeof h) throw PerfError(where + ": the server sent no region descriptor (not remora-perf?)");
    std::memcpy(&h, d.data(), sizeof h);
    if (h.magic != kReplyMagic || h.version != kVersion)
      throw PerfError(where + ": the server is not a remora-perf server of this version");
    const std::size_t need = sizeof h + std::size_t{h.regions} * RemoteRegion::kSerializedSize;
    if (h.regions < 1 || d.size() < need) throw PerfError(where + ": truncated server reply");
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

  /// Posts the operation(s) of one iteration. False when the request queue
  /// is full (nothing was posted).
  bool post(std::uint32_t slot, std::size_t size, std::uint64_t seq) {
    const Segment seg(local_mr_, 0, size);
    const std::span<const Segment> src(&seg, 1);
    Result<void> r;
    switch (cfg_.op) {
      case Op::write: r = ep_.write(src, target_, 0, slot); break;
      case Op::read: r = ep_.read(src, target_, 0, slot); break;
      case Op::send: r = ep_.send(src, slot); break;
      case Op::atomic_write: r = ep_.atomic_write(target_, 0, seq, slot); break;
      case Op::write_flush_visibility:
      case Op::write_flush_persistent: {
        r = ep_.write(src, target_, 0, kWriteTag | slot, PostFlags::unsignalled);
        if (!r) break;
        const FlushType type = cfg_.op == Op::write_flush_persistent ? FlushType::persistent : FlushType::visibility;
        r = ep_.flush(target_, 0, size, type, slot);
        if (!r) throw PerfError("posting the flush of " + size_text(size) + " after its write: " + msg(r.error()));
        break;
      }
    }
    if (r) return true;
    if (r.error() == Errc::queue_full) return false;
    throw PerfError("posting " + std::string(op_name(cfg_.op)) + " of " + size_text(size) + ": " + msg(r.error()) +
                    " (endpoint " + to_string(ep_.state()) + ")");
  }

  /// Smallest default iteration count: 1000 for latency ops, else 4 * qd.
  std::uint64_t min_iters() const {
    return op_is_latency(cfg_.op) ? 1000 : std::max<std::uint64_t>(16, 4 * std::uint64_t{cfg_.qd});
  }

  /// Warm-up that also measures the rate; returns the iteration count for
  /// about kTargetSeconds.
  std::uint64_t calibrate(std::size_t size, std::uint64_t floor) {
    const Measurement w = measure(size, kMaxIters, seconds_ns(kWarmupSeconds), 16, false);
    const double rate = w.seconds > 0 ? static_cast<double>(w.iters) / w.seconds : 1e6;
    const auto want = static_cast<std::uint64_t>(rate * kTargetSeconds);
    return std::clamp<std::uint64_t>(want, floor, kDefaultItersCap);
  }

  /// Runs `iters` operations with cfg.qd outstanding. With time_budget_ns
  /// non-zero, stops posting once that much time passed and at least
  /// min_done operations completed.
  Measurement measure(std::size_t size, std::uint64_t iters, std::uint64_t time_budget_ns, std::uint64_t min_done,
                      bool measured) {
    const unsigned qd = cfg_.qd;
    std::vector<std::uint64_t> t_post(qd, 0);
    std::vector<std::uint32_t> free_slots;
    free_slots.reserve(qd);
    for (unsigned i = qd; i-- > 0;) free_slots.push_back(i);

    Measurement m;
    m.size = size;
    m.qd = qd;
    if (measured) m.lat_ns.reserve(iters);

    std::uint64_t posted = 0, done = 0;
    const std::uint64_t t_start = now_ns();
    std::uint64_t t_last = t_start;
    // Progress lines on stderr once a run is long: after kProgressAfter, or
    // for a time-bounded run only when it overruns its budget by a second.
    const std::uint64_t report_after =
        std::max<std::uint64_t>(static_cast<std::uint64_t>(std::chrono::nanoseconds(kProgressAfter).count()),
                                time_budget_ns != 0 ? time_budget_ns + 1'000'000'000 : 0);
    std::uint64_t next_report = t_start + report_after;
    // A stall: no completion for 10 s, plus the time one operation may take
    // at a pessimistic 20 MB/s (a persistent flush of a large range).
    const std::uint64_t stall_ns =
        static_cast<std::uint64_t>(std::chrono::nanoseconds(kStallTimeout).count()) + size / 20 * 1000;
    std::uint64_t empty_polls = 0;
    std::uint64_t limit = iters;
    std::array<Completion, 64> comps;

    while (done < limit || done < posted) {
      while (posted < limit && !free_slots.empty()) {
        const std::uint32_t slot = free_slots.back();
        const std::uint64_t t = now_ns();
        if (!post(slot, size, posted)) break;  // request queue full: reap first
        t_post[slot] = t;
        free_slots.pop_back();
        ++posted;
      }
      const std::size_t n = cq_.poll(comps);
      if (n > 0) {
        const std::uint64_t t = now_ns();
        for (std::size_t i = 0; i < n; ++i) {
          const Completion& c = comps[i];
          if (c.status) {
            const bool write_half = (c.cookie & kWriteTag) != 0;
            throw PerfError(std::string(op_name(cfg_.op)) + " of " + size_text(size) + " failed" +
                            (write_half ? " (its write)" : "") + ": " + c.status.message() + " (endpoint " +
                            to_string(ep_.state()) + ")");
          }
          if ((c.cookie & kWriteTag) != 0 || c.cookie >= qd) continue;  // not ours to count
          const auto slot = static_cast<std::uint32_t>(c.cookie);
          if (measured) m.lat_ns.push_back(t - t_post[slot]);
          free_slots.push_back(slot);
          ++done;
        }
        t_last = t;
        empty_polls = 0;
        if (time_budget_ns != 0 && t - t_start >= time_budget_ns && done >= min_done) limit = posted;
        if (measured && t >= next_report && done < limit) {
          print_progress("remora-perf", op_name(cfg_.op), size, done, limit, static_cast<double>(t - t_start) / 1e9);
          next_report = t + 1'000'000'000;
        }
      } else if (++empty_polls % 1024 == 0) {
        const std::uint64_t t = now_ns();
        if (t - t_last > stall_ns)
          throw PerfError(std::string(op_name(cfg_.op)) + " of " + size_text(size) + ": no completion for " +
                          std::to_string(stall_ns / 1'000'000'000) + " s (" + std::to_string(posted - done) +
                          " outstanding, endpoint " + to_string(ep_.state()) + ")");
        const EndpointState st = ep_.state();
        if (st != EndpointState::connected && cq_.size() == 0)
          throw PerfError("the connection is gone (endpoint " + std::string(to_string(st)) + ") during " +
                          std::string(op_name(cfg_.op)) + " of " + size_text(size));
      }
    }
    m.iters = done;
    m.seconds = static_cast<double>(t_last - t_start) / 1e9;
    return m;
  }

  const Config& cfg_;
  const std::size_t max_size_;
  // Declaration order is teardown order reversed: the endpoint goes first,
  // then the region, then the memory under it.
  Fabric fabric_;
  ProtectionZone zone_;
  CompletionQueue cq_;
  Buffer local_;
  MemoryRegion local_mr_;
  Endpoint ep_;
  RemoteRegion target_;
};

// ---- server ------------------------------------------------------------------

class Server {
 public:
  explicit Server(const Config& cfg) : cfg_(cfg) {}

  void run() {
    listen();
    accept_one();
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

  // Rejecting the client (bad request, not enough resources) ends the run
  // with an error, after telling the client why.
  void accept_one() {
    auto req = listener_.next_request(kAcceptWait);
    if (!req) {
      if (req.error() == Errc::timeout)
        throw PerfError("no client connected within " + std::to_string(kAcceptWait.count() / 1000) + " s");
      throw PerfError("waiting for a connection: " + msg(req.error()));
    }
    Request r;
    const auto& pd = req->private_data();
    if (pd.size() < sizeof r) return reject(*req, "connection request without benchmark parameters (not remora-perf?)");
    std::memcpy(&r, pd.data(), sizeof r);
    if (r.magic != kRequestMagic || r.version != kVersion)
      return reject(*req, "connection request from another program or remora-perf version");
    if (r.op > static_cast<std::uint8_t>(Op::send)) return reject(*req, "unknown operation in the request");
    op_ = static_cast<Op>(r.op);
    if (r.size == 0 || r.size > cfg_.size_max)
      return reject(*req, "size " + std::to_string(r.size) + " is above the server's --size-max " +
                              std::to_string(cfg_.size_max));
    size_ = static_cast<std::size_t>(r.size);

    target_mem_ = allocate(size_);
    auto mr = zone_.register_memory(target_mem_.get(), size_, Access::remote_read | Access::remote_write);
    if (!mr) return reject(*req, "registering " + size_text(size_) + ": " + msg(mr.error()));
    target_mr_ = std::move(*mr);
    std::vector<RemoteRegion> regions{*target_mr_.remote()};

    if (op_ == Op::write_flush_persistent) {
      backing_ = std::make_unique<BackingFile>();
      auto pmr = zone_.map_file(backing_->path, size_, Access::remote_read | Access::remote_write);
      if (!pmr) return reject(*req, "mapping " + backing_->path + ": " + msg(pmr.error()));
      persist_mr_ = std::move(*pmr);
      regions.push_back(*persist_mr_.remote());
    }

    auto cq = zone_.create_cq(256);
    if (!cq) return reject(*req, "creating a completion queue: " + msg(cq.error()));
    cq_ = std::move(*cq);
    EndpointOptions eo;
    eo.send_cq = &cq_;
    eo.max_outstanding = 16;  // the server posts no operation
    if (op_ == Op::send) {
      // Receives: two per outstanding send, at most 256 MiB of them.
      const std::size_t by_memory = std::max<std::size_t>(2, (std::size_t{256} << 20) / size_);
      nrecv_ = std::clamp<std::size_t>(2 * std::size_t{std::max<std::uint32_t>(r.qd, 1)}, 2,
                                       std::min<std::size_t>(256, by_memory));
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
      return reject(*req, what + ": " + msg(ep.error()));
    }
    ep_ = std::move(*ep);

    ReplyHeader h;
    h.regions = static_cast<std::uint8_t>(regions.size());
    std::vector<std::uint8_t> reply = bytes_of(h);
    for (const auto& rr : regions) {
      const auto d = rr.serialize();
      reply.insert(reply.end(), d.begin(), d.end());
    }
    if (auto a = req->accept(ep_, reply); !a) throw PerfError("accepting the connection: " + msg(a.error()));
    auto ev = ep_.next_event(kEstablishTimeout);
    if (!ev) throw PerfError("accepting the connection: not established within 10 s (" + msg(ev.error()) + ")");
    if (ev->type != ConnectionEventType::established)
      throw PerfError("accepting the connection: " + std::string(to_string(ev->type)));

    if (op_ == Op::send) post_receives();
    std::fprintf(stderr, "remora-perf: client connected: op %.*s, buffer %s%s%s\n",
                 static_cast<int>(op_name(op_).size()), op_name(op_).data(), size_text(size_).c_str(),
                 op_ == Op::send ? (", " + std::to_string(nrecv_) + " receives posted").c_str() : "",
                 backing_ ? (", persistent region in " + backing_->path).c_str() : "");
    std::fflush(stderr);
  }

  [[noreturn]] void reject(ConnectionRequest& req, const std::string& why) {
    (void)req.reject(reject_data(why));
    throw PerfError("rejected the client: " + why);
  }

  void post_receives() {
    recv_mem_ = allocate(nrecv_ * size_);
    auto mr = zone_.register_memory(recv_mem_.get(), nrecv_ * size_, Access::local_write);
    if (!mr) throw PerfError("registering the receive buffers: " + msg(mr.error()));
    recv_mr_ = std::move(*mr);
    for (std::size_t i = 0; i < nrecv_; ++i) post_receive(i);
  }

  void post_receive(std::size_t i) {
    const Segment seg(recv_mr_, i * size_, size_);
    if (auto r = ep_.recv(std::span(&seg, 1), i); !r) throw PerfError("posting a receive: " + msg(r.error()));
  }

  // Until the client leaves. Only `send` needs the server to do anything:
  // every other operation is served by the zone's target agent.
  void serve() {
    std::array<Completion, 32> comps;
    std::uint64_t received = 0;
    bool gone = false;
    while (!gone) {
      if (op_ == Op::send) {
        auto n = cq_.wait(comps, 100ms);
        if (!n && n.error() != Errc::timeout) throw PerfError("waiting for receives: " + msg(n.error()));
        for (std::size_t i = 0; n && i < *n; ++i) {
          const Completion& c = comps[i];
          if (c.status == Errc::flushed) continue;  // the connection is closing
          if (c.status) {
            std::fprintf(stderr, "remora-perf: warning: receive failed: %s\n", c.status.message().c_str());
          } else {
            ++received;
          }
          if (ep_.state() == EndpointState::connected) post_receive(static_cast<std::size_t>(c.cookie));
        }
      }
      auto ev = ep_.next_event(op_ == Op::send ? 0ms : 1000ms);
      if (!ev) {
        if (ev.error() != Errc::timeout) throw PerfError("waiting for the client to leave: " + msg(ev.error()));
        continue;
      }
      if (ev->type == ConnectionEventType::disconnected || ev->type == ConnectionEventType::lost) {
        const bool lost = ev->type == ConnectionEventType::lost;
        std::fprintf(stderr, "remora-perf: client %s", lost ? "lost" : "disconnected");
        if (op_ == Op::send)
          std::fprintf(stderr, " (%llu messages received)", static_cast<unsigned long long>(received));
        std::fputc('\n', stderr);
        gone = true;
      }
    }
  }

  const Config& cfg_;
  Op op_ = Op::write;
  std::size_t size_ = 0;
  std::size_t nrecv_ = 0;
  Fabric fabric_;
  ProtectionZone zone_;
  Listener listener_;
  CompletionQueue cq_;
  std::unique_ptr<BackingFile> backing_;
  Buffer target_mem_;
  Buffer recv_mem_;
  MemoryRegion target_mr_;
  MemoryRegion persist_mr_;
  MemoryRegion recv_mr_;
  Endpoint ep_;
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
