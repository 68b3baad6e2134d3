// compat/dat/src/dat_core.cpp - handle table, error conversion, naming,
// registry, IA, PZ, LMR, RMR, consumer contexts, dat_strerror.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <unordered_map>

#include "dat_dto_status.hpp"
#include "dat_internal.hpp"
#include "dat_registry.hpp"

namespace remora_dat {

std::recursive_mutex g_mu;

namespace {
std::unordered_map<const void*, std::shared_ptr<Obj>>& table() {
  static auto* t = new std::unordered_map<const void*, std::shared_ptr<Obj>>();
  return *t;
}
std::unordered_map<DAT_LMR_CONTEXT, std::weak_ptr<Lmr>>& lmr_contexts() {
  static auto* t = new std::unordered_map<DAT_LMR_CONTEXT, std::weak_ptr<Lmr>>();
  return *t;
}
std::unordered_map<std::uint64_t, std::weak_ptr<Ep>>& eps_by_rid() {
  static auto* t = new std::unordered_map<std::uint64_t, std::weak_ptr<Ep>>();
  return *t;
}
}  // namespace

void add_handle(const std::shared_ptr<Obj>& o) { table()[o.get()] = o; }
void remove_handle(const Obj* o) { table().erase(o); }

std::shared_ptr<Obj> lookup(const void* h, Kind k) {
  if (h == nullptr) return nullptr;
  auto it = table().find(h);
  if (it == table().end() || it->second->kind != k) return nullptr;
  return it->second;
}

std::shared_ptr<Obj> lookup_any(const void* h) {
  if (h == nullptr) return nullptr;
  auto it = table().find(h);
  return it == table().end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<Obj>> children_of(const Ia* ia) {
  std::vector<std::shared_ptr<Obj>> out;
  for (auto& [h, o] : table())
    if (o->ia.get() == ia) out.push_back(o);
  return out;
}

std::shared_ptr<Lmr> lmr_by_context(DAT_LMR_CONTEXT c) {
  auto it = lmr_contexts().find(c);
  return it == lmr_contexts().end() ? nullptr : it->second.lock();
}

void register_ep_rid(const std::shared_ptr<Ep>& ep) {
  if (ep->rid) eps_by_rid()[ep->rid] = ep;
}
void unregister_ep_rid(std::uint64_t rid) { eps_by_rid().erase(rid); }
std::shared_ptr<Ep> ep_by_rid(std::uint64_t rid) {
  auto it = eps_by_rid().find(rid);
  return it == eps_by_rid().end() ? nullptr : it->second.lock();
}

DAT_RETURN err(DAT_UINT32 type, DAT_UINT32 sub) { return DAT_ERROR(type, sub); }

DAT_RETURN from_errc(std::error_code ec, DAT_UINT32 handle_sub) {
  if (!ec) return DAT_SUCCESS;
  if (ec.category() != remora::remora_category()) return err(DAT_INTERNAL_ERROR, 0);
  using remora::Errc;
  switch (static_cast<Errc>(ec.value())) {
    case Errc::invalid_handle: return err(DAT_INVALID_HANDLE, handle_sub);
    case Errc::invalid_argument: return err(DAT_INVALID_PARAMETER, 0);
    case Errc::length_error: return err(DAT_LENGTH_ERROR, 0);
    case Errc::zone_mismatch: return err(DAT_PROTECTION_VIOLATION, 0);
    case Errc::privileges: return err(DAT_PRIVILEGES_VIOLATION, 0);
    case Errc::invalid_state: return err(DAT_INVALID_STATE, 0);
    case Errc::not_supported: return err(DAT_MODEL_NOT_SUPPORTED, 0);
    case Errc::queue_full: return err(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
    case Errc::timeout: return err(DAT_TIMEOUT_EXPIRED, 0);
    case Errc::unreachable: return err(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNREACHABLE);
    case Errc::address_in_use: return err(DAT_CONN_QUAL_IN_USE, 0);
    case Errc::no_memory: return err(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
    case Errc::not_connected: return err(DAT_INVALID_STATE, 0);
    default: return err(DAT_INTERNAL_ERROR, 0);
  }
}

// The table is in dat_dto_status.hpp (tests/test_dto_status.cpp checks it).
DAT_DTO_COMPLETION_STATUS dto_status(std::error_code ec) { return dto_status_of(ec); }

remora::Access to_access(DAT_MEM_PRIV_FLAGS p) {
  using remora::Access;
  Access a = Access::none;
  if (p & DAT_MEM_PRIV_LOCAL_READ_FLAG) a = a | Access::local_read;
  if (p & DAT_MEM_PRIV_LOCAL_WRITE_FLAG) a = a | Access::local_write;
  if (p & DAT_MEM_PRIV_REMOTE_READ_FLAG) a = a | Access::remote_read;
  if (p & DAT_MEM_PRIV_REMOTE_WRITE_FLAG) a = a | Access::remote_write;
  return a;
}

// ---------------------------------------------------------------- naming

namespace {

std::string iface_address(const std::string& iface) {
  in_addr probe{};
  if (inet_pton(AF_INET, iface.c_str(), &probe) == 1) return iface;
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return {};
  std::string out;
  for (ifaddrs* i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || iface != i->ifa_name) continue;
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
    out = buf;
    break;
  }
  freeifaddrs(ifs);
  return out;
}

std::string default_route_iface() {
  std::ifstream f("/proc/net/route");
  std::string line;
  std::getline(f, line);
  while (std::getline(f, line)) {
    std::istringstream is(line);
    std::string ifn, dest;
    is >> ifn >> dest;
    if (dest == "00000000") return ifn;
  }
  return {};
}

std::vector<std::string> ipv4_ifaces() {
  std::vector<std::string> out;
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return out;
  for (ifaddrs* i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    std::string n = i->ifa_name;
    bool dup = false;
    for (auto& x : out) dup |= x == n;
    if (!dup) out.push_back(n);
  }
  freeifaddrs(ifs);
  return out;
}

}  // namespace

std::vector<std::string> conf_fields(const std::string& line) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && isspace(static_cast<unsigned char>(line[i]))) ++i;
    if (i >= line.size() || line[i] == '#') break;
    std::string f;
    if (line[i] == '"') {
      ++i;
      while (i < line.size() && line[i] != '"') f += line[i++];
      ++i;
    } else {
      while (i < line.size() && !isspace(static_cast<unsigned char>(line[i]))) f += line[i++];
    }
    out.push_back(f);
  }
  return out;
}

