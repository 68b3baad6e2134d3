// src/fabric/mem_backend.cpp - the in-memory implementation of backend.hpp
// (see mem_backend.hpp). One mutex per network guards everything; nothing
// here calls back into the core, so the core may call in with its own locks
// held. Behaves as the tcp provider does where the core can tell: an access
// outside a registration (key, bounds, privilege) fails the operation with
// ECANCELED and breaks the connection at both ends; sends wait for a posted
// receive; connection management is a queue of events per domain.
#include "fabric/mem_backend.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

namespace remora::backend::mem {
namespace {

/// An eventfd kept readable while a queue is non-empty.
class Readiness {
 public:
  Readiness() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~Readiness() {
    if (fd_ >= 0) ::close(fd_);
  }
  Readiness(const Readiness&) = delete;
  Readiness& operator=(const Readiness&) = delete;
  void raise() noexcept {
    const std::uint64_t one = 1;
    (void)!::write(fd_, &one, sizeof one);
  }
  void clear() noexcept {
    std::uint64_t v;
    (void)!::read(fd_, &v, sizeof v);
  }
  int fd() const noexcept { return fd_; }

 private:
  int fd_;
};

struct Registration {
  std::uint64_t domain;
  std::uintptr_t addr;
  std::size_t len;
  Access access;
};

/// One operation on the wire.
struct Op {
  enum Kind { write, read, send, inject, close } kind = write;
  std::uint64_t src = 0;  // connection id
  std::vector<Iov> iov;
  std::vector<std::uint8_t> bytes;  // injected data (copied at post)
  std::uint64_t raddr = 0, key = 0, data = 0;
  bool with_data = false;
  OpSlotHeader* ctx = nullptr;
};

struct Message {
  std::vector<std::uint8_t> bytes;
  std::uint64_t data;
};

struct PostedBuffer {
  void* buf;
  std::size_t len;
  OpSlotHeader* ctx;
};

class MemConnection;
class MemDomain;
class MemPassive;

std::size_t total_of(const std::vector<Iov>& iov) {
  std::size_t n = 0;
  for (const auto& v : iov) n += v.len;
  return n;
}

class Net final : public Network {
 public:
  explicit Net(std::string name) : name_(std::move(name)) {}

  // Network (test controls).
  void hold(bool on) override {
    std::lock_guard<std::mutex> lock(mu);
    holding = on;
  }
  std::size_t deliver(std::size_t n) override {
    std::lock_guard<std::mutex> lock(mu);
    std::size_t done = 0;
    while (done < n && !wire.empty()) {
      Op op = std::move(wire.front());
      wire.pop_front();
      carry(op);
      ++done;
    }
    return done;
  }
  bool deliver_at(std::size_t i) override {
    std::lock_guard<std::mutex> lock(mu);
    if (i >= wire.size()) return false;
    Op op = std::move(wire[i]);
    wire.erase(wire.begin() + static_cast<std::ptrdiff_t>(i));
    carry(op);
    return true;
  }
  std::size_t held() const override {
    std::lock_guard<std::mutex> lock(mu);
    return wire.size();
  }
  void limit_in_flight(std::size_t n) override {
    std::lock_guard<std::mutex> lock(mu);
    limit = n;
  }
  void cut_all() override;
  std::size_t connections() const override;

  const std::string& name() const noexcept { return name_; }

  // Everything below: with mu held.
  int post(Op op);
  void carry(Op& op);
  void fail_op(const Op& op, int err);
  /// The connection ends at both sides (as the tcp provider drops it):
  /// each gets a shutdown event, their held operations fail.
  void break_pair(MemConnection& c);
  void end(MemConnection& c, bool notify_self);
  void push_cm(std::uint64_t domain, CmEvent ev);
  /// Drop the events of `cm_id` still queued in `domain` (a connection
  /// being destroyed, as libfabric's fi_close does).
  void drop_cm(std::uint64_t domain, const void* cm_id);
  void place(MemConnection& dst, Message m);

