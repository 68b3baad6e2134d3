// src/fabric/ofi_backend.cpp - the libfabric implementation of backend.hpp.
// The only file in Remora that includes <rdma/fabric.h>.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <unordered_set>

#include "fabric/backend.hpp"
#include "fabric/mem_backend.hpp"

namespace remora::backend {
namespace {

constexpr std::uint32_t kFiVersion = FI_VERSION(1, 17);

std::error_code from_fi(int rc) {
  switch (-rc) {
    case FI_EINVAL: return make_error_code(Errc::invalid_argument);
    case FI_ENOMEM: return make_error_code(Errc::no_memory);
    case FI_EAGAIN: return make_error_code(Errc::queue_full);
    case FI_ENODATA:
    case FI_ENOSYS:
    case FI_EOPNOTSUPP: return make_error_code(Errc::not_supported);
    case FI_EADDRINUSE: return make_error_code(Errc::address_in_use);
    case FI_ECONNREFUSED: return make_error_code(Errc::unreachable);
    case FI_ENOTCONN:
    case FI_ECONNRESET:
    case FI_ECONNABORTED: return make_error_code(Errc::not_connected);
    default: return make_error_code(Errc::provider_error);
  }
}

struct InfoDeleter {
  void operator()(fi_info* p) const noexcept { fi_freeinfo(p); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

template <class F>
void close_fid(F* f) noexcept {
  if (f != nullptr) fi_close(&f->fid);
}

InfoPtr make_hints(const std::string& provider) {
  InfoPtr hints(fi_allocinfo());
  if (!hints) return hints;
  hints->ep_attr->type = FI_EP_MSG;
  hints->caps = FI_MSG | FI_RMA;
  hints->addr_format = FI_SOCKADDR_IN;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->threading = FI_THREAD_SAFE;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->tx_attr->msg_order = FI_ORDER_RAW | FI_ORDER_WAW | FI_ORDER_SAW | FI_ORDER_SAS | FI_ORDER_WAS;
  if (!provider.empty()) hints->fabric_attr->prov_name = strdup(provider.c_str());
  return hints;
}

std::string sockaddr_string(const void* addr, std::size_t len) {
  if (addr == nullptr || len < sizeof(sockaddr_in)) return {};
  const auto* sin = static_cast<const sockaddr_in*>(addr);
  if (sin->sin_family != AF_INET) return {};
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof buf);
  return buf;
}

FabricInfo describe(const fi_info* fi) {
  FabricInfo out;
  out.provider = fi->fabric_attr->prov_name ? fi->fabric_attr->prov_name : "";
  out.fabric_name = fi->fabric_attr->name ? fi->fabric_attr->name : "";
  out.domain_name = fi->domain_attr->name ? fi->domain_attr->name : "";
  out.address = sockaddr_string(fi->src_addr, fi->src_addrlen);
  out.max_segments = fi->tx_attr->iov_limit;
  out.max_message = fi->ep_attr->max_msg_size;
  out.inject_size = fi->tx_attr->inject_size;
  out.virtual_addressing = (fi->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
  out.native_atomics = (fi->caps & FI_ATOMIC) != 0;
  out.requires_sync = false;  // every provider we run on is cache coherent
  out.odp = (fi->domain_attr->mr_mode & (FI_MR_ALLOCATED | FI_MR_LOCAL)) == 0;
  return out;
}

std::uint64_t to_fi_access(Access a) {
  std::uint64_t f = 0;
  if (has(a, Access::local_read)) f |= FI_SEND | FI_WRITE;
  if (has(a, Access::local_write)) f |= FI_RECV | FI_READ;
  if (has(a, Access::remote_read)) f |= FI_REMOTE_READ;
  if (has(a, Access::remote_write)) f |= FI_REMOTE_WRITE;
  return f;
}

class OfiMemoryKey final : public MemoryKey {
 public:
  explicit OfiMemoryKey(fid_mr* mr) : mr_(mr) {}
  ~OfiMemoryKey() override { close_fid(mr_); }
  void* desc() const noexcept override { return fi_mr_desc(mr_); }
  std::uint64_t key() const noexcept override { return fi_mr_key(mr_); }

 private:
  fid_mr* mr_;
};

class OfiTransport;
class OfiConnection;

// How many connections share one libfabric completion queue: 64 unless
// REMORA_TCP_QUEUE_SHARING says otherwise (1 gives every connection its own
// queue, as before sharing existed; used by bench/README.md's comparisons).
std::size_t connections_per_queue() {
  static const std::size_t n = [] {
    const char* v = std::getenv("REMORA_TCP_QUEUE_SHARING");
    if (v == nullptr || *v == '\0') return std::size_t{64};
    char* end = nullptr;
    unsigned long x = std::strtoul(v, &end, 10);
    if (end == v || *end != '\0' || x == 0) {
      std::fprintf(stderr,
                   "remora: REMORA_TCP_QUEUE_SHARING=\"%s\" is not a positive number; using 64 connections per "
                   "queue\n",
                   v);
      return std::size_t{64};
    }
    return static_cast<std::size_t>(std::min<unsigned long>(x, 1u << 20));
  }();
  return n;
}

std::uint64_t translate(std::uint64_t f) {
  std::uint64_t o = 0;
  if (f & FI_SEND) o |= kCqSend;
  if (f & FI_RECV) o |= kCqRecv;
  if (f & FI_READ) o |= kCqRead;
  if (f & FI_WRITE) o |= kCqWrite;
  if (f & FI_REMOTE_WRITE) o |= kCqRemoteWrite;
  if (f & FI_REMOTE_CQ_DATA) o |= kCqRemoteData;
  return o;
}

// One libfabric completion queue shared by up to `capacity` connections of a
// domain. The tcp provider gives every queue its own pool of 1,024 transfer
// entries (about 540 KiB, zeroed on first use) and two wait descriptors, so
// a queue per connection made an idle connection cost over half a megabyte
// and four descriptors (bench/README.md, "Scale"). Reading the queue also
// runs the provider's progress over every connection bound to it (a check of
// each socket), which is why a queue serves a bounded group rather than the
// whole domain. Entries are routed to their connection through the
// OpSlotHeader::conn of their operation context and kept in that
// connection's inbox until it polls; everything here is under `mu`.
class OfiQueue final : public SharedQueue {
 public:
  OfiQueue(fid_fabric* fabric, std::size_t capacity, bool waitable, const std::function<void(void*)>* notify)
      : fabric_(fabric), capacity_(capacity), waitable_(waitable), notify_(notify) {}
  ~OfiQueue() override { close_fid(cq_); }

  Result<void> init(fid_domain* domain) {
    fi_cq_attr attr{};
    // Overflow beyond the ring is kept by the provider (util CQ overflow
    // list), so the ring only needs to absorb a typical burst.
    attr.size = 1024;
    attr.format = FI_CQ_FORMAT_DATA;
    // A queue nobody sleeps on has no wait object: the provider then does
    // not signal an fd for every completion.
    attr.wait_obj = waitable_ ? FI_WAIT_FD : FI_WAIT_NONE;
    if (int rc = fi_cq_open(domain, &attr, &cq_, nullptr); rc) return from_fi(rc);
    if (waitable_)
      if (int rc = fi_control(&cq_->fid, FI_GETWAIT, &fd_); rc) return from_fi(rc);
    return {};
  }

  int pump(std::vector<void*>& ready) override;
  int wait_fd() const noexcept override { return fd_; }
  bool try_wait() noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    return trywait_locked();
  }

  bool waitable() const noexcept { return waitable_; }
  // Under the domain's lock; membership changes under mu_ (a connection
  // leaves from any thread), so the count is read under it too.
  bool full() {
    std::lock_guard<std::mutex> lock(mu_);
    return members_.size() >= capacity_;
  }
  fid_cq* cq() const noexcept { return cq_; }
  void notify(const std::vector<void*>& owners) const {
    if (notify_ != nullptr && *notify_)
      for (void* o : owners) (*notify_)(o);
  }

  // Membership (the domain assigns connections under its own lock; the
  // queue's lock orders it against readers).
  void join(OfiConnection* c) {
    std::lock_guard<std::mutex> lock(mu_);
    members_.insert(c);
  }
  // The connection's endpoint is closed: nothing more can arrive for it.
  // What the queue still holds is read now (the other connections' entries
  // go to them), and the leaving connection's own entries are dropped: their
  // contexts point into memory its owner is about to reuse.
  void leave(OfiConnection* c);
  // poll() of connection `c`: its inbox, refilled from the queue when empty.
  int poll_for(OfiConnection* c, std::span<CqEntry> out);
  bool try_wait_for(OfiConnection* c);
  // No entry kept for `c` (try_wait_for without the transport's try-wait).
  bool kept_nothing_for(OfiConnection* c);
  // `c` owes the transport a note: pump() reports it.
  void mark_waiting(OfiConnection* c) {
    std::lock_guard<std::mutex> lock(mu_);
    if (members_.count(c) != 0) waiting_.insert(c);
  }

 private:
  bool trywait_locked() noexcept {
    if (fd_ < 0) return true;  // nothing to sleep on: the caller only times out
    fid* f = &cq_->fid;
    return fi_trywait(fabric_, &f, 1) == FI_SUCCESS;
  }
  // Read up to one batch and route it. Owners of connections other than
  // `self` whose inbox was empty are appended to `ready`.
  int read_locked(OfiConnection* self, std::vector<void*>& ready);
  void route(const CqEntry& e, void* op_context, OfiConnection* self, std::vector<void*>& ready);

  fid_fabric* fabric_;
  std::size_t capacity_;
  bool waitable_;
  const std::function<void(void*)>* notify_;
  fid_cq* cq_ = nullptr;
  int fd_ = -1;
  std::mutex mu_;
  std::set<OfiConnection*> members_;  // under mu_
  // The members with entries in their inbox or notes owed (a superset: one
  // that has neither any more leaves at its next poll or pump), so that a
  // pump costs what is waiting, not the number of members.
  std::unordered_set<OfiConnection*> waiting_;  // under mu_
  std::uint64_t read_in_pass_ = 0;              // under mu_: the ProgressPass that last read the queue
};

class OfiConnection final : public Connection {
 public:
  static constexpr std::size_t kMaxIov = kMaxSegments;