std::vector<ConfEntry> parse_conf(std::istream& in) {
  std::vector<ConfEntry> out;
  std::string line;
  while (std::getline(in, line)) {
    auto v = conf_fields(line);
    // ia_name api_version thread_safety default lib_path provider_version ia_params [platform_params]
    if (v.size() < 7) continue;
    if (v[1].size() < 2 || v[1][0] != 'u' || v[1].compare(1, 2, "1.") != 0) continue;
    out.push_back({v[0], v[1], v[6]});
  }
  return out;
}

namespace {

std::vector<ConfEntry> conf_entries() {
  const char* path = std::getenv("DAT_OVERRIDE");
  if (!path || !*path) return {};
  std::ifstream f(path);
  return parse_conf(f);
}

bool parse_ofi_name(const std::string& name, IaName* out) {
  if (name.rfind("ofi-", 0) != 0) return false;
  std::string rest = name.substr(4);
  auto dash = rest.find('-');
  std::string prov = rest.substr(0, dash);
  std::string iface = dash == std::string::npos ? default_route_iface() : rest.substr(dash + 1);
  if (prov.empty() || iface.empty()) return false;
  std::string a = iface_address(iface);
  if (a.empty()) return false;
  *out = {prov, a, iface};
  return true;
}

}  // namespace

bool resolve_name(const std::string& name, IaName* out) {
  for (auto& e : conf_entries()) {
    if (e.name != name) continue;
    if (e.ia_params.rfind("ofi-", 0) == 0) return parse_ofi_name(e.ia_params, out);
    std::istringstream is(e.ia_params);
    std::string prov, iface;
    is >> prov >> iface;
    if (prov.empty()) return false;
    if (iface.empty()) iface = default_route_iface();
    std::string a = iface_address(iface);
    if (a.empty()) return false;
    *out = {prov, a, iface};
    return true;
  }
  return parse_ofi_name(name, out);
}

