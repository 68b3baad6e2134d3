// The target side: one registered buffer, optional pre-posted receives, and
// a progress loop (the tcp provider only moves data while the target calls
// into libfabric).
#include "engine.hpp"
#include "fabric.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace rbench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::chrono::seconds kAcceptWait{120};  // waiting for the client
constexpr std::chrono::seconds kConnectedWait{10};
constexpr std::uint64_t kTargetKey = 0x5241574b;  // application-chosen key
constexpr std::uint64_t kRecvKey = 0x52415752;
constexpr int kSreadTimeoutMs = 100;
constexpr auto kEqCheckPeriod = std::chrono::milliseconds(50);

struct RecvSlot {
  fi_context2 ctx;  // first member: op_context points here
  std::byte* buf = nullptr;
};

class Server {
 public:
  explicit Server(const Config& cfg) : cfg_(cfg) {}

  void run() {
    listen();
    accept_one();
    progress_until_shutdown();
  }

 private:
  void listen() {
    info_ = get_info(cfg_.provider, cfg_.listen_address(), std::to_string(cfg_.port), true);
    fid_fabric* fabric = nullptr;
    check(fi_fabric(info_->fabric_attr, &fabric, nullptr), "fi_fabric");
    fabric_.reset(fabric);
    eq_ = open_eq(fabric_.get());
    fid_pep* pep = nullptr;
    check(fi_passive_ep(fabric_.get(), info_.get(), &pep, nullptr), "fi_passive_ep");
    pep_.reset(pep);
    check(fi_pep_bind(pep_.get(), &eq_->fid, 0), "fi_pep_bind");
    check(fi_listen(pep_.get()), "fi_listen");
    std::fprintf(stderr, "remora-bench-raw: server listening on %s:%u (provider %s, %s)\n",
                 cfg_.listen_address().c_str(), static_cast<unsigned>(cfg_.port), info_->fabric_attr->prov_name,
                 cfg_.busy_poll ? "busy-poll" : "asleep in fi_cq_sread");
  }