  mutable std::mutex mu;
  std::uint64_t next_id = 1;
  std::uint16_t next_port = 1;
  std::map<std::uint64_t, MemDomain*> domains;
  std::map<std::uint64_t, MemConnection*> conns;
  std::map<std::uint16_t, MemPassive*> listeners;
  std::map<std::uint64_t, Registration> regs;
  std::deque<Op> wire;
  bool holding = false;
  std::size_t limit = 0;

 private:
  std::string name_;
};

class MemKey final : public MemoryKey {
 public:
  MemKey(std::shared_ptr<Net> net, std::uint64_t key) : net_(std::move(net)), key_(key) {}
  ~MemKey() override {
    std::lock_guard<std::mutex> lock(net_->mu);
    net_->regs.erase(key_);
  }
  void* desc() const noexcept override { return nullptr; }
  std::uint64_t key() const noexcept override { return key_; }

 private:
  std::shared_ptr<Net> net_;
  std::uint64_t key_;
};

struct Pending {
  std::uint64_t connector;
};

class MemConnection final : public Connection {
 public:
  enum class St { idle, connecting, accepting, connected, shut };

  MemConnection(std::shared_ptr<Net> net, std::uint64_t domain, std::uint64_t pending, bool waitable)
      : domain(domain), pending(pending), net_(std::move(net)), waitable_(waitable) {
    std::lock_guard<std::mutex> lock(net_->mu);
    id = net_->next_id++;
    net_->conns[id] = this;
    if (pending != 0) st = St::accepting;
  }
  ~MemConnection() override {
    std::lock_guard<std::mutex> lock(net_->mu);
    // What this side injected (copied) and its shutdown still reach the
    // peer; operations on its memory do not.
    for (auto it = net_->wire.begin(); it != net_->wire.end();) {
      if (it->src != id) {
        ++it;
        continue;
      }
      if (it->kind == Op::inject || it->kind == Op::close) net_->carry(*it);
      it = net_->wire.erase(it);
    }
    if (peer != 0) net_->end(*this, false);
    net_->drop_cm(domain, this);
    net_->conns.erase(id);
  }

  Result<void> connect(const std::string& /*host*/, std::uint16_t port, std::span<const std::uint8_t> pdata) override;
  Result<void> accept(std::span<const std::uint8_t> pdata) override;
  void shutdown() noexcept override {
    std::lock_guard<std::mutex> lock(net_->mu);
    if (st != St::connected) {
      if (st == St::connecting || st == St::accepting) st = St::shut;
      return;
    }
    st = St::shut;
    // Operations that read or write this side's memory are cancelled; the
    // injected ones (already copied) and then the shutdown itself still
    // reach the peer, in order, as data in a socket before its FIN.
    for (auto it = net_->wire.begin(); it != net_->wire.end();) {
      if (it->src == id && it->kind != Op::inject) {
        if (it->ctx) push_cq(CqEntry{it->ctx, 0, 0, 0, ECANCELED});
        it = net_->wire.erase(it);
      } else {
        ++it;
      }
    }
    Op op;
    op.kind = Op::close;
    op.src = id;
    (void)net_->post(std::move(op));
  }

  int write(std::span<const Iov> iov, std::uint64_t raddr, std::uint64_t key, bool with_data, std::uint64_t data,
            OpSlotHeader* ctx) override {
    Op op;
    op.kind = Op::write;
    op.iov.assign(iov.begin(), iov.end());
    op.raddr = raddr;
    op.key = key;
    op.with_data = with_data;
    op.data = data;
    op.ctx = ctx;
    return post(std::move(op));
  }
  int read(std::span<const Iov> iov, std::uint64_t raddr, std::uint64_t key, OpSlotHeader* ctx) override {
    Op op;
    op.kind = Op::read;
    op.iov.assign(iov.begin(), iov.end());
    op.raddr = raddr;
    op.key = key;
    op.ctx = ctx;
    return post(std::move(op));
  }
  int send(std::span<const Iov> iov, std::uint64_t data, OpSlotHeader* ctx) override {
    Op op;
    op.kind = Op::send;
    op.iov.assign(iov.begin(), iov.end());
    op.data = data;
    op.ctx = ctx;
    return post(std::move(op));
  }
  int inject(const void* buf, std::size_t len, std::uint64_t data) override {
    if (len > kInjectSize) return -EMSGSIZE;
    Op op;
    op.kind = Op::inject;
    const auto* b = static_cast<const std::uint8_t*>(buf);
    op.bytes.assign(b, b + len);
    op.data = data;
    return post(std::move(op));
  }
  int recv(void* buf, std::size_t len, void* /*desc*/, OpSlotHeader* ctx) override {
    std::lock_guard<std::mutex> lock(net_->mu);
    if (st == St::shut) return -ENOTCONN;
    posted.push_back(PostedBuffer{buf, len, ctx});
    if (!unexpected.empty()) {
      Message m = std::move(unexpected.front());
      unexpected.pop_front();
      net_->place(*this, std::move(m));
    }
    return 0;
  }

