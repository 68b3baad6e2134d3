// Fabric and ProtectionZone handles.
#include "core/direct/copier.hpp"
#include "core/impl.hpp"

namespace remora {

Result<std::vector<FabricInfo>> list_fabrics(const std::string& provider_filter) {
  return backend::Transport::list(provider_filter);
}

Result<Fabric> Fabric::open(const FabricOptions& options) {
  auto check = detail::check::make(options.check);  // REMORA_CHECK (docs/check.md)
  if (!check) return check.error();
  auto t = backend::Transport::open(options);
  if (!t) return t.error();
  auto impl = std::make_shared<detail::FabricImpl>();
  impl->transport = std::move(*t);
  impl->options = options;
  impl->check = std::move(*check);
  if (impl->check && impl->check->config().noncoherent) {
    impl->info = impl->transport->info();
    impl->info->requires_sync = true;  // emulated non-coherent memory
  }
  return Fabric(std::move(impl));
}

Fabric::~Fabric() = default;

const FabricInfo& Fabric::info() const noexcept {
  static const FabricInfo empty;
  if (!impl_) return empty;
  return impl_->info ? *impl_->info : impl_->transport->info();
}

Result<ProtectionZone> Fabric::create_zone(const ZoneOptions& options) {
  if (!impl_) return Errc::invalid_handle;
  if (options.key_bits < 16 || options.key_bits > 64) return Errc::invalid_argument;
  auto d = impl_->transport->open_domain();
  if (!d) return d.error();
  auto zone = std::make_shared<detail::ZoneImpl>();
  zone->fabric = impl_;
  zone->domain = std::move(*d);
  zone->id = detail::next_object_id();
  zone->busy_poll = impl_->options.busy_poll;
  zone->check = impl_->check.get();
  zone->key_mask = options.key_bits == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << options.key_bits) - 1;
  // The same-host direct path, on unless the program or REMORA_SAMEHOST=0
  // turned it off; never on the in-memory transport, whose tests decide when
  // each operation lands.
  if (impl_->options.provider == "mem")
    zone->direct_why_not = "the in-memory transport";
  else if (!impl_->options.same_host)
    zone->direct_why_not = "the direct path is off in this zone (FabricOptions::same_host)";
  else if (!detail::direct::allowed_by_environment())
    zone->direct_why_not = "the direct path is off in this zone (REMORA_SAMEHOST)";
  else if (zone->check != nullptr)
    // remora-check looks for what a network would expose (memory reused
    // before its write completed, a flush missing): operations completed at
    // post time by the direct path would hide exactly that.
    zone->direct_why_not = "the direct path is off while remora-check runs";
  else
    zone->direct = detail::direct::Table::create(zone->direct_why_not);
  if (zone->direct) {
    zone->direct_split = detail::direct::copy_helper_allowed_by_environment();
    zone->direct_gather = detail::direct::gather_allowed_by_environment();
    zone->direct_huge = detail::direct::huge_pages_allowed_by_environment();
    zone->ring_writes = detail::direct::ring_writes_allowed_by_environment();
    zone->direct_pull = detail::direct::peer_helper_allowed_by_environment();
  }
  zone->agent = std::make_shared<detail::Agent>(zone.get(), zone->busy_poll);
  // Entries a connection's poll read from a shared transport queue for
  // other connections: the agent looks at those (the zone, and so the agent,
  // outlives every connection of its domain).
  zone->domain->set_ready_callback(
      [agent = zone->agent.get()](void* owner) { agent->look_at(static_cast<const detail::EndpointImpl*>(owner)); });
  // Same-host peers may wake the agent thread when they need an answer now
  // (a busy-polling agent never sleeps in epoll: it keeps no doorbell).
  if (zone->direct && options.progress_thread && !zone->busy_poll)
    zone->direct->set_doorbell(zone->agent->open_doorbell());
  if (options.progress_thread) zone->agent->start();
  return ProtectionZone(std::move(zone));
}

void Fabric::close() noexcept { impl_.reset(); }

}  // namespace remora