  void accept_one() {
    CmEvent req = wait_cm_event(eq_.get(), kAcceptWait, "waiting for a connection");
    if (req.event != FI_CONNREQ)
      throw BenchError("waiting for a connection: unexpected event " + std::to_string(req.event));
    Info conn_info(req.info);

    ConnectRequest creq;
    if (req.data.size() < sizeof creq)
      return reject(conn_info.get(), "connection request without benchmark parameters");
    std::memcpy(&creq, req.data.data(), sizeof creq);
    if (creq.magic != kMagic || creq.version != kVersion)
      return reject(conn_info.get(), "connection request from another program/version");
    if (creq.max_size == 0 || creq.max_size > remora::perf::kMaxSize)
      return reject(conn_info.get(), "bad buffer size in connection request");

    const std::uint64_t mr_mode = conn_info->domain_attr->mr_mode;
    if (mr_mode & FI_MR_ENDPOINT) throw BenchError("provider needs FI_MR_ENDPOINT, not supported by this benchmark");

    fid_domain* domain = nullptr;
    check(fi_domain(fabric_.get(), conn_info.get(), &domain, nullptr), "fi_domain");
    domain_.reset(domain);

    size_ = creq.max_size;
    target_ = allocate_buffer(size_);
    target_mr_ = register_memory(domain_.get(), target_.get(), size_, FI_REMOTE_WRITE | FI_REMOTE_READ, kTargetKey);

    const std::size_t nrecv =
        creq.want_recvs ? std::clamp<std::size_t>(2 * std::size_t{creq.qd}, 1, conn_info->rx_attr->size) : 0;
    cq_ = open_cq(domain_.get(), std::max<std::size_t>(nrecv, 64) + 64, !cfg_.busy_poll);

    fid_ep* ep = nullptr;
    check(fi_endpoint(domain_.get(), conn_info.get(), &ep, nullptr), "fi_endpoint");
    ep_.reset(ep);
    check(fi_ep_bind(ep_.get(), &eq_->fid, 0), "fi_ep_bind(eq)");
    check(fi_ep_bind(ep_.get(), &cq_->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)");
    check(fi_enable(ep_.get()), "fi_enable");

    if (nrecv > 0) {
      recv_pool_ = allocate_buffer(nrecv * size_);
      recv_mr_ = register_memory(domain_.get(), recv_pool_.get(), nrecv * size_, FI_RECV, kRecvKey);
      recv_slots_.resize(nrecv);
      for (std::size_t i = 0; i < nrecv; ++i) {
        recv_slots_[i].buf = recv_pool_.get() + i * size_;
        post_recv(recv_slots_[i]);
      }
    }

    AcceptReply reply;
    reply.addr = (mr_mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<std::uintptr_t>(target_.get()) : 0;
    reply.key = fi_mr_key(target_mr_.get());
    reply.len = size_;
    reply.reserved = cfg_.busy_poll ? kServerBusyPoll : 0;
    check(fi_accept(ep_.get(), &reply, sizeof reply), "fi_accept");
    CmEvent ev = wait_cm_event(eq_.get(), kConnectedWait, "accepting the connection");
    if (ev.event != FI_CONNECTED)
      throw BenchError("accepting the connection: unexpected event " + std::to_string(ev.event));
    std::fprintf(stderr,
                 "remora-bench-raw: client connected (buffer %llu bytes, %zu receives "
                 "posted)\n",
                 static_cast<unsigned long long>(size_), nrecv);
  }

  void reject(fi_info* conn, const char* why) {
    (void)fi_reject(pep_.get(), conn->handle, nullptr, 0);
    throw BenchError(std::string("rejected the client: ") + why);
  }

  // Posts a receive; if the receive queue is full it is retried later.
  void post_recv(RecvSlot& slot) {
    const ssize_t rc = fi_recv(ep_.get(), slot.buf, size_, fi_mr_desc(recv_mr_.get()), 0, &slot.ctx);
    if (rc == -FI_EAGAIN) {
      pending_.push_back(&slot);
      return;
    }
    if (rc == 0) return;
    // Receives cannot be posted once the client is gone: that is the
    // normal end of the run.
    if (shutdown_seen(eq_.get())) {
      closed_ = true;
      return;
    }
    check(rc, "fi_recv");
  }

  void repost_pending() {
    std::vector<RecvSlot*> retry;
    retry.swap(pending_);
    for (RecvSlot* slot : retry) post_recv(*slot);
  }

  // Every completion on the target is a receive (the RMA operations
  // generate none): count it and post the buffer again.
  void handle_completions(const fi_cq_entry* entries, ssize_t n) {
    for (ssize_t i = 0; i < n; ++i) {
      auto* slot = static_cast<RecvSlot*>(entries[i].op_context);
      if (slot == nullptr || recv_slots_.empty()) continue;
      ++received_;
      post_recv(*slot);
    }
  }

  void handle_error() {
    fi_cq_err_entry err{};
    const std::string text = cq_error_text(cq_.get(), &err);
    // A receive flushed because the client went away ends the run cleanly.
    if (err.err == FI_ECANCELED || err.err == FI_ENOTCONN || err.err == FI_ECONNRESET) {
      peer_gone_ = true;
      return;
    }
    throw BenchError("target completion error: " + text);
  }

  void progress_until_shutdown() {
    fi_cq_entry entries[32];
    auto next_eq_check = Clock::now() + kEqCheckPeriod;
    while (!closed_) {
      const ssize_t n = cfg_.busy_poll ? fi_cq_read(cq_.get(), entries, 32)
                                       : fi_cq_sread(cq_.get(), entries, 32, nullptr, kSreadTimeoutMs);
      if (!pending_.empty()) repost_pending();
      if (n > 0) {
        handle_completions(entries, n);
      } else if (n == -FI_EAVAIL) {
        handle_error();
      } else if (n != -FI_EAGAIN && n != -FI_ETIMEDOUT && n != -FI_EINTR) {
        check(n, cfg_.busy_poll ? "fi_cq_read" : "fi_cq_sread");
      }
      // Look for FI_SHUTDOWN when idle (asleep mode) or now and then.
      const bool idle = n == -FI_EAGAIN || n == -FI_ETIMEDOUT;
      if ((idle && !cfg_.busy_poll) || peer_gone_ || Clock::now() >= next_eq_check) {
        if (shutdown_seen(eq_.get())) closed_ = true;
        next_eq_check = Clock::now() + kEqCheckPeriod;
      }
    }
    std::fprintf(stderr, "remora-bench-raw: client disconnected (%llu messages received)\n",
                 static_cast<unsigned long long>(received_));
  }

  const Config& cfg_;
  // Declaration order = reverse close order: ep before cq/eq, mrs before
  // the domain, the domain before the fabric.
  Info info_;
  Fid<fid_fabric> fabric_;
  Fid<fid_eq> eq_;
  Fid<fid_pep> pep_;
  Fid<fid_domain> domain_;
  Buffer target_;
  Buffer recv_pool_;
  Fid<fid_mr> target_mr_;
  Fid<fid_mr> recv_mr_;
  Fid<fid_cq> cq_;
  Fid<fid_ep> ep_;
  std::vector<RecvSlot> recv_slots_;
  std::vector<RecvSlot*> pending_;  // receives to post again
  std::uint64_t size_ = 0;
  std::uint64_t received_ = 0;
  bool peer_gone_ = false;  // a receive was flushed: the client is leaving
  bool closed_ = false;     // FI_SHUTDOWN seen
};

}  // namespace

void run_server(const Config& cfg) {
  Server server(cfg);
  server.run();
}

}  // namespace rbench