  int poll(std::span<CqEntry> out) override {
    std::lock_guard<std::mutex> lock(net_->mu);
    std::size_t n = 0;
    while (n < out.size() && !cq.empty()) {
      out[n++] = cq.front();
      cq.pop_front();
    }
    if (cq.empty()) ready_.clear();
    return static_cast<int>(n);
  }
  int wait_fd() const noexcept override { return waitable_ ? ready_.fd() : -1; }
  bool try_wait() noexcept override {
    std::lock_guard<std::mutex> lock(net_->mu);
    if (!cq.empty()) return false;
    ready_.clear();
    return true;
  }
  const void* cm_id() const noexcept override { return this; }

  // With the network's mutex held.
  void push_cq(CqEntry e) {
    if (cq.empty()) ready_.raise();
    cq.push_back(e);
  }

  static constexpr std::size_t kInjectSize = 64;

  std::uint64_t id = 0;
  std::uint64_t domain;
  std::uint64_t pending;  // accepting: the connector's id
  std::uint64_t peer = 0;
  St st = St::idle;
  std::deque<CqEntry> cq;
  std::deque<PostedBuffer> posted;
  std::deque<Message> unexpected;

 private:
  int post(Op op) {
    std::lock_guard<std::mutex> lock(net_->mu);
    if (st != St::connected) return -ENOTCONN;
    op.src = id;
    if (net_->limit != 0 &&
        static_cast<std::size_t>(std::count_if(net_->wire.begin(), net_->wire.end(),
                                               [this](const Op& o) { return o.src == id; })) >= net_->limit)
      return -EAGAIN;
    return net_->post(std::move(op));
  }

  std::shared_ptr<Net> net_;
  bool waitable_;
  Readiness ready_;
};

class MemPassive final : public PassiveEndpoint {
 public:
  MemPassive(std::shared_ptr<Net> net, std::uint64_t domain, std::uint16_t port)
      : net_(std::move(net)), domain(domain), port_(port) {}
  ~MemPassive() override {
    std::lock_guard<std::mutex> lock(net_->mu);
    net_->listeners.erase(port_);
  }
  std::uint16_t port() const noexcept override { return port_; }
  Result<void> reject(const std::shared_ptr<void>& request, std::span<const std::uint8_t> pdata) override {
    const auto* p = static_cast<const Pending*>(request.get());
    if (p == nullptr) return Errc::invalid_argument;
    std::lock_guard<std::mutex> lock(net_->mu);
    auto it = net_->conns.find(p->connector);
    if (it == net_->conns.end() || it->second->st != MemConnection::St::connecting) return Errc::not_connected;
    MemConnection& c = *it->second;
    c.st = MemConnection::St::shut;
    CmEvent ev;
    ev.kind = CmEvent::error;
    ev.cm_id = &c;
    ev.err = ECONNREFUSED;
    ev.data.assign(pdata.begin(), pdata.end());
    net_->push_cm(c.domain, std::move(ev));
    return {};
  }
  const void* cm_id() const noexcept override { return this; }

  std::shared_ptr<Net> net_;
  std::uint64_t domain;