  OfiConnection(std::shared_ptr<OfiQueue> queue) : queue_(std::move(queue)) {}
  ~OfiConnection() override {
    close_fid(ep_);
    queue_->leave(this);
  }

  Result<void> init(fid_domain* domain, fid_eq* eq, fi_info* info) {
    if (int rc = fi_endpoint(domain, info, &ep_, nullptr); rc) return from_fi(rc);
    if (int rc = fi_ep_bind(ep_, &queue_->cq()->fid, FI_TRANSMIT | FI_RECV); rc) return from_fi(rc);
    if (int rc = fi_ep_bind(ep_, &eq->fid, 0); rc) return from_fi(rc);
    if (int rc = fi_enable(ep_); rc) return from_fi(rc);
    queue_->join(this);
    return {};
  }

  SharedQueue* shared_queue() noexcept override { return queue_.get(); }
  void set_owner(void* owner) noexcept override { owner_.store(owner, std::memory_order_relaxed); }

  Result<void> connect(const std::string& host, std::uint16_t port, std::span<const std::uint8_t> pdata) override {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    std::string service = std::to_string(port);
    if (getaddrinfo(host.c_str(), service.c_str(), &hints, &res) != 0 || res == nullptr) return Errc::unreachable;
    sockaddr_in sin{};
    std::memcpy(&sin, res->ai_addr, sizeof sin);
    freeaddrinfo(res);
    int rc = fi_connect(ep_, &sin, pdata.data(), pdata.size());
    if (rc) return from_fi(rc);
    return {};
  }