std::vector<std::string> provider_names() {
  std::vector<std::string> out{"ofi-tcp-lo"};
  if (!default_route_iface().empty()) out.push_back("ofi-tcp");
  for (auto& i : ipv4_ifaces())
    if (i != "lo") out.push_back("ofi-tcp-" + i);
  for (auto& e : conf_entries()) out.push_back(e.name);
  return out;
}

// ---------------------------------------------------------------- EVD basics

Evd::~Evd() {
  if (efd >= 0) ::close(efd);
}

remora::CompletionQueue* Evd::cq_for(Pz& pz) {
  auto& slot = cqs[pz.zone.id()];
  if (!slot) {
    auto cq = pz.zone.create_cq(static_cast<std::size_t>(qlen > 0 ? qlen : 256));
    if (!cq) return nullptr;
    slot = std::make_unique<remora::CompletionQueue>(std::move(*cq));
  }
  return slot.get();
}

std::shared_ptr<Evd> make_evd(const std::shared_ptr<Ia>& ia, DAT_COUNT qlen, DAT_EVD_FLAGS flags) {
  auto e = std::make_shared<Evd>();
  e->ia = ia;
  e->qlen = qlen;
  e->flags = flags;
  e->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  add_handle(e);
  return e;
}

void wake(Evd& e) {
  std::uint64_t one = 1;
  if (e.efd >= 0) (void)!write(e.efd, &one, sizeof one);
}

}  // namespace remora_dat

using namespace remora_dat;

extern "C" {

// The "no agent" value, exported as an object too (earlier versions of these
// headers declared it as one); the headers define it as a macro.
#undef DAT_OS_WAIT_PROXY_AGENT_NULL
extern const DAT_OS_WAIT_PROXY_AGENT DAT_OS_WAIT_PROXY_AGENT_NULL;
const DAT_OS_WAIT_PROXY_AGENT DAT_OS_WAIT_PROXY_AGENT_NULL = {nullptr, nullptr};

// ---------------------------------------------------------------- IA

DAT_RETURN dat_ia_openv(const DAT_NAME_PTR name, DAT_COUNT async_qlen, DAT_EVD_HANDLE* async_evd,
                        DAT_IA_HANDLE* ia_handle, DAT_UINT32 major, DAT_UINT32 minor, DAT_BOOLEAN) {
  Lock lock(g_mu);
  if (name == nullptr || ia_handle == nullptr || async_evd == nullptr) return err(DAT_INVALID_PARAMETER, 0);
  if (major != DAT_VERSION_MAJOR) return err(DAT_PROVIDER_NOT_FOUND, DAT_MAJOR_NOT_FOUND);
  if (minor > DAT_VERSION_MINOR) return err(DAT_PROVIDER_NOT_FOUND, DAT_MINOR_NOT_FOUND);
  std::string n = name;
  bool ro_aware = false;
  if (n.rfind(DAT_REMORA_RO_AWARE_PREFIX, 0) == 0) {
    ro_aware = true;
    n = n.substr(std::strlen(DAT_REMORA_RO_AWARE_PREFIX));
  }
  IaName rn;
  if (!resolve_name(n, &rn)) return err(DAT_PROVIDER_NOT_FOUND, DAT_NAME_NOT_REGISTERED);
  std::shared_ptr<Evd> given;
  if (*async_evd != DAT_HANDLE_NULL) {
    given = std::static_pointer_cast<Evd>(lookup(*async_evd, Kind::evd));
    if (!given) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_ASYNC);
  } else if (async_qlen < 0) {
    return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  }
  auto fab = remora::Fabric::open({rn.provider, rn.address});
  if (!fab) return err(DAT_PROVIDER_NOT_FOUND, DAT_NAME_NOT_REGISTERED);
  auto ia = std::make_shared<Ia>();
  ia->name = name;
  ia->ro_aware = ro_aware;
  ia->fabric = std::move(*fab);
  auto cz = ia->fabric.create_zone({32});
  if (!cz) return err(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_DEVICE);
  ia->cm_zone = std::move(*cz);
  ia->addr.sin_family = AF_INET;
  inet_pton(AF_INET, rn.address.c_str(), &ia->addr.sin_addr);
  add_handle(ia);
  if (given) {
    ia->async_evd = given;
    given->refs++;
  } else {
    ia->async_evd = make_evd(ia, async_qlen > 0 ? async_qlen : 8, DAT_EVD_ASYNC_FLAG);
    ia->own_async_evd = true;
    ia->async_evd->refs++;
    *async_evd = ia->async_evd.get();
  }
  *ia_handle = ia.get();
  return DAT_SUCCESS;
}