 private:
  std::uint16_t port_;
};

class MemDomain final : public Domain {
 public:
  explicit MemDomain(std::shared_ptr<Net> net) : net_(std::move(net)) {
    std::lock_guard<std::mutex> lock(net_->mu);
    id = net_->next_id++;
    net_->domains[id] = this;
  }
  ~MemDomain() override {
    std::lock_guard<std::mutex> lock(net_->mu);
    net_->domains.erase(id);
  }

  Result<std::unique_ptr<MemoryKey>> register_memory(void* addr, std::size_t len, Access access,
                                                     std::uint64_t requested_key) override {
    std::lock_guard<std::mutex> lock(net_->mu);
    if (net_->regs.count(requested_key) != 0) return Errc::address_in_use;
    net_->regs[requested_key] = Registration{id, reinterpret_cast<std::uintptr_t>(addr), len, access};
    return std::unique_ptr<MemoryKey>(std::make_unique<MemKey>(net_, requested_key));
  }
  Result<std::unique_ptr<Connection>> create_connection(const std::shared_ptr<void>& request, std::size_t /*cq_size*/,
                                                        bool waitable) override {
    std::uint64_t pending = 0;
    if (request) pending = static_cast<const Pending*>(request.get())->connector;
    return std::unique_ptr<Connection>(std::make_unique<MemConnection>(net_, id, pending, waitable));
  }
  Result<std::unique_ptr<PassiveEndpoint>> listen(const std::string& /*address*/, std::uint16_t port) override {
    std::lock_guard<std::mutex> lock(net_->mu);
    if (port == 0) {
      for (int tries = 0; tries < 65535 && (net_->next_port == 0 || net_->listeners.count(net_->next_port)); ++tries)
        ++net_->next_port;
      port = net_->next_port++;
      if (net_->listeners.count(port) != 0) return Errc::address_in_use;
    } else if (net_->listeners.count(port) != 0) {
      return Errc::address_in_use;
    }
    auto p = std::make_unique<MemPassive>(net_, id, port);
    net_->listeners[port] = p.get();
    return std::unique_ptr<PassiveEndpoint>(std::move(p));
  }
  bool next_cm_event(CmEvent& ev) override {
    std::lock_guard<std::mutex> lock(net_->mu);
    if (events.empty()) return false;
    ev = std::move(events.front());
    events.pop_front();
    if (events.empty()) ready_.clear();
    return true;
  }
  int cm_wait_fd() const noexcept override { return ready_.fd(); }
  bool cm_try_wait() noexcept override {
    std::lock_guard<std::mutex> lock(net_->mu);
    if (!events.empty()) return false;
    ready_.clear();
    return true;
  }

  // With the network's mutex held.
  void push(CmEvent ev) {
    if (events.empty()) ready_.raise();
    events.push_back(std::move(ev));
  }
  void drop(const void* cm_id) {
    std::erase_if(events, [cm_id](const CmEvent& ev) { return ev.cm_id == cm_id; });
    if (events.empty()) ready_.clear();
  }

  std::uint64_t id = 0;

