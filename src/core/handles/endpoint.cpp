// Endpoint: the synchronous checks (docs/design.md, "Checks at post time"),
// then hand-off to the engine.
#include <cstring>
#include <optional>

#include "core/impl.hpp"

namespace remora {
namespace {

using detail::EndpointImpl;
using detail::OpSlot;
namespace wire = detail::wire;

/// Local segment checks: handle, zone, bounds, privilege.
Result<detail::CheckedSegments> check_segments(const std::shared_ptr<detail::ZoneImpl>& zone,
                                               std::span<const Segment> segs, Access need) {
  const std::size_t limit = std::min(kMaxSegments, zone->fabric->transport->info().max_segments);
  if (segs.size() > limit) return Errc::invalid_argument;
  detail::CheckedSegments out;
  for (const Segment& s : segs) {
    if (s.region == nullptr || !s.region->valid()) return Errc::invalid_handle;
    const auto& r = *s.region->impl();
    if (r.zone != zone) return Errc::zone_mismatch;
    if (s.length > 0 && !r.contains(s.address, s.length)) return Errc::invalid_argument;
    if (!has(r.access, need)) return Errc::privileges;
    out.iov[out.count++] = backend::Iov{const_cast<void*>(s.address), s.length, r.mkey->desc()};
    out.total += s.length;
  }
  return out;
}

Result<void> check_remote(const RemoteRegion& dst, std::uint64_t offset, std::uint64_t len, Access need) {
  if (offset > dst.length() || len > dst.length() - offset) return Errc::length_error;
  if (need != Access::none && !has(dst.access(), need)) return Errc::privileges;
  return {};
}

enum class Rma { write, write_imm, read };

Result<void> rma(EndpointImpl* ep, Rma what, std::span<const Segment> segs, const RemoteRegion& r, std::uint64_t off,
                 std::uint32_t imm, std::uint64_t cookie, PostFlags flags) {
  if (ep == nullptr) return Errc::invalid_handle;
  const bool write = what != Rma::read;
  auto local = check_segments(ep->zone, segs, write ? Access::local_read : Access::local_write);
  if (!local) return local.error();
  if (auto c = check_remote(r, off, local->total, write ? Access::remote_write : Access::remote_read); !c)
    return c.error();
  detail::Operation op{write ? OpSlot::Kind::write : OpSlot::Kind::read, write ? Opcode::write : Opcode::read};
  op.local = &*local;
  op.segments = segs.data();
  op.length = local->total;
  op.raddr = r.address() + off;
  op.rkey = r.key();
  op.remote_base = r.address();
  op.remote_persistent = r.persistent();
  op.with_data = what == Rma::write_imm;
  op.data = op.with_data ? wire::write_imm_data(imm, local->total) : 0;
  return ep->post(op, cookie, flags);
}

/// A send; `imm` set: with immediate data.
Result<void> message(EndpointImpl* ep, std::span<const Segment> segs, std::optional<std::uint32_t> imm,
                     std::uint64_t cookie, PostFlags flags) {
  if (ep == nullptr) return Errc::invalid_handle;
  auto local = check_segments(ep->zone, segs, Access::local_read);
  if (!local) return local.error();
  detail::Operation op{OpSlot::Kind::send, Opcode::send};
  op.local = &*local;
  op.segments = segs.data();
  op.length = local->total;
  op.data = imm ? wire::data(wire::user_msg_imm, *imm) : wire::data(wire::user_msg);
  return ep->post(op, cookie, flags);
}

// Closing by the owner: queued connection events first (an accepted
// connection may be established already), then the goodbye and shutdown.
void close_handle(detail::EndpointImpl* ep) noexcept {
  if (!ep) return;
  ep->settle_accept();
  ep->close();
}

}  // namespace

// The handle is the only one of its endpoint: dropping it is the owner
// closing the connection, on the owner's thread (goodbye, shutdown). The
// engine object may outlive it briefly on a progress thread, closed.
Endpoint::~Endpoint() { close_handle(impl_.get()); }

Endpoint& Endpoint::operator=(Endpoint&& other) noexcept {
  if (this != &other) {
    close_handle(impl_.get());
    impl_ = std::move(other.impl_);
  }
  return *this;
}

std::uint64_t Endpoint::id() const noexcept { return impl_ ? impl_->id : 0; }
EndpointState Endpoint::state() const noexcept { return impl_ ? impl_->state.load() : EndpointState::disconnected; }

std::size_t Endpoint::max_segments() const noexcept {
  return impl_ ? std::min(kMaxSegments, impl_->zone->fabric->transport->info().max_segments) : 0;
}

std::size_t Endpoint::peer_max_message() const noexcept {
  if (!impl_) return 0;
  detail::MutexLock lock(impl_->mu);
  return impl_->peer_max_message;
}

Result<void> Endpoint::connect(const std::string& host, std::uint16_t port, std::span<const std::uint8_t> pdata) {
  if (!impl_) return Errc::invalid_handle;
  if (pdata.size() > kMaxPrivateData || host.empty()) return Errc::invalid_argument;
  detail::MutexLock lock(impl_->mu);
  if (impl_->closed) return Errc::invalid_handle;
  if (impl_->state != EndpointState::unconnected) return Errc::invalid_state;
  if (auto r = impl_->setup_connection(nullptr); !r) return r.error();
  auto r = impl_->conn->connect(host, port, wire::make_hello(impl_->options.max_message, pdata));
  if (!r) {
    impl_->abandon_connection();
    return r.error();
  }
  impl_->state = EndpointState::connect_pending;
  impl_->active = true;
  return {};
}

Result<ConnectionEvent> Endpoint::next_event(std::chrono::milliseconds timeout) {
  if (!impl_) return Errc::invalid_handle;
  std::unique_lock<std::mutex> lock(impl_->ev_mu);
  auto ready = [&] { return !impl_->events.empty(); };
  if (timeout.count() < 0)
    impl_->ev_cv.wait(lock, ready);
  else if (timeout.count() == 0 ? !ready() : !impl_->ev_cv.wait_for(lock, timeout, ready))
    return Errc::timeout;  // (a zero timeout only looks: a timed wait would still sleep and wake)
  ConnectionEvent ev = std::move(impl_->events.front());
  impl_->events.pop_front();
  if (impl_->events.empty()) impl_->ev_signal.clear();
  return ev;
}

Result<std::vector<std::uint8_t>> Endpoint::connect_and_wait(const std::string& host, std::uint16_t port,
                                                             std::span<const std::uint8_t> pdata,
                                                             std::chrono::milliseconds timeout) {
  if (auto r = connect(host, port, pdata); !r) return r.error();
  auto ev = next_event(timeout);
  if (!ev) return ev.error();
  switch (ev->type) {
    case ConnectionEventType::established: return std::move(ev->private_data);
    case ConnectionEventType::rejected: return Errc::connection_rejected;
    case ConnectionEventType::unreachable: return Errc::unreachable;
    default: return Errc::not_connected;
  }
}

int Endpoint::event_fd() const noexcept { return impl_ ? impl_->ev_signal.fd() : -1; }

Result<void> Endpoint::disconnect() {
  if (!impl_) return Errc::invalid_handle;
  auto* ep = impl_.get();
  ep->settle_accept();
  ep->release_at_peer();  // while still connected
  detail::MutexLock lock(ep->mu);
  if (ep->closed) return Errc::invalid_handle;
  const EndpointState st = ep->state;
  if (st == EndpointState::connected) {
    ep->flush_gathered();  // posted before the disconnect: placed, as over the transport
    // A refused one ended the connection (lost) and flushed the rest.
    if (ep->state != EndpointState::connected) return {};
    ep->say_goodbye();
  }
  if (st == EndpointState::connected || st == EndpointState::connect_pending) {
    ep->state = EndpointState::disconnected;
    ep->conn->shutdown();
    ep->drain();  // what already finished is reported as such; the rest as flushed
    ep->flush_all();
    ep->push_event(ConnectionEvent{ConnectionEventType::disconnected, {}});
  }
  return {};
}

Result<void> Endpoint::write(std::span<const Segment> src, const RemoteRegion& dst, std::uint64_t off,
                             std::uint64_t cookie, PostFlags flags) {
  return rma(impl_.get(), Rma::write, src, dst, off, 0, cookie, flags);
}

Result<void> Endpoint::write_imm(std::span<const Segment> src, const RemoteRegion& dst, std::uint64_t off,
                                 std::uint32_t imm, std::uint64_t cookie, PostFlags flags) {
  return rma(impl_.get(), Rma::write_imm, src, dst, off, imm, cookie, flags);
}

Result<void> Endpoint::read(std::span<const Segment> dst, const RemoteRegion& src, std::uint64_t off,
                            std::uint64_t cookie, PostFlags flags) {
  return rma(impl_.get(), Rma::read, dst, src, off, 0, cookie, flags);
}

Result<void> Endpoint::send(std::span<const Segment> src, std::uint64_t cookie, PostFlags flags) {
  return message(impl_.get(), src, std::nullopt, cookie, flags);
}

Result<void> Endpoint::send_imm(std::span<const Segment> src, std::uint32_t imm, std::uint64_t cookie,
                                PostFlags flags) {
  return message(impl_.get(), src, imm, cookie, flags);
}

Result<void> Endpoint::recv(std::span<const Segment> dst, std::uint64_t cookie) {
  if (!impl_) return Errc::invalid_handle;
  if (impl_->srq) return Errc::invalid_argument;
  auto local = check_segments(impl_->zone, dst, Access::local_write);
  if (!local) return local.error();
  auto* ep = impl_.get();
  detail::MutexLock lock(ep->mu);
  if (ep->closed) return Errc::invalid_handle;
  if (ep->state == EndpointState::disconnected || ep->state == EndpointState::error) {
    Completion c;
    c.cookie = cookie;
    c.op = Opcode::recv;
    c.status = make_error_code(Errc::flushed);
    c.endpoint_id = ep->id;
    ep->recv_cq->push(std::move(c));
    return {};
  }
  if (ep->receives.posted.size() >= ep->options.max_recv) return Errc::queue_full;
  ep->receives.post(detail::PostedRecv{cookie, {local->iov, local->iov + local->count}});
  return {};
}

Result<void> Endpoint::atomic_write(const RemoteRegion& dst, std::uint64_t off, std::uint64_t value,
                                    std::uint64_t cookie, PostFlags flags) {
  if (!impl_) return Errc::invalid_handle;
  if ((dst.address() + off) % 8 != 0) return Errc::invalid_argument;
  if (auto c = check_remote(dst, off, 8, Access::remote_write); !c) return c.error();
  detail::Operation op{OpSlot::Kind::ctl, Opcode::atomic_write};
  op.length = 8;
  op.ctl = wire::make_ctl(wire::op_atomic_write, dst.key(), dst.address() + off, 8);
  op.ctl.value = value;
  return impl_->post(op, cookie, flags);
}

Result<void> Endpoint::flush(const RemoteRegion& dst, std::uint64_t off, std::uint64_t len, FlushType type,
                             std::uint64_t cookie, PostFlags flags) {
  if (!impl_) return Errc::invalid_handle;
  if (type != FlushType::visibility && type != FlushType::persistent) return Errc::invalid_argument;
  if (auto c = check_remote(dst, off, len, Access::none); !c) return c.error();
  if (dst.access() == Access::none) return Errc::privileges;
  if (type == FlushType::persistent && !dst.persistent()) return Errc::not_supported;
  detail::Operation op{OpSlot::Kind::ctl, Opcode::flush};
  op.length = len;
  op.ctl = wire::make_ctl(wire::op_flush, dst.key(), dst.address() + off, len);
  op.ctl.flush_type = static_cast<std::uint8_t>(type);
  op.remote_base = dst.address();
  op.remote_persistent = dst.persistent();
  // Writes complete on delivery: the target has placed (and checked) their
  // data. A VISIBILITY flush inside the range of the latest write posted on
  // this endpoint therefore completes here, with no message, as soon as
  // every earlier operation has completed. Any other flush goes to the
  // target agent, which checks key, bounds and privilege of the whole range
  // after every earlier write on the ordered connection has been placed.
  op.may_complete_locally = type == FlushType::visibility;
  return impl_->post(op, cookie, flags);
}

Result<void> Endpoint::reset() {
  if (!impl_) return Errc::invalid_handle;
  {
    detail::MutexLock lock(impl_->mu);
    if (impl_->closed) return Errc::invalid_handle;
    if (impl_->state != EndpointState::disconnected && impl_->state != EndpointState::error) return Errc::invalid_state;
  }
  impl_->drop_connection();
  detail::MutexLock lock(impl_->mu);
  impl_->state = EndpointState::unconnected;
  return {};
}

Result<void> SharedReceiveQueue::recv(std::span<const Segment> dst, std::uint64_t cookie) {
  if (!impl_) return Errc::invalid_handle;
  auto local = check_segments(impl_->zone, dst, Access::local_write);
  if (!local) return local.error();
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->queue.posted.size() >= impl_->capacity) return Errc::queue_full;
  impl_->queue.post(detail::PostedRecv{cookie, {local->iov, local->iov + local->count}});
  return {};
}

std::size_t SharedReceiveQueue::posted() const noexcept {
  if (!impl_) return 0;
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->queue.posted.size();
}

void Endpoint::close() noexcept {
  close_handle(impl_.get());
  impl_.reset();
}

}  // namespace remora