DAT_RETURN dat_ia_close(DAT_IA_HANDLE h, DAT_CLOSE_FLAGS flags) {
  Lock lock(g_mu);
  auto ia = std::static_pointer_cast<Ia>(lookup(h, Kind::ia));
  if (!ia) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
  if (flags != DAT_CLOSE_ABRUPT_FLAG && flags != DAT_CLOSE_GRACEFUL_FLAG)
    return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  auto kids = children_of(ia.get());
  if (flags == DAT_CLOSE_GRACEFUL_FLAG) {
    for (auto& k : kids)
      if (!(ia->own_async_evd && k.get() == ia->async_evd.get()))
        return err(DAT_INVALID_STATE, DAT_INVALID_STATE_IA_IN_USE);
  }
  // Abrupt: tear down in dependency order.
  const Kind order[] = {Kind::cr,  Kind::psp, Kind::rsp, Kind::ep,  Kind::rmr,
                        Kind::srq, Kind::lmr, Kind::evd, Kind::cno, Kind::pz};
  for (Kind k : order)
    for (auto& o : kids)
      if (o->kind == k) destroy(o);
  if (ia->async_evd && !ia->own_async_evd) ia->async_evd->refs--;
  ia->async_evd.reset();
  remove_handle(ia.get());
  ia->cm_zone.close();
  ia->fabric.close();
  return DAT_SUCCESS;
}