  Result<void> accept(std::span<const std::uint8_t> pdata) override {
    if (int rc = fi_accept(ep_, pdata.data(), pdata.size()); rc) return from_fi(rc);
    return {};
  }

  void shutdown() noexcept override { fi_shutdown(ep_, 0); }

  // One RMA message: local iovs (at most kMaxIov) to `raddr` under `key`.
  // Remote addresses are virtual on every provider (Transport::open).
  struct RmaMsg {
    iovec v[kMaxIov];
    void* d[kMaxIov];
    fi_rma_iov r;
    fi_msg_rma msg{};
  };

  bool build(RmaMsg& m, std::span<const Iov> iov, std::uint64_t raddr, std::uint64_t key, OpSlotHeader* ctx) {
    if (iov.size() > kMaxIov) return false;
    std::size_t total = 0;
    for (std::size_t i = 0; i < iov.size(); ++i) {
      m.v[i] = iovec{iov[i].addr, iov[i].len};
      m.d[i] = iov[i].desc;
      total += iov[i].len;
    }
    m.r = fi_rma_iov{raddr, total, key};
    m.msg.msg_iov = m.v;
    m.msg.desc = m.d;
    m.msg.iov_count = iov.size();
    m.msg.rma_iov = &m.r;
    m.msg.rma_iov_count = 1;
    m.msg.context = ctx;
    if (ctx != nullptr) ctx->conn = this;  // its completion comes back to this connection
    return true;
  }

