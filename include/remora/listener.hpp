// remora/listener.hpp - accept incoming connections.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "remora/endpoint.hpp"
#include "remora/result.hpp"

namespace remora {

namespace detail {
struct ListenerImpl;
struct ConnRequestImpl;
}  // namespace detail

/// An incoming connection request. Accept it into an unconnected Endpoint
/// or reject it; a request dropped without either is rejected.
class ConnectionRequest {
 public:
  ConnectionRequest() = default;
  explicit ConnectionRequest(std::shared_ptr<detail::ConnRequestImpl> impl) : impl_(std::move(impl)) {}
  ConnectionRequest(ConnectionRequest&&) noexcept = default;
  ConnectionRequest& operator=(ConnectionRequest&&) noexcept = default;
  ConnectionRequest(const ConnectionRequest&) = delete;
  ConnectionRequest& operator=(const ConnectionRequest&) = delete;
  ~ConnectionRequest();

  bool valid() const noexcept { return impl_ != nullptr; }
  /// The client's private data.
  const std::vector<std::uint8_t>& private_data() const noexcept;
  /// The client's address (numeric host) and source port, when the transport
  /// reports them; empty and 0 otherwise.
  std::string peer_host() const;
  std::uint16_t peer_port() const noexcept;
  /// Accept into `ep` (same zone, unconnected). The endpoint reports
  /// `established` when the connection is up. Errors: invalid_handle (request
  /// already used), invalid_state, zone_mismatch, invalid_argument.
  Result<void> accept(Endpoint& ep, std::span<const std::uint8_t> private_data = {});
  /// Like accept(), but `ep` may belong to any zone of the same Fabric (the
  /// uDAPL layer: a PSP belongs to the IA, the accepting EP to any PZ).
  Result<void> accept_any_zone(Endpoint& ep, std::span<const std::uint8_t> private_data = {});
  /// Errors: invalid_handle (already used), invalid_argument.
  Result<void> reject(std::span<const std::uint8_t> private_data = {});

 private:
  std::shared_ptr<detail::ConnRequestImpl> impl_;
};

/// A passive endpoint bound to an address and port. Move-only.
class Listener {
 public:
  Listener() = default;
  explicit Listener(std::shared_ptr<detail::ListenerImpl> impl) : impl_(std::move(impl)) {}
  Listener(Listener&&) noexcept = default;
  /// Closes the listener this handle held, as the destructor does.
  Listener& operator=(Listener&& other) noexcept;
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  ~Listener();

  bool valid() const noexcept { return impl_ != nullptr; }
  /// The port actually bound (useful after listening on port 0).
  std::uint16_t port() const noexcept;
  /// Wait for the next request. Errors: timeout, invalid_handle.
  Result<ConnectionRequest> next_request(std::chrono::milliseconds timeout);
  /// Readable while requests are queued.
  int fd() const noexcept;
  void close() noexcept;

 private:
  std::shared_ptr<detail::ListenerImpl> impl_;
};

}  // namespace remora