DAT_RETURN dat_ia_query(DAT_IA_HANDLE h, DAT_EVD_HANDLE* async_evd, DAT_IA_ATTR_MASK ia_mask, DAT_IA_ATTR* a,
                        DAT_PROVIDER_ATTR_MASK provider_mask, DAT_PROVIDER_ATTR* p) {
  Lock lock(g_mu);
  auto ia = std::static_pointer_cast<Ia>(lookup(h, Kind::ia));
  if (!ia) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
  // As the reference provider: an attribute set is filled when its mask
  // selects any member, and then needs its pointer; unknown IA bits are
  // refused.
  if ((ia_mask & DAT_IA_FIELD_ALL) != 0 && a == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
  if ((ia_mask & ~DAT_IA_FIELD_ALL) != 0) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  if ((provider_mask & DAT_PROVIDER_FIELD_ALL) != 0 && p == nullptr)
    return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6);
  if ((ia_mask & DAT_IA_FIELD_ALL) == 0) a = nullptr;
  if ((provider_mask & DAT_PROVIDER_FIELD_ALL) == 0) p = nullptr;
  const auto& info = ia->fabric.info();
  if (async_evd) *async_evd = ia->async_evd.get();
  const DAT_COUNT segs = static_cast<DAT_COUNT>(
      std::min(remora::kMaxSegments, info.max_segments ? info.max_segments : remora::kMaxSegments));
  if (a) {
    std::memset(a, 0, sizeof *a);
    std::snprintf(a->adapter_name, sizeof a->adapter_name, "%s", ia->name.c_str());
    std::snprintf(a->vendor_name, sizeof a->vendor_name, "Remora (libfabric %s on %s)", info.provider.c_str(),
                  info.domain_name.c_str());
    a->hardware_version_major = 0;
    a->ia_address_ptr = reinterpret_cast<DAT_IA_ADDRESS_PTR>(&ia->addr);
    a->max_eps = 65536;
    a->max_dto_per_ep = 65536;
    a->max_rdma_read_per_ep_in = 64;
    a->max_rdma_read_per_ep_out = 64;
    a->max_evds = 65536;
    a->max_evd_qlen = 65536;
    a->max_iov_segments_per_dto = segs;
    a->max_lmrs = max_lmrs();
    a->max_lmr_block_size = ~DAT_VLEN{0};
    a->max_lmr_virtual_address = ~DAT_VADDR{0};
    a->max_pzs = 1024;
    a->max_message_size = 64u << 20;
    a->max_rdma_size = info.max_message ? info.max_message : (1u << 30);
    a->max_rmrs = 65536;
    a->max_rmr_target_address = ~DAT_VADDR{0};
    a->max_srqs = 1024;
    a->max_ep_per_srq = 65536;
    a->max_recv_per_srq = 65536;
    a->max_iov_segments_per_rdma_read = segs;
    a->max_iov_segments_per_rdma_write = segs;
    a->max_rdma_read_in = 64;
    a->max_rdma_read_out = 64;
    a->max_rdma_read_per_ep_in_guaranteed = DAT_TRUE;
    a->max_rdma_read_per_ep_out_guaranteed = DAT_TRUE;
  }
  if (p) {
    std::memset(static_cast<void*>(p), 0, sizeof *p);
    std::snprintf(p->provider_name, sizeof p->provider_name, "remora-ofi-%s", info.provider.c_str());
    p->provider_version_major = 0;
    p->provider_version_minor = 1;
    p->dapl_version_major = DAT_VERSION_MAJOR;
    p->dapl_version_minor = DAT_VERSION_MINOR;
    p->lmr_mem_types_supported = static_cast<DAT_MEM_TYPE>(DAT_MEM_TYPE_VIRTUAL | DAT_MEM_TYPE_LMR |
                                                           DAT_MEM_TYPE_SHARED_VIRTUAL | DAT_MEM_TYPE_SO_VIRTUAL);
    p->iov_ownership_on_return = DAT_IOV_CONSUMER;
    p->dat_qos_supported = DAT_QOS_BEST_EFFORT;
    p->completion_flags_supported = static_cast<DAT_COMPLETION_FLAGS>(0x1F);
    p->is_thread_safe = DAT_TRUE;
    p->max_private_data_size = static_cast<DAT_COUNT>(remora::kMaxPrivateData);
    p->supports_multipath = DAT_FALSE;
    p->ep_creator = DAT_PSP_CREATES_EP_IFASKED;  // DAT_PSP_PROVIDER_FLAG
    p->pz_support = DAT_PZ_UNIQUE;
    p->optimal_buffer_alignment = DAT_OPTIMAL_ALIGNMENT;
    // Every pair of event streams can share an EVD (the member is const in
    // the DAT 1.2 ABI, for the consumer; the provider fills it).
    DAT_BOOLEAN merge[6][6];
    for (auto& row : merge)
      for (auto& x : row) x = DAT_TRUE;
    std::memcpy(const_cast<DAT_BOOLEAN*>(&p->evd_stream_merging_supported[0][0]), merge, sizeof merge);
    p->srq_supported = DAT_TRUE;
    p->srq_watermarks_supported = 0;
    p->srq_ep_pz_difference_supported = DAT_FALSE;
    p->srq_info_supported = 1;
    p->ep_recv_info_supported = 1;
    p->lmr_sync_req = info.requires_sync ? DAT_TRUE : DAT_FALSE;
    p->dto_async_return_guaranteed = DAT_TRUE;
    p->rdma_write_for_rdma_read_req = DAT_FALSE;
  }
  return DAT_SUCCESS;
}

// ---------------------------------------------------------------- registry, strings, contexts

