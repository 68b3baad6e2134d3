// src/fabric/mem_backend.hpp - the in-memory transport: connections between
// zones of one process, no sockets, no threads, every step under the test's
// control. Opened through Transport::open with provider "mem"; the address
// names the network, so every transport opened with the same address (a
// Fabric and a test's raw peer) reaches the same listeners and memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "fabric/backend.hpp"

namespace remora::backend::mem {

constexpr const char* kProvider = "mem";

/// The test's handle on one in-memory network.
class Network {
 public:
  virtual ~Network() = default;
  /// Hold every operation posted from now on (RMA, sends, injected
  /// messages) in flight until deliver(); off: operations are carried out
  /// when posted (after any still held).
  virtual void hold(bool on) = 0;
  /// Carry out up to `n` held operations, oldest first; returns how many.
  virtual std::size_t deliver(std::size_t n = static_cast<std::size_t>(-1)) = 0;
  /// Carry out the held operation at position `i` (0 = oldest) ahead of the
  /// others (a transport completing out of order); false when there is none.
  virtual bool deliver_at(std::size_t i) = 0;
  /// Operations held now.
  virtual std::size_t held() const = 0;
  /// At most `n` held operations per connection: a post beyond that fails
  /// with -EAGAIN, as a full send queue does. 0: no limit.
  virtual void limit_in_flight(std::size_t n) = 0;
  /// Every connection breaks at once, as when the peer process dies: no
  /// goodbye, both ends get a shutdown event, held operations fail.
  virtual void cut_all() = 0;
  /// Connections established and not shut down.
  virtual std::size_t connections() const = 0;
};

/// The network named `name`, created on first use; kept while a transport or
/// a handle returned here refers to it.
std::shared_ptr<Network> network(const std::string& name);

Result<std::shared_ptr<Transport>> open(const FabricOptions& options);

}  // namespace remora::backend::mem