  // A write with immediate data is a write followed by a message carrying
  // the data, whose 8-byte payload is the write's length (little-endian). Natively, the data would arrive at the target
  // as a completion with no operation context (the tcp provider consumes no receive for it), which a queue shared by
  // several connections cannot give to the right one; a message lands in one of the connection's own receives. The
  // connection is ordered (FI_ORDER_SAW), so the target sees the data before the message. The core reports a message of
  // the write_imm kind as it reports the native event, with the length the payload gives (the data's own length field
  // stops at 16 MiB).
  int write(std::span<const Iov> iov, std::uint64_t raddr, std::uint64_t key, bool with_data, std::uint64_t data,
            OpSlotHeader* ctx) override {
    if (with_data && !flush_notes()) return -FI_EAGAIN;
    RmaMsg m;
    if (!build(m, iov, raddr, key, ctx)) return -FI_EINVAL;
    int rc = static_cast<int>(fi_writemsg(ep_, &m.msg, FI_DELIVERY_COMPLETE | FI_COMPLETION));
    if (rc == 0 && with_data) {
      // The write is posted: its note must follow it. One the provider
      // cannot take now is sent before anything else that could overtake
      // it (flush_notes, called by every later message and by poll()).
      notes_.push_back(Note{data, m.r.len});
      (void)flush_notes();
    }
    return rc;
  }

  int read(std::span<const Iov> iov, std::uint64_t raddr, std::uint64_t key, OpSlotHeader* ctx) override {
    RmaMsg m;
    if (!build(m, iov, raddr, key, ctx)) return -FI_EINVAL;
    return static_cast<int>(fi_readmsg(ep_, &m.msg, FI_COMPLETION));
  }

  int send(std::span<const Iov> iov, std::uint64_t data, OpSlotHeader* ctx) override {
    if (!flush_notes()) return -FI_EAGAIN;
    RmaMsg m;  // the local half of it
    if (!build(m, iov, 0, 0, ctx)) return -FI_EINVAL;
    fi_msg msg{};
    msg.msg_iov = m.v;
    msg.desc = m.d;
    msg.iov_count = iov.size();
    msg.context = ctx;
    msg.data = data;
    // The provider's default completion (the message handed to the socket)
    // is enough: the core completes a send only once the receiving side
    // acknowledged it as handled, and a connection that breaks before that
    // flushes it. FI_TRANSMIT_COMPLETE would cost a provider acknowledgement
    // per message (libfabric 1.17's tcp provider treats it as delivery
    // complete: tcpx_set_ack_flags), one more system call on each side.
    return static_cast<int>(fi_sendmsg(ep_, &msg, FI_REMOTE_CQ_DATA | FI_COMPLETION));
  }

  int inject(const void* buf, std::size_t len, std::uint64_t data) override {
    if (!flush_notes()) return -FI_EAGAIN;
    return static_cast<int>(fi_injectdata(ep_, buf, len, data, 0));
  }

  int recv(void* buf, std::size_t len, void* desc, OpSlotHeader* ctx) override {
    ctx->conn = this;
    const int rc = static_cast<int>(fi_recv(ep_, buf, len, desc, 0, ctx));
    if (rc == 0) ++posted_;
    return rc;
  }

  int poll(std::span<CqEntry> out) override {
    (void)flush_notes();
    const int n = queue_->poll_for(this, out);
    // The last receive buffer the provider held has completed: a message
    // it read meanwhile waits, parked, for one to be posted (needs_poll).
    for (int i = 0; i < n; ++i)
      if ((out[i].flags & kCqRecv) != 0 && posted_ > 0 && --posted_ == 0) starved_ = true;
    return n;
  }
  bool needs_poll() const noexcept override { return starved_ && posted_ > 0; }

  int wait_fd() const noexcept override { return queue_->wait_fd(); }
  bool try_wait() noexcept override { return notes_.empty() && !needs_poll() && queue_->try_wait_for(this); }
  bool quiet() noexcept override { return notes_.empty() && !needs_poll() && queue_->kept_nothing_for(this); }
  const void* cm_id() const noexcept override { return &ep_->fid; }

  void* owner() const noexcept { return owner_.load(std::memory_order_relaxed); }
  /// A note of a write with immediate data waits to be sent (poll() sends it).
  bool owes_notes() const noexcept { return has_notes_.load(std::memory_order_relaxed); }
  std::deque<CqEntry> inbox;  // under the queue's lock