DAT_RETURN dat_registry_list_providers(DAT_COUNT max, DAT_COUNT* returned, DAT_PROVIDER_INFO*(list[])) {
  if (returned == nullptr || max < 0) return err(DAT_INVALID_PARAMETER, 0);
  auto names = provider_names();
  if (max == 0) {
    *returned = static_cast<DAT_COUNT>(names.size());
    return DAT_SUCCESS;
  }
  if (list == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  DAT_COUNT n = 0;
  for (auto& s : names) {
    if (n >= max) break;
    DAT_PROVIDER_INFO* pi = list[n];
    if (pi == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    std::memset(pi, 0, sizeof *pi);
    std::snprintf(pi->ia_name, sizeof pi->ia_name, "%s", s.c_str());
    pi->dapl_version_major = DAT_VERSION_MAJOR;
    pi->dapl_version_minor = DAT_VERSION_MINOR;
    pi->is_thread_safe = DAT_TRUE;
    ++n;
  }
  *returned = n;
  return DAT_SUCCESS;
}

DAT_RETURN dat_strerror(DAT_RETURN value, const char** major, const char** minor) {
  static const struct {
    DAT_UINT32 t;
    const char* s;
  } types[] = {
      {DAT_SUCCESS, "DAT_SUCCESS"},
      {DAT_ABORT, "DAT_ABORT"},
      {DAT_CONN_QUAL_IN_USE, "DAT_CONN_QUAL_IN_USE"},
      {DAT_INSUFFICIENT_RESOURCES, "DAT_INSUFFICIENT_RESOURCES"},
      {DAT_INTERNAL_ERROR, "DAT_INTERNAL_ERROR"},
      {DAT_INVALID_HANDLE, "DAT_INVALID_HANDLE"},
      {DAT_INVALID_PARAMETER, "DAT_INVALID_PARAMETER"},
      {DAT_INVALID_STATE, "DAT_INVALID_STATE"},
      {DAT_LENGTH_ERROR, "DAT_LENGTH_ERROR"},
      {DAT_MODEL_NOT_SUPPORTED, "DAT_MODEL_NOT_SUPPORTED"},
      {DAT_PROVIDER_NOT_FOUND, "DAT_PROVIDER_NOT_FOUND"},
      {DAT_PRIVILEGES_VIOLATION, "DAT_PRIVILEGES_VIOLATION"},
      {DAT_PROTECTION_VIOLATION, "DAT_PROTECTION_VIOLATION"},
      {DAT_QUEUE_EMPTY, "DAT_QUEUE_EMPTY"},
      {DAT_QUEUE_FULL, "DAT_QUEUE_FULL"},
      {DAT_TIMEOUT_EXPIRED, "DAT_TIMEOUT_EXPIRED"},
      {DAT_PROVIDER_ALREADY_REGISTERED, "DAT_PROVIDER_ALREADY_REGISTERED"},
      {DAT_PROVIDER_IN_USE, "DAT_PROVIDER_IN_USE"},
      {DAT_INVALID_ADDRESS, "DAT_INVALID_ADDRESS"},
      {DAT_INTERRUPTED_CALL, "DAT_INTERRUPTED_CALL"},
      {DAT_CONN_QUAL_UNAVAILABLE, "DAT_CONN_QUAL_UNAVAILABLE"},
      {DAT_NOT_IMPLEMENTED & DAT_TYPE_MASK, "DAT_NOT_IMPLEMENTED"},
  };
  // Indexed by DAT_RETURN_SUBTYPE value.
  static const char* const subs[] = {
      "DAT_NO_SUBTYPE",
      "DAT_SUB_INTERRUPTED",
      "DAT_RESOURCE_MEMORY",
      "DAT_RESOURCE_DEVICE",
      "DAT_RESOURCE_TEP",
      "DAT_RESOURCE_TEVD",
      "DAT_RESOURCE_PROTECTION_DOMAIN",
      "DAT_RESOURCE_MEMORY_REGION",
      "DAT_RESOURCE_ERROR_HANDLER",
      "DAT_RESOURCE_CREDITS",
      "DAT_RESOURCE_SRQ",
      "DAT_INVALID_HANDLE_IA",
      "DAT_INVALID_HANDLE_EP",
      "DAT_INVALID_HANDLE_LMR",
      "DAT_INVALID_HANDLE_RMR",
      "DAT_INVALID_HANDLE_PZ",
      "DAT_INVALID_HANDLE_PSP",
      "DAT_INVALID_HANDLE_RSP",
      "DAT_INVALID_HANDLE_CR",
      "DAT_INVALID_HANDLE_CNO",
      "DAT_INVALID_HANDLE_EVD_CR",
      "DAT_INVALID_HANDLE_EVD_REQUEST",
      "DAT_INVALID_HANDLE_EVD_RECV",
      "DAT_INVALID_HANDLE_EVD_CONN",
      "DAT_INVALID_HANDLE_EVD_ASYNC",
      "DAT_INVALID_HANDLE_SRQ",
      "DAT_INVALID_HANDLE1",
      "DAT_INVALID_HANDLE2",
      "DAT_INVALID_HANDLE3",
      "DAT_INVALID_HANDLE4",
      "DAT_INVALID_HANDLE5",
      "DAT_INVALID_HANDLE6",
      "DAT_INVALID_HANDLE7",
      "DAT_INVALID_HANDLE8",
      "DAT_INVALID_HANDLE9",
      "DAT_INVALID_HANDLE10",
      "DAT_INVALID_ARG1",
      "DAT_INVALID_ARG2",
      "DAT_INVALID_ARG3",
      "DAT_INVALID_ARG4",
      "DAT_INVALID_ARG5",
      "DAT_INVALID_ARG6",
      "DAT_INVALID_ARG7",
      "DAT_INVALID_ARG8",
      "DAT_INVALID_ARG9",
      "DAT_INVALID_ARG10",
      "DAT_INVALID_STATE_EP_UNCONNECTED",
      "DAT_INVALID_STATE_EP_ACTCONNPENDING",
      "DAT_INVALID_STATE_EP_PASSCONNPENDING",
      "DAT_INVALID_STATE_EP_TENTCONNPENDING",
      "DAT_INVALID_STATE_EP_CONNECTED",
      "DAT_INVALID_STATE_EP_DISCONNECTED",
      "DAT_INVALID_STATE_EP_RESERVED",
      "DAT_INVALID_STATE_EP_COMPLPENDING",
      "DAT_INVALID_STATE_EP_DISCPENDING",
      "DAT_INVALID_STATE_EP_PROVIDERCONTROL",
      "DAT_INVALID_STATE_EP_NOTREADY",
      "DAT_INVALID_STATE_EP_RECV_WATERMARK",
      "DAT_INVALID_STATE_EP_PZ",
      "DAT_INVALID_STATE_EP_EVD_REQUEST",
      "DAT_INVALID_STATE_EP_EVD_RECV",
      "DAT_INVALID_STATE_EP_EVD_CONNECT",
      "DAT_INVALID_STATE_EP_UNCONFIGURED",
      "DAT_INVALID_STATE_EP_UNCONFRESERVED",
      "DAT_INVALID_STATE_EP_UNCONFPASSIVE",
      "DAT_INVALID_STATE_EP_UNCONFTENTATIVE",
      "DAT_INVALID_STATE_CNO_IN_USE",
      "DAT_INVALID_STATE_CNO_DEAD",
      "DAT_INVALID_STATE_EVD_OPEN",
      "DAT_INVALID_STATE_EVD_ENABLED",
      "DAT_INVALID_STATE_EVD_DISABLED",
      "DAT_INVALID_STATE_EVD_WAITABLE",
      "DAT_INVALID_STATE_EVD_UNWAITABLE",
      "DAT_INVALID_STATE_EVD_IN_USE",
      "DAT_INVALID_STATE_EVD_CONFIG_NOTIFY",
      "DAT_INVALID_STATE_EVD_CONFIG_SOLICITED",
      "DAT_INVALID_STATE_EVD_CONFIG_THRESHOLD",
      "DAT_INVALID_STATE_EVD_WAITER",
      "DAT_INVALID_STATE_EVD_ASYNC",
      "DAT_INVALID_STATE_IA_IN_USE",
      "DAT_INVALID_STATE_LMR_IN_USE",
      "DAT_INVALID_STATE_LMR_FREE",
      "DAT_INVALID_STATE_PZ_IN_USE",
      "DAT_INVALID_STATE_PZ_FREE",
      "DAT_INVALID_STATE_SRQ_OPERATIONAL",
      "DAT_INVALID_STATE_SRQ_ERROR",
      "DAT_INVALID_STATE_SRQ_IN_USE",
      "DAT_PRIVILEGES_READ",
      "DAT_PRIVILEGES_WRITE",
      "DAT_PRIVILEGES_RDMA_READ",
      "DAT_PRIVILEGES_RDMA_WRITE",
      "DAT_PROTECTION_READ",
      "DAT_PROTECTION_WRITE",
      "DAT_PROTECTION_RDMA_READ",
      "DAT_PROTECTION_RDMA_WRITE",
      "DAT_INVALID_ADDRESS_UNSUPPORTED",
      "DAT_INVALID_ADDRESS_UNREACHABLE",
      "DAT_INVALID_ADDRESS_MALFORMED",
      "DAT_NAME_NOT_REGISTERED",
      "DAT_MAJOR_NOT_FOUND",
      "DAT_MINOR_NOT_FOUND",
      "DAT_THREAD_SAFETY_NOT_FOUND",
  };
  if (major == nullptr || minor == nullptr) return err(DAT_INVALID_PARAMETER, 0);
  const DAT_UINT32 t = DAT_GET_TYPE(value);
  const DAT_UINT32 s = DAT_GET_SUBTYPE(value);
  for (auto& e : types) {
    if (e.t != t) continue;
    *major = e.s;
    if (t == DAT_SUCCESS || s == DAT_NO_SUBTYPE)
      *minor = "";
    else
      *minor = s < sizeof subs / sizeof subs[0] ? subs[s] : "DAT subtype";
    return DAT_SUCCESS;
  }
  return err(DAT_INVALID_PARAMETER, 0);
}

DAT_RETURN dat_set_consumer_context(DAT_HANDLE h, DAT_CONTEXT c) {
  Lock lock(g_mu);
  auto o = lookup_any(h);
  if (!o) return err(DAT_INVALID_HANDLE, 0);
  o->context = c;
  return DAT_SUCCESS;
}

DAT_RETURN dat_get_consumer_context(DAT_HANDLE h, DAT_CONTEXT* c) {
  Lock lock(g_mu);
  auto o = lookup_any(h);
  if (!o) return err(DAT_INVALID_HANDLE, 0);
  if (!c) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  *c = o->context;
  return DAT_SUCCESS;
}

DAT_RETURN dat_get_handle_type(DAT_HANDLE h, DAT_HANDLE_TYPE* t) {
  Lock lock(g_mu);
  auto o = lookup_any(h);
  if (!o) return err(DAT_INVALID_HANDLE, 0);
  if (!t) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  static const DAT_HANDLE_TYPE map[] = {DAT_HANDLE_TYPE_IA,  DAT_HANDLE_TYPE_PZ,  DAT_HANDLE_TYPE_LMR,
                                        DAT_HANDLE_TYPE_RMR, DAT_HANDLE_TYPE_EVD, DAT_HANDLE_TYPE_CNO,
                                        DAT_HANDLE_TYPE_EP,  DAT_HANDLE_TYPE_PSP, DAT_HANDLE_TYPE_RSP,
                                        DAT_HANDLE_TYPE_CR,  DAT_HANDLE_TYPE_SRQ};
  *t = map[static_cast<int>(o->kind)];
  return DAT_SUCCESS;
}

// ---------------------------------------------------------------- PZ

DAT_RETURN dat_pz_create(DAT_IA_HANDLE h, DAT_PZ_HANDLE* out) {
  Lock lock(g_mu);
  auto ia = std::static_pointer_cast<Ia>(lookup(h, Kind::ia));
  if (!ia) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
  if (!out) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  auto z = ia->fabric.create_zone({32});
  if (!z) return err(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_PROTECTION_DOMAIN);
  auto pz = std::make_shared<Pz>();
  pz->ia = ia;
  pz->zone = std::move(*z);
  add_handle(pz);
  *out = pz.get();
  return DAT_SUCCESS;
}

DAT_RETURN dat_pz_query(DAT_PZ_HANDLE h, DAT_PZ_PARAM_MASK, DAT_PZ_PARAM* p) {
  Lock lock(g_mu);
  auto pz = lookup(h, Kind::pz);
  if (!pz) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
  if (!p) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  p->ia_handle = pz->ia.get();
  return DAT_SUCCESS;
}

DAT_RETURN dat_pz_free(DAT_PZ_HANDLE h) {
  Lock lock(g_mu);
  auto pz = std::static_pointer_cast<Pz>(lookup(h, Kind::pz));
  if (!pz) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
  if (pz->refs > 0) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_PZ_IN_USE);
  destroy(pz);
  return DAT_SUCCESS;
}

}  // extern "C"

namespace remora_dat {

int max_lmrs() {
  const char* e = std::getenv("REMORA_DAT_MAX_LMRS");
  if (e && *e) {
    long v = std::strtol(e, nullptr, 10);
    if (v > 0 && v < (1l << 30)) return static_cast<int>(v);
  }
  return 1 << 20;
}

DAT_LMR_CONTEXT new_lmr_context(const std::shared_ptr<Lmr>& l) {
  static std::mt19937 rng{std::random_device{}()};
  static DAT_LMR_CONTEXT next = (rng() & 0x7fffffffu) | 1u;
  DAT_LMR_CONTEXT c;
  do {
    c = next++;
  } while (c == 0 || lmr_by_context(c));
  lmr_contexts()[c] = l;
  return c;
}

void drop_lmr_context(DAT_LMR_CONTEXT c) { lmr_contexts().erase(c); }

int count_lmrs(const Ia* ia) { return ia->lmr_count; }

}  // namespace remora_dat
