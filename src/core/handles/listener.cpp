// Listener and ConnectionRequest.
#include <cstring>

#include "core/impl.hpp"

namespace remora {
namespace detail {

ListenerImpl::~ListenerImpl() { close(); }

void ListenerImpl::close() noexcept {
  std::unique_ptr<backend::PassiveEndpoint> p;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (closed) return;
    closed = true;
    p = std::move(pep);
    // Requests nobody took are rejected, as a dropped request is.
    for (auto& r : requests) {
      if (p && !r->used) (void)p->reject(r->request, wire::make_hello(0, {}));
      r->used = true;
    }
    requests.clear();
  }
  cv.notify_all();
  if (p) {
    MutexLock lock(zone->cm_mu);
    zone->cm_listeners.erase(p->cm_id());
  }
}
}  // namespace detail

ConnectionRequest::~ConnectionRequest() {
  if (impl_ && !impl_->used) (void)reject();
}

const std::vector<std::uint8_t>& ConnectionRequest::private_data() const noexcept {
  static const std::vector<std::uint8_t> empty;
  return impl_ ? impl_->private_data : empty;
}

namespace {

// Accept `req` into `ep`; `any_zone`: `ep` may be in any zone of the
// listener's Fabric instead of the listener's own zone.
Result<void> accept_into(detail::ConnRequestImpl* req, Endpoint& ep, std::span<const std::uint8_t> pdata,
                         bool any_zone) {
  if (req == nullptr || req->used) return Errc::invalid_handle;
  if (!ep.valid()) return Errc::invalid_handle;
  if (pdata.size() > kMaxPrivateData) return Errc::invalid_argument;
  auto listener = req->listener.lock();
  if (!listener) return Errc::invalid_handle;
  auto* e = ep.impl().get();
  if (any_zone ? e->zone->fabric != listener->zone->fabric : e->zone != listener->zone) return Errc::zone_mismatch;
  detail::MutexLock lock(e->mu);
  if (e->closed) return Errc::invalid_handle;
  if (e->state != EndpointState::unconnected) return Errc::invalid_state;
  if (auto r = e->setup_connection(req->request); !r) return r.error();
  e->peer_max_message = req->peer_max_message;
  if (auto r = e->conn->accept(detail::wire::make_hello(e->options.max_message, pdata)); !r) {
    e->abandon_connection();
    return r.error();
  }
  e->state = EndpointState::connect_pending;
  e->active = false;
  req->used = true;
  return {};
}

}  // namespace

Result<void> ConnectionRequest::accept(Endpoint& ep, std::span<const std::uint8_t> pdata) {
  return accept_into(impl_.get(), ep, pdata, false);
}

Result<void> ConnectionRequest::accept_any_zone(Endpoint& ep, std::span<const std::uint8_t> pdata) {
  return accept_into(impl_.get(), ep, pdata, true);
}

std::string ConnectionRequest::peer_host() const { return impl_ ? impl_->peer_host : std::string(); }

std::uint16_t ConnectionRequest::peer_port() const noexcept { return impl_ ? impl_->peer_port : 0; }

Result<void> ConnectionRequest::reject(std::span<const std::uint8_t> pdata) {
  if (!impl_ || impl_->used) return Errc::invalid_handle;
  if (pdata.size() > kMaxPrivateData) return Errc::invalid_argument;
  auto listener = impl_->listener.lock();
  if (!listener) return Errc::invalid_handle;
  std::lock_guard<std::mutex> lock(listener->mu);
  if (!listener->pep) return Errc::invalid_handle;
  impl_->used = true;
  return listener->pep->reject(impl_->request, detail::wire::make_hello(0, pdata));
}

// The handle is the only one of its listener: dropping it closes the
// listener (and rejects requests nobody took) on the owner's thread, never on
// a progress thread that happens to drop the last internal reference.
Listener::~Listener() {
  if (impl_) impl_->close();
}

Listener& Listener::operator=(Listener&& other) noexcept {
  if (this != &other) {
    if (impl_) impl_->close();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

std::uint16_t Listener::port() const noexcept {
  if (!impl_) return 0;
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->pep ? impl_->pep->port() : 0;
}

Result<ConnectionRequest> Listener::next_request(std::chrono::milliseconds timeout) {
  if (!impl_) return Errc::invalid_handle;
  std::unique_lock<std::mutex> lock(impl_->mu);
  auto ready = [&] { return !impl_->requests.empty() || impl_->closed; };
  if (timeout.count() < 0)
    impl_->cv.wait(lock, ready);
  else if (timeout.count() == 0 ? !ready() : !impl_->cv.wait_for(lock, timeout, ready))
    return Errc::timeout;
  if (impl_->closed) return Errc::invalid_handle;
  auto req = std::move(impl_->requests.front());
  impl_->requests.pop_front();
  if (impl_->requests.empty()) impl_->signal.clear();
  return ConnectionRequest(std::move(req));
}

int Listener::fd() const noexcept { return impl_ ? impl_->signal.fd() : -1; }

void Listener::close() noexcept {
  if (impl_) impl_->close();
  impl_.reset();
}

}  // namespace remora