 private:
  // Send the notes of writes with immediate data that are still owed, in
  // order. False while one is still owed (the provider's queue is full).
  bool flush_notes() {
    if (notes_.empty()) return true;
    while (!notes_.empty()) {
      std::uint8_t len[8];
      for (int i = 0; i < 8; ++i) len[i] = static_cast<std::uint8_t>(notes_.front().length >> (8 * i));
      if (fi_injectdata(ep_, len, sizeof len, notes_.front().data, 0) != 0) {
        // Owed: the queue's pump reports this connection until poll() sends it.
        if (!has_notes_.exchange(true, std::memory_order_relaxed)) queue_->mark_waiting(this);
        return false;
      }
      notes_.pop_front();
    }
    has_notes_.store(false, std::memory_order_relaxed);
    return true;
  }

  std::shared_ptr<OfiQueue> queue_;
  fid_ep* ep_ = nullptr;
  std::atomic<void*> owner_{nullptr};  // read by the queue's readers of other threads
  struct Note {
    std::uint64_t data;    // the write's immediate data (wire kind and all)
    std::uint64_t length;  // the write's length
  };
  std::deque<Note> notes_;              // of posted writes, not yet sent
  std::atomic<bool> has_notes_{false};  // notes_ not empty after a send failed (read by OfiQueue::pump)
  // Receive buffers posted and not yet handed out by poll(), and whether
  // they ran out since the last read of the transport. The owner's, like
  // every call here but the queue's reads (under its endpoint's lock).
  std::size_t posted_ = 0;
  bool starved_ = false;

  friend class OfiQueue;  // poll_for: a starved connection reads even within a pass
};

void OfiQueue::route(const CqEntry& e, void* op_context, OfiConnection* self, std::vector<void*>& ready) {
  OfiConnection* c = nullptr;
  if (op_context != nullptr) {
    c = static_cast<OfiConnection*>(static_cast<OpSlotHeader*>(op_context)->conn);
  } else if (members_.size() == 1) {
    c = *members_.begin();  // an event with no context (remote CQ data): only one connection it can be
  }
  // An event no member can claim (a context-less event in a shared group,
  // which Remora peers never cause) is dropped.
  if (c == nullptr || members_.count(c) == 0) return;
  const bool was_empty = c->inbox.empty();
  c->inbox.push_back(e);
  if (was_empty) waiting_.insert(c);
  if (was_empty && c != self && c->owner() != nullptr) ready.push_back(c->owner());
}

int OfiQueue::read_locked(OfiConnection* self, std::vector<void*>& ready) {
  fi_cq_data_entry e[16];
  ssize_t rc = fi_cq_read(cq_, e, 16);
  if (rc == -FI_EAGAIN) return 0;
  if (rc == -FI_EAVAIL) {
    fi_cq_err_entry err{};
    rc = fi_cq_readerr(cq_, &err, 0);
    if (rc == -FI_EAGAIN) return 0;
    if (rc < 0) return static_cast<int>(rc);
    route(CqEntry{err.op_context, translate(err.flags), err.len, err.data, err.err ? err.err : FI_EIO}, err.op_context,
          self, ready);
    return 1;
  }
  if (rc < 0) return static_cast<int>(rc);
  for (ssize_t i = 0; i < rc; ++i)
    route(CqEntry{e[i].op_context, translate(e[i].flags), e[i].len, e[i].data, 0}, e[i].op_context, self, ready);
  return static_cast<int>(rc);
}

int OfiQueue::pump(std::vector<void*>& ready) {
  std::lock_guard<std::mutex> lock(mu_);
  // A bounded number of batches: the caller comes back while the queue
  // still cannot be slept on (try_wait).
  std::vector<void*> ignored;  // every owner with entries is reported below
  int total = 0;
  for (int i = 0; i < 16; ++i) {
    const int rc = read_locked(nullptr, ignored);
    if (rc < 0) {
      if (total == 0) total = rc;
      break;
    }
    total += rc;
    if (rc < 16) break;
  }
  read_in_pass_ = ProgressPass::current();
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    OfiConnection* c = *it;
    if (c->inbox.empty() && !c->owes_notes()) {
      it = waiting_.erase(it);
      continue;
    }
    if (c->owner() != nullptr) ready.push_back(c->owner());
    ++it;
  }
  return total;
}

int OfiQueue::poll_for(OfiConnection* c, std::span<CqEntry> out) {
  std::vector<void*> others;
  std::size_t n = 0;
  int err = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::uint64_t pass = ProgressPass::current();
    // A connection whose receive buffers ran out (needs_poll) reads even
    // if this pass read the queue already: the provider resumes a message
    // it parked only when it is called again.
    if (c->inbox.empty() && (pass == 0 || pass != read_in_pass_ || c->needs_poll())) {
      if (c->posted_ > 0) c->starved_ = false;  // this read resumes a parked message
      // Inside a pass, the one read takes everything there is (bounded).
      for (int i = 0; i < (pass == 0 ? 1 : 16); ++i) {
        const int rc = read_locked(c, others);
        if (rc < 0) err = rc;
        if (rc < 16) break;
      }
      read_in_pass_ = pass;
    }
    while (n < out.size() && !c->inbox.empty()) {
      out[n++] = c->inbox.front();
      c->inbox.pop_front();
    }
    // (poll() sent the notes it could before this.)
    if (c->inbox.empty() && !c->owes_notes()) waiting_.erase(c);
  }
  notify(others);
  if (n == 0 && err < 0) return err;
  return static_cast<int>(n);
}

bool OfiQueue::try_wait_for(OfiConnection* c) {
  std::lock_guard<std::mutex> lock(mu_);
  // Entries kept for other connections are theirs to handle (their owners
  // were told); this connection may sleep when it has none and the
  // transport confirms nothing is pending.
  return c->inbox.empty() && trywait_locked();
}

bool OfiQueue::kept_nothing_for(OfiConnection* c) {
  std::lock_guard<std::mutex> lock(mu_);
  return c->inbox.empty();
}

void OfiQueue::leave(OfiConnection* c) {
  std::vector<void*> others;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (read_locked(c, others) > 0) {
    }
    c->inbox.clear();
    waiting_.erase(c);
    members_.erase(c);
  }
  notify(others);
}