 private:
  std::shared_ptr<Net> net_;
  std::deque<CmEvent> events;
  Readiness ready_;
};

Result<void> MemConnection::connect(const std::string& /*host*/, std::uint16_t port,
                                    std::span<const std::uint8_t> pdata) {
  std::lock_guard<std::mutex> lock(net_->mu);
  if (st != St::idle) return Errc::invalid_state;
  auto it = net_->listeners.find(port);
  if (it == net_->listeners.end()) {
    // Nobody listens: refused, with no data (the core reports unreachable).
    st = St::shut;
    CmEvent ev;
    ev.kind = CmEvent::error;
    ev.cm_id = this;
    ev.err = ECONNREFUSED;
    net_->push_cm(domain, std::move(ev));
    return {};
  }
  st = St::connecting;
  CmEvent ev;
  ev.kind = CmEvent::conn_request;
  ev.cm_id = it->second;
  ev.data.assign(pdata.begin(), pdata.end());
  ev.request = std::make_shared<Pending>(Pending{id});
  ev.peer_host = net_->name();
  ev.peer_port = static_cast<std::uint16_t>(id);
  net_->push_cm(it->second->domain, std::move(ev));
  return {};
}

Result<void> MemConnection::accept(std::span<const std::uint8_t> pdata) {
  std::lock_guard<std::mutex> lock(net_->mu);
  if (st != St::accepting) return Errc::invalid_state;
  auto it = net_->conns.find(pending);
  if (it == net_->conns.end() || it->second->st != St::connecting) return Errc::not_connected;
  MemConnection& c = *it->second;
  c.st = st = St::connected;
  c.peer = id;
  peer = c.id;
  CmEvent to_connector;
  to_connector.kind = CmEvent::connected;
  to_connector.cm_id = &c;
  to_connector.data.assign(pdata.begin(), pdata.end());
  net_->push_cm(c.domain, std::move(to_connector));
  CmEvent to_self;
  to_self.kind = CmEvent::connected;
  to_self.cm_id = this;
  net_->push_cm(domain, std::move(to_self));
  return {};
}

void Net::push_cm(std::uint64_t domain, CmEvent ev) {
  if (auto it = domains.find(domain); it != domains.end()) it->second->push(std::move(ev));
}

void Net::drop_cm(std::uint64_t domain, const void* cm_id) {
  if (auto it = domains.find(domain); it != domains.end()) it->second->drop(cm_id);
}

int Net::post(Op op) {
  if (holding) {
    wire.push_back(std::move(op));
    return 0;
  }
  while (!wire.empty()) {  // what was held goes first
    Op first = std::move(wire.front());
    wire.pop_front();
    carry(first);
  }
  carry(op);
  return 0;
}

void Net::fail_op(const Op& op, int err) {
  auto it = conns.find(op.src);
  if (it != conns.end() && op.ctx != nullptr) it->second->push_cq(CqEntry{op.ctx, 0, 0, 0, err});
}

void Net::end(MemConnection& c, bool notify_self) {
  c.st = MemConnection::St::shut;
  if (notify_self) {
    CmEvent ev;
    ev.kind = CmEvent::shutdown;
    ev.cm_id = &c;
    push_cm(c.domain, std::move(ev));
  }
  auto it = conns.find(c.peer);
  c.peer = 0;
  if (it == conns.end()) return;
  MemConnection& p = *it->second;
  p.peer = 0;
  if (p.st != MemConnection::St::connected) return;
  p.st = MemConnection::St::shut;
  CmEvent ev;
  ev.kind = CmEvent::shutdown;
  ev.cm_id = &p;
  push_cm(p.domain, std::move(ev));
}

void Net::break_pair(MemConnection& c) {
  const std::uint64_t a = c.id, b = c.peer;
  end(c, true);
  for (auto it = wire.begin(); it != wire.end();) {
    if (it->src == a || it->src == b) {
      fail_op(*it, ECONNRESET);
      it = wire.erase(it);
    } else {
      ++it;
    }
  }
}

void Net::place(MemConnection& dst, Message m) {
  PostedBuffer b = dst.posted.front();
  dst.posted.pop_front();
  if (m.bytes.size() > b.len) {
    dst.push_cq(CqEntry{b.ctx, kCqRecv, 0, 0, EMSGSIZE});
    return;
  }
  if (!m.bytes.empty()) std::memcpy(b.buf, m.bytes.data(), m.bytes.size());
  dst.push_cq(CqEntry{b.ctx, kCqRecv | kCqRemoteData, m.bytes.size(), m.data, 0});
}

void Net::carry(Op& op) {
  auto sit = conns.find(op.src);
  if (sit == conns.end()) return;  // the sender is gone
  MemConnection& src = *sit->second;
  if (op.kind == Op::close) {
    if (src.peer != 0) end(src, false);
    return;
  }
  auto pit = conns.find(src.peer);
  if (pit == conns.end() || pit->second->st != MemConnection::St::connected) {
    fail_op(op, ECONNRESET);
    return;
  }
  MemConnection& dst = *pit->second;
  if (op.kind == Op::write || op.kind == Op::read) {
    const std::size_t total = total_of(op.iov);
    auto rit = regs.find(op.key);
    const Access need = op.kind == Op::write ? Access::remote_write : Access::remote_read;
    const bool ok = rit != regs.end() && rit->second.domain == dst.domain && has(rit->second.access, need) &&
                    op.raddr >= rit->second.addr && total <= rit->second.len &&
                    op.raddr - rit->second.addr <= rit->second.len - total;
    if (!ok) {
      fail_op(op, ECANCELED);
      break_pair(src);
      return;
    }
    auto* remote = reinterpret_cast<std::uint8_t*>(op.raddr);
    for (const auto& v : op.iov) {
      if (v.len != 0) {
        if (op.kind == Op::write)
          std::memcpy(remote, v.addr, v.len);
        else
          std::memcpy(v.addr, remote, v.len);
      }
      remote += v.len;
    }
    if (op.kind == Op::write && op.with_data)
      dst.push_cq(CqEntry{nullptr, kCqRemoteWrite | kCqRemoteData, total, op.data, 0});
    if (op.ctx) src.push_cq(CqEntry{op.ctx, op.kind == Op::write ? kCqWrite : kCqRead, total, 0, 0});
    return;
  }
  // A message: its bytes leave the sender now (transmit complete).
  Message m{std::move(op.bytes), op.data};
  if (op.kind == Op::send) {
    for (const auto& v : op.iov) {
      const auto* b = static_cast<const std::uint8_t*>(v.addr);
      m.bytes.insert(m.bytes.end(), b, b + v.len);
    }
    if (op.ctx) src.push_cq(CqEntry{op.ctx, kCqSend, m.bytes.size(), 0, 0});
  }
  if (dst.posted.empty())
    dst.unexpected.push_back(std::move(m));
  else
    place(dst, std::move(m));
}

void Net::cut_all() {
  std::lock_guard<std::mutex> lock(mu);
  for (auto& [id, c] : conns) {
    if (c->st != MemConnection::St::connected) continue;
    c->st = MemConnection::St::shut;
    c->peer = 0;
    CmEvent ev;
    ev.kind = CmEvent::shutdown;
    ev.cm_id = c;
    push_cm(c->domain, std::move(ev));
  }
  for (const Op& op : wire) fail_op(op, ECONNRESET);
  wire.clear();
}

std::size_t Net::connections() const {
  std::lock_guard<std::mutex> lock(mu);
  return static_cast<std::size_t>(std::count_if(
      conns.begin(), conns.end(), [](const auto& kv) { return kv.second->st == MemConnection::St::connected; }));
}

class MemTransport final : public Transport {
 public:
  explicit MemTransport(std::shared_ptr<Net> net) : net_(std::move(net)) {
    info_.provider = kProvider;
    info_.fabric_name = kProvider;
    info_.domain_name = net_->name();
    info_.address = net_->name();
    info_.max_segments = kMaxSegments;
    info_.max_message = std::size_t{1} << 30;
    info_.inject_size = MemConnection::kInjectSize;
    info_.virtual_addressing = true;
  }
  const FabricInfo& info() const noexcept override { return info_; }
  Result<std::unique_ptr<Domain>> open_domain() override {
    return std::unique_ptr<Domain>(std::make_unique<MemDomain>(net_));
  }

 private:
  std::shared_ptr<Net> net_;
  FabricInfo info_;
};

std::mutex g_networks_mu;
std::map<std::string, std::weak_ptr<Net>>& networks() {
  static auto* m = new std::map<std::string, std::weak_ptr<Net>>;  // outlives static destructors
  return *m;
}

std::shared_ptr<Net> find_or_create(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_networks_mu);
  auto& all = networks();
  std::erase_if(all, [](const auto& kv) { return kv.second.expired(); });
  if (auto it = all.find(name); it != all.end())
    if (auto n = it->second.lock()) return n;
  auto n = std::make_shared<Net>(name);
  all[name] = n;
  return n;
}

}  // namespace

std::shared_ptr<Network> network(const std::string& name) { return find_or_create(name); }

Result<std::shared_ptr<Transport>> open(const FabricOptions& options) {
  if (options.address.empty()) return Errc::invalid_argument;
  return std::shared_ptr<Transport>(std::make_shared<MemTransport>(find_or_create(options.address)));
}

}  // namespace remora::backend::mem
