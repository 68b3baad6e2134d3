// remora/fabric.hpp - an opened fabric provider on one address/interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "remora/protection_zone.hpp"
#include "remora/result.hpp"

namespace remora {

namespace detail {
struct FabricImpl;
}

struct FabricOptions {
  /// libfabric provider name, or "mem": the in-memory transport, which
  /// connects zones of this process only (the address then names the
  /// in-process network); used by tests to run the engine without sockets.
  std::string provider = "tcp";
  std::string address = "127.0.0.1";  ///< local address to bind (selects the interface)
  bool busy_poll = false;             ///< target agents spin instead of sleeping
  /// remora-check (docs/check.md): checks to run, as in REMORA_CHECK
  /// ("reuse", "strict", "crash", "noncoherent", "all", "report=PATH", ...;
  /// "coherent" keeps "noncoherent" off for a program with no sync call).
  /// The environment variable, when set, applies as well. Empty: off.
  std::string check = {};
  /// The same-host direct path (docs/design.md, "Same-host direct path"):
  /// when the peer of a connection is a process of this host that this
  /// process may ptrace, writes and reads (and 8-byte atomic writes into
  /// regions the peer's zone mapped from a file or allocated) are placed in
  /// its memory directly, after the same key, bounds and privilege checks.
  /// Both peers must allow it. false, or REMORA_SAMEHOST=0 in the
  /// environment, keeps every connection of this fabric on the provider.
  bool same_host = true;
};

struct ZoneOptions {
  /// Width of the random remote keys of the zone's regions (uDAPL contexts
  /// are 32-bit). Between 16 and 64; providers choosing their own keys may
  /// ignore it.
  unsigned key_bits = 64;
  /// Run the zone's target agent on a thread of its own. Without it the
  /// zone's connection management and the requests its peers send progress
  /// only inside ProtectionZone::progress(); CompletionQueue::poll and wait
  /// drive the endpoints feeding that queue, Endpoint::next_event and
  /// Listener::next_request drive nothing. For single-threaded programs and
  /// deterministic tests.
  bool progress_thread = true;
};

/// What a provider/interface pair can do, as reported by remora-info.
struct FabricInfo {
  std::string provider;
  std::string fabric_name;
  std::string domain_name;  ///< interface, on tcp
  std::string address;
  std::size_t max_segments = 0;
  std::size_t max_message = 0;
  std::size_t inject_size = 0;
  bool native_atomics = false;
  bool virtual_addressing = false;
  bool requires_sync = false;  ///< non-coherent memory: dat_lmr_sync_* needed
  bool odp = true;             ///< memory is never pinned
};

/// Enumerate usable provider/interface pairs (FI_EP_MSG with RMA).
Result<std::vector<FabricInfo>> list_fabrics(const std::string& provider_filter = "");

class Fabric {
 public:
  Fabric() = default;
  explicit Fabric(std::shared_ptr<detail::FabricImpl> impl) : impl_(std::move(impl)) {}
  Fabric(Fabric&&) noexcept = default;
  Fabric& operator=(Fabric&&) noexcept = default;
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;
  ~Fabric();

  /// Errors: not_supported (no such provider or it lacks MSG+RMA),
  /// invalid_argument (address), provider_error.
  static Result<Fabric> open(const FabricOptions& options = {});

  bool valid() const noexcept { return impl_ != nullptr; }
  const FabricInfo& info() const noexcept;
  /// Errors: invalid_argument (key_bits not in 16..64), provider_error.
  Result<ProtectionZone> create_zone(const ZoneOptions& options = {});
  void close() noexcept;

 private:
  std::shared_ptr<detail::FabricImpl> impl_;
};

}  // namespace remora