class OfiPassive final : public PassiveEndpoint {
 public:
  ~OfiPassive() override { close_fid(pep_); }
  std::uint16_t port() const noexcept override { return port_; }
  Result<void> reject(const std::shared_ptr<void>& request, std::span<const std::uint8_t> pdata) override {
    auto* info = static_cast<fi_info*>(request.get());
    if (int rc = fi_reject(pep_, info->handle, pdata.data(), pdata.size()); rc) return from_fi(rc);
    return {};
  }
  const void* cm_id() const noexcept override { return &pep_->fid; }

  fid_pep* pep_ = nullptr;
  std::uint16_t port_ = 0;
};

class OfiDomain final : public Domain {
 public:
  OfiDomain(fid_fabric* fabric, fi_info* info) : fabric_(fabric), info_(info) {}
  ~OfiDomain() override {
    queues_.clear();  // every connection is gone: the queues close before the domain
    close_fid(eq_);
    close_fid(domain_);
  }

  Result<void> init() {
    if (int rc = fi_domain(fabric_, info_, &domain_, nullptr); rc) return from_fi(rc);
    fi_eq_attr attr{};
    attr.size = 256;
    attr.wait_obj = FI_WAIT_FD;
    if (int rc = fi_eq_open(fabric_, &attr, &eq_, nullptr); rc) return from_fi(rc);
    if (int rc = fi_control(&eq_->fid, FI_GETWAIT, &eq_fd_); rc) return from_fi(rc);
    return {};
  }

  Result<std::unique_ptr<MemoryKey>> register_memory(void* addr, std::size_t len, Access access,
                                                     std::uint64_t requested_key) override {
    fid_mr* mr = nullptr;
    int rc = fi_mr_reg(domain_, addr, len, to_fi_access(access), 0, requested_key, 0, &mr, nullptr);
    if (rc == -FI_ENOKEY || rc == -FI_EKEYREJECTED) return Errc::address_in_use;  // key collision: retry
    if (rc) return from_fi(rc);
    if (info_->domain_attr->mr_mode & FI_MR_ENDPOINT) {
      close_fid(mr);
      return Errc::not_supported;
    }
    return std::unique_ptr<MemoryKey>(new OfiMemoryKey(mr));
  }

  Result<std::unique_ptr<Connection>> create_connection(const std::shared_ptr<void>& request, std::size_t cq_size,
                                                        bool waitable) override {
    (void)cq_size;  // a shared queue keeps what overflows its ring
    auto* info = request ? static_cast<fi_info*>(request.get()) : info_;
    auto queue = queue_for(waitable);
    if (!queue) return queue.error();
    auto conn = std::make_unique<OfiConnection>(std::move(*queue));
    if (auto r = conn->init(domain_, eq_, info); !r) return r.error();
    return std::unique_ptr<Connection>(std::move(conn));
  }

  void set_ready_callback(std::function<void(void*)> fn) override { notify_ = std::move(fn); }

  Result<std::unique_ptr<PassiveEndpoint>> listen(const std::string& address, std::uint16_t port) override {
    InfoPtr hints(fi_dupinfo(info_));
    if (!hints) return Errc::no_memory;
    std::free(hints->src_addr);
    hints->src_addr = nullptr;
    hints->src_addrlen = 0;
    fi_info* raw = nullptr;
    std::string service = std::to_string(port);
    int rc = fi_getinfo(kFiVersion, address.c_str(), service.c_str(), FI_SOURCE, hints.get(), &raw);
    if (rc) return rc == -FI_ENODATA ? make_error_code(Errc::invalid_argument) : from_fi(rc);
    InfoPtr info(raw);
    auto pep = std::make_unique<OfiPassive>();
    if ((rc = fi_passive_ep(fabric_, info.get(), &pep->pep_, nullptr))) return from_fi(rc);
    if ((rc = fi_pep_bind(pep->pep_, &eq_->fid, 0))) return from_fi(rc);
    if ((rc = fi_listen(pep->pep_))) return from_fi(rc);
    sockaddr_in sin{};
    std::size_t len = sizeof sin;
    if ((rc = fi_getname(&pep->pep_->fid, &sin, &len))) return from_fi(rc);
    pep->port_ = ntohs(sin.sin_port);
    return std::unique_ptr<PassiveEndpoint>(std::move(pep));
  }

  bool next_cm_event(CmEvent& ev) override {
    std::lock_guard<std::mutex> lock(eq_mu_);
    alignas(fi_eq_cm_entry) std::uint8_t buf[sizeof(fi_eq_cm_entry) + 512];
    std::uint32_t event = 0;
    ssize_t rc = fi_eq_read(eq_, &event, buf, sizeof buf, 0);
    if (rc == -FI_EAGAIN) return false;
    if (rc == -FI_EAVAIL) {
      fi_eq_err_entry err{};
      if (fi_eq_readerr(eq_, &err, 0) < 0) return false;
      ev = CmEvent{};
      ev.kind = CmEvent::error;
      ev.cm_id = err.fid;
      ev.err = err.err;
      if (err.err_data && err.err_data_size)
        ev.data.assign(static_cast<const std::uint8_t*>(err.err_data),
                       static_cast<const std::uint8_t*>(err.err_data) + err.err_data_size);
      return true;
    }
    if (rc < 0) return false;
    auto* entry = reinterpret_cast<fi_eq_cm_entry*>(buf);
    ev = CmEvent{};
    ev.cm_id = entry->fid;
    if (static_cast<std::size_t>(rc) > sizeof(fi_eq_cm_entry))
      ev.data.assign(entry->data, entry->data + (static_cast<std::size_t>(rc) - sizeof(fi_eq_cm_entry)));
    switch (event) {
      case FI_CONNREQ:
        ev.kind = CmEvent::conn_request;
        ev.request = std::shared_ptr<void>(entry->info, [](void* p) { fi_freeinfo(static_cast<fi_info*>(p)); });
        if (entry->info && entry->info->dest_addr && entry->info->addr_format == FI_SOCKADDR_IN &&
            entry->info->dest_addrlen >= sizeof(sockaddr_in)) {
          const auto* sin = static_cast<const sockaddr_in*>(entry->info->dest_addr);
          char host[INET_ADDRSTRLEN];
          if (inet_ntop(AF_INET, &sin->sin_addr, host, sizeof host)) ev.peer_host = host;
          ev.peer_port = ntohs(sin->sin_port);
        }
        break;
      case FI_CONNECTED: ev.kind = CmEvent::connected; break;
      case FI_SHUTDOWN: ev.kind = CmEvent::shutdown; break;
      default:
        ev.kind = CmEvent::error;
        ev.err = FI_EOTHER;
        break;
    }
    return true;
  }

  int cm_wait_fd() const noexcept override { return eq_fd_; }
  bool cm_try_wait() noexcept override {
    fid* f = &eq_->fid;
    return fi_trywait(fabric_, &f, 1) == FI_SUCCESS;
  }

 private:
  // A queue with room for one more connection, opened when every queue is
  // full. A queue stays open (and is reused) until the domain closes.
  Result<std::shared_ptr<OfiQueue>> queue_for(bool waitable) {
    std::lock_guard<std::mutex> lock(queues_mu_);
    for (auto& q : queues_)
      if (q->waitable() == waitable && !q->full()) return q;
    auto q = std::make_shared<OfiQueue>(fabric_, connections_per_queue(), waitable, &notify_);
    if (auto r = q->init(domain_); !r) return r.error();
    queues_.push_back(q);
    return q;
  }

  fid_fabric* fabric_;
  fi_info* info_;
  fid_domain* domain_ = nullptr;
  fid_eq* eq_ = nullptr;
  int eq_fd_ = -1;
  std::mutex eq_mu_;
  std::function<void(void*)> notify_;  // set before the first connection
  std::mutex queues_mu_;
  std::vector<std::shared_ptr<OfiQueue>> queues_;
};

class OfiTransport final : public Transport {
 public:
  ~OfiTransport() override { close_fid(fabric_); }
  const FabricInfo& info() const noexcept override { return desc_; }
  Result<std::unique_ptr<Domain>> open_domain() override {
    auto d = std::make_unique<OfiDomain>(fabric_, info_.get());
    if (auto r = d->init(); !r) return r.error();
    return std::unique_ptr<Domain>(std::move(d));
  }

  InfoPtr info_;
  fid_fabric* fabric_ = nullptr;
  FabricInfo desc_;
};

// Providers that fail under Remora's use: libfabric 1.17's `sockets`
// crashes in its connection-manager thread on the first connection.
bool excluded(const std::string& provider) { return provider == "sockets"; }

}  // namespace

Result<std::shared_ptr<Transport>> Transport::open(const FabricOptions& options) {
  if (options.provider == mem::kProvider) return mem::open(options);
  if (excluded(options.provider)) return Errc::not_supported;
  InfoPtr hints = make_hints(options.provider);
  if (!hints) return Errc::no_memory;
  fi_info* raw = nullptr;
  int rc = fi_getinfo(kFiVersion, options.address.empty() ? nullptr : options.address.c_str(), nullptr, FI_SOURCE,
                      hints.get(), &raw);
  if (rc == -FI_ENODATA) return Errc::not_supported;
  if (rc) return from_fi(rc);
  auto t = std::make_shared<OfiTransport>();
  t->info_.reset(raw);
  // Keep only the first entry: it matches the requested address.
  if (t->info_->next) {
    fi_freeinfo(t->info_->next);
    t->info_->next = nullptr;
  }
  if (t->info_->domain_attr->cq_data_size < 8) return Errc::not_supported;
  // Address remote memory by virtual address on every provider: the remote
  // side of an operation then needs only (key, address), as in uDAPL and
  // verbs. Providers that verify keys in software (tcp) honour the bit when
  // it is present in the info the domain is opened with.
  t->info_->domain_attr->mr_mode |= FI_MR_VIRT_ADDR;
  if ((rc = fi_fabric(t->info_->fabric_attr, &t->fabric_, nullptr))) return from_fi(rc);
  t->desc_ = describe(t->info_.get());
  if (t->desc_.address.empty()) t->desc_.address = options.address;
  return std::shared_ptr<Transport>(std::move(t));
}

Result<std::vector<FabricInfo>> Transport::list(const std::string& provider_filter) {
  InfoPtr hints = make_hints(provider_filter);
  if (!hints) return Errc::no_memory;
  fi_info* raw = nullptr;
  int rc = fi_getinfo(kFiVersion, nullptr, nullptr, 0, hints.get(), &raw);
  if (rc == -FI_ENODATA) return std::vector<FabricInfo>{};
  if (rc) return from_fi(rc);
  InfoPtr all(raw);
  // Native atomics are probed separately: asking for FI_ATOMIC filters out
  // providers that lack them.
  std::set<std::string> atomic_domains;
  InfoPtr ahints = make_hints(provider_filter);
  ahints->caps |= FI_ATOMIC;
  fi_info* araw = nullptr;
  if (fi_getinfo(kFiVersion, nullptr, nullptr, 0, ahints.get(), &araw) == 0) {
    for (fi_info* p = araw; p; p = p->next)
      atomic_domains.insert(std::string(p->fabric_attr->prov_name) + "/" + p->domain_attr->name);
    fi_freeinfo(araw);
  }
  std::vector<FabricInfo> out;
  std::set<std::string> seen;
  for (fi_info* p = all.get(); p; p = p->next) {
    p->domain_attr->mr_mode |= FI_MR_VIRT_ADDR;  // as Transport::open does
    FabricInfo d = describe(p);
    if (d.address.empty()) continue;  // Remora addresses peers by IPv4
    if (excluded(d.provider)) continue;
    std::string id = d.provider + "/" + d.domain_name + "/" + d.address;
    if (!seen.insert(id).second) continue;
    d.native_atomics = atomic_domains.count(d.provider + "/" + d.domain_name) != 0;
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace remora::backend
