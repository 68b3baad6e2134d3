// compat/dat/src/dat_mem.cpp - LMR (create/query/free/sync) and RMR.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "dat_internal.hpp"

namespace remora_dat {
namespace {

/// Identity of the memory object behind a shared mapping.
struct SharedId {
  unsigned long long dev_major = 0, dev_minor = 0, inode = 0, offset = 0;
  std::string path;
};

/// Is [addr, addr+len) covered entirely by MAP_SHARED mappings? Fills the
/// identity of the object at `addr`.
bool shared_mapping(std::uintptr_t addr, std::size_t len, SharedId* id) {
  std::ifstream f("/proc/self/maps");
  std::string line;
  std::uintptr_t cur = addr;
  const std::uintptr_t end = addr + len;
  bool first = true;
  while (std::getline(f, line) && cur < end) {
    unsigned long long s = 0, e = 0, off = 0, ino = 0;
    char perms[8] = {};
    unsigned maj = 0, min = 0;
    int consumed = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %x:%x %llu %n", &s, &e, perms, &off, &maj, &min, &ino,
                    &consumed) < 7)
      continue;
    if (e <= cur || s > cur) continue;
    if (perms[3] != 's') return false;
    if (first) {
      id->dev_major = maj;
      id->dev_minor = min;
      id->inode = ino;
      id->offset = off + (addr - s);
      id->path = consumed > 0 && static_cast<std::size_t>(consumed) < line.size() ? line.substr(consumed) : "";
      first = false;
    }
    cur = e;
  }
  return cur >= end;
}

std::string hex(const char* p, std::size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    auto c = static_cast<unsigned char>(p[i]);
    s += d[c >> 4];
    s += d[c & 15];
  }
  return s;
}

/// The cross-process cookie registry: one small file per cookie (all 40
/// bytes, hex-encoded, name the file) recording which object it names.
/// Returns DAT_SUCCESS, or INVALID_PARAMETER when the cookie already names
/// another live shared object.
DAT_RETURN claim_cookie(const char* cookie, const SharedId& id) {
  struct stat st {};
  std::string dir = ::stat("/dev/shm", &st) == 0 ? "/dev/shm" : "/tmp";
  std::string path = dir + "/remora-dat-cookie-" + hex(cookie, DAT_LMR_COOKIE_SIZE);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return err(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
  ::flock(fd, LOCK_EX);
  char buf[4096] = {};
  ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  DAT_RETURN rc = DAT_SUCCESS;
  bool write_it = true;
  if (n > 0) {
    SharedId old;
    char p[4000] = {};
    int k =
        std::sscanf(buf, "%llu %llu %llu %llu %3999[^\n]", &old.dev_major, &old.dev_minor, &old.inode, &old.offset, p);
    if (k >= 4) {
      old.path = k == 5 ? p : "";
      const bool same = old.dev_major == id.dev_major && old.dev_minor == id.dev_minor && old.inode == id.inode &&
                        old.offset == id.offset;
      if (same) {
        write_it = false;
      } else {
        // Still naming a live object? Then the cookie is taken.
        struct stat os {};
        bool live = !old.path.empty() && old.path[0] == '/' && ::stat(old.path.c_str(), &os) == 0 &&
                    static_cast<unsigned long long>(os.st_ino) == old.inode;
        if (live) {
          rc = err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
          write_it = false;
        }
      }
    }
  }
  if (write_it) {
    char out[4200];
    int len = std::snprintf(out, sizeof out, "%llu %llu %llu %llu %s\n", id.dev_major, id.dev_minor, id.inode,
                            id.offset, id.path.c_str());
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, out, static_cast<std::size_t>(len), 0) != len)
      rc = err(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
  }
  ::flock(fd, LOCK_UN);
  ::close(fd);
  return rc;
}

constexpr DAT_UINT32 kPrivMask = DAT_MEM_PRIV_ALL_FLAG;

/// Is [addr, addr+len) a range of this process's address space that does not
/// wrap around its end and is mapped page by page? (mincore fails with ENOMEM
/// on a range holding an unmapped page.) Nothing is registered otherwise.
bool mapped_range(std::uintptr_t addr, DAT_VLEN len) {
  if (len == 0 || len > UINTPTR_MAX - addr) return false;  // wraps
  static const std::uintptr_t page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  std::uintptr_t cur = addr & ~(page - 1);
  const std::uintptr_t end = addr + static_cast<std::uintptr_t>(len);
  constexpr std::size_t kChunkPages = 4096;
  static thread_local unsigned char vec[kChunkPages];
  while (cur < end) {
    const std::uintptr_t left = (end - cur + page - 1) / page;
    const std::size_t pages = left < kChunkPages ? static_cast<std::size_t>(left) : kChunkPages;
    if (::mincore(reinterpret_cast<void*>(cur), pages * page, vec) != 0) return false;
    cur += pages * page;
  }
  return true;
}

}  // namespace
}  // namespace remora_dat

using namespace remora_dat;

extern "C" {

DAT_RETURN dat_lmr_create(DAT_IA_HANDLE iah, DAT_MEM_TYPE type, DAT_REGION_DESCRIPTION region, DAT_VLEN length,
                          DAT_PZ_HANDLE pzh, DAT_MEM_PRIV_FLAGS priv, DAT_LMR_HANDLE* lmr_handle,
                          DAT_LMR_CONTEXT* lmr_context, DAT_RMR_CONTEXT* rmr_context, DAT_VLEN* registered_size,
                          DAT_VADDR* registered_address) {
  Lock lock(g_mu);
  auto ia = std::static_pointer_cast<Ia>(lookup(iah, Kind::ia));
  if (!ia) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
  auto pz = std::static_pointer_cast<Pz>(lookup(pzh, Kind::pz));
  if (!pz || pz->ia != ia) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
  if (lmr_handle == nullptr || lmr_context == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG7);
  if ((static_cast<DAT_UINT32>(priv) & ~kPrivMask) != 0) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6);

  auto l = std::make_shared<Lmr>();
  l->ia = ia;
  l->pz = pz;
  l->region = region;
  l->priv = priv;
  void* addr = nullptr;
  std::size_t len = 0;
  switch (type) {
    case DAT_MEM_TYPE_VIRTUAL:
    case DAT_MEM_TYPE_SO_VIRTUAL:
      // A zero length is a length error whatever the address (dapltest's
      // memory tests check this of every provider).
      if (length == 0) return err(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE);
      if (region.for_va == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
      if (!mapped_range(reinterpret_cast<std::uintptr_t>(region.for_va), length))
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
      addr = region.for_va;
      len = length;
      // Without the RO_AWARE_ prefix, VIRTUAL means strong ordering.
      l->mem_type = (type == DAT_MEM_TYPE_VIRTUAL && ia->ro_aware) ? DAT_MEM_TYPE_VIRTUAL : DAT_MEM_TYPE_SO_VIRTUAL;
      l->length = length;
      break;
    case DAT_MEM_TYPE_LMR: {
      auto base = std::static_pointer_cast<Lmr>(lookup(region.for_lmr_handle, Kind::lmr));
      if (!base || base->ia != ia) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_LMR);
      addr = reinterpret_cast<void*>(base->base);
      len = base->size;
      l->mem_type = DAT_MEM_TYPE_LMR;
      l->length = base->size;  // the length argument is ignored
      break;
    }
    case DAT_MEM_TYPE_SHARED_VIRTUAL: {
      const auto& sm = region.for_shared_memory;
      if (length == 0) return err(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE);
      if (sm.virtual_address == nullptr || sm.shared_memory_id == nullptr)
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
      if (!mapped_range(reinterpret_cast<std::uintptr_t>(sm.virtual_address), length))
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
      SharedId id;
      if (!shared_mapping(reinterpret_cast<std::uintptr_t>(sm.virtual_address), length, &id))
        return err(DAT_INVALID_STATE, 0);
      if (auto rc = claim_cookie(*sm.shared_memory_id, id); rc != DAT_SUCCESS) return rc;
      std::memcpy(l->cookie.data(), *sm.shared_memory_id, DAT_LMR_COOKIE_SIZE);
      l->region.for_shared_memory.shared_memory_id = reinterpret_cast<DAT_LMR_COOKIE>(l->cookie.data());
      addr = sm.virtual_address;
      len = length;
      l->mem_type = DAT_MEM_TYPE_SHARED_VIRTUAL;
      l->length = length;
      break;
    }
    default: return err(DAT_MODEL_NOT_SUPPORTED, 0);
  }
  if (count_lmrs(ia.get()) >= max_lmrs()) return err(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY_REGION);
  // Local read is implicit, as on InfiniBand (which has no local-read bit):
  // any LMR may be the source of a send or an RDMA write. The DAT layer
  // checks local write itself before anything reaches the core.
  remora::Access acc = to_access(priv) | remora::Access::local_read;
  auto mr = pz->zone.register_memory(addr, len, acc);
  if (!mr) return from_errc(mr.error(), DAT_INVALID_HANDLE_LMR);
  l->mr = std::move(*mr);
  l->base = reinterpret_cast<std::uintptr_t>(l->mr.address());
  l->size = l->mr.length();
  const bool remote = (priv & (DAT_MEM_PRIV_REMOTE_READ_FLAG | DAT_MEM_PRIV_REMOTE_WRITE_FLAG)) != 0;
  l->rmr_context = remote ? static_cast<DAT_RMR_CONTEXT>(l->mr.key()) : 0;
  l->lmr_context = new_lmr_context(l);
  pz->refs++;
  ia->lmr_count++;
  add_handle(l);
  *lmr_handle = l.get();
  *lmr_context = l->lmr_context;
  if (rmr_context) *rmr_context = l->rmr_context;
  if (registered_size) *registered_size = l->size;
  if (registered_address) *registered_address = l->base;
  return DAT_SUCCESS;
}

DAT_RETURN dat_lmr_query(DAT_LMR_HANDLE h, DAT_LMR_PARAM_MASK, DAT_LMR_PARAM* p) {
  Lock lock(g_mu);
  auto l = std::static_pointer_cast<Lmr>(lookup(h, Kind::lmr));
  if (!l) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_LMR);
  if (!p) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  p->ia_handle = l->ia.get();
  p->mem_type = l->mem_type;
  p->region_desc = l->region;
  p->length = l->length;
  p->pz_handle = l->pz.get();
  p->mem_priv = l->priv;
  p->lmr_context = l->lmr_context;
  p->rmr_context = l->rmr_context;
  p->registered_size = l->size;
  p->registered_address = l->base;
  return DAT_SUCCESS;
}

DAT_RETURN dat_lmr_free(DAT_LMR_HANDLE h) {
  Lock lock(g_mu);
  auto l = std::static_pointer_cast<Lmr>(lookup(h, Kind::lmr));
  if (!l) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_LMR);
  if (l->refs > 0) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_LMR_IN_USE);
  destroy(l);
  return DAT_SUCCESS;
}

// `incoming`: dat_lmr_sync_rdma_write (RDMA placed data for the CPU), else
// dat_lmr_sync_rdma_read (the CPU's writes for RDMA).
static DAT_RETURN lmr_sync(DAT_IA_HANDLE iah, const DAT_LMR_TRIPLET* segs, DAT_VLEN n, bool incoming) {
  Lock lock(g_mu);
  auto ia = lookup(iah, Kind::ia);
  if (!ia) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
  if (n > 0 && segs == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  for (DAT_VLEN i = 0; i < n; ++i) {
    if (segs[i].segment_length == 0) continue;  // context and address are ignored
    auto l = lmr_by_context(segs[i].lmr_context);
    if (!l || l->ia != ia) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    if (!l->contains(segs[i].virtual_address, segs[i].segment_length))
      return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  }
  // Coherent memory (the fabric reports requires_sync == false): a full
  // barrier is all the consistency the CPU needs. A seq_cst read-modify-write
  // is one (lock-prefixed on x86) that ThreadSanitizer also understands,
  // unlike a bare fence.
  static std::atomic<unsigned> barrier{0};
  barrier.fetch_add(0, std::memory_order_seq_cst);
  // Emulated non-coherent memory (remora-check, docs/check.md): the region
  // moves data between the CPU's and the device's views of the range.
  for (DAT_VLEN i = 0; i < n; ++i) {
    if (segs[i].segment_length == 0) continue;
    auto l = lmr_by_context(segs[i].lmr_context);
    const auto off =
        static_cast<std::size_t>(segs[i].virtual_address - reinterpret_cast<std::uintptr_t>(l->mr.address()));
    (void)(incoming ? l->mr.sync_rdma_write(off, segs[i].segment_length)
                    : l->mr.sync_rdma_read(off, segs[i].segment_length));
  }
  return DAT_SUCCESS;
}

DAT_RETURN dat_lmr_sync_rdma_read(DAT_IA_HANDLE ia, const DAT_LMR_TRIPLET* segs, DAT_VLEN n) {
  return lmr_sync(ia, segs, n, false);
}

DAT_RETURN dat_lmr_sync_rdma_write(DAT_IA_HANDLE ia, const DAT_LMR_TRIPLET* segs, DAT_VLEN n) {
  return lmr_sync(ia, segs, n, true);
}

// ---------------------------------------------------------------- RMR

DAT_RETURN dat_rmr_create(DAT_PZ_HANDLE pzh, DAT_RMR_HANDLE* out) {
  Lock lock(g_mu);
  auto pz = std::static_pointer_cast<Pz>(lookup(pzh, Kind::pz));
  if (!pz) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
  if (!out) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  auto r = std::make_shared<Rmr>();
  r->ia = pz->ia;
  r->pz = pz;
  pz->refs++;
  add_handle(r);
  *out = r.get();
  return DAT_SUCCESS;
}

DAT_RETURN dat_rmr_query(DAT_RMR_HANDLE h, DAT_RMR_PARAM_MASK, DAT_RMR_PARAM* p) {
  Lock lock(g_mu);
  auto r = std::static_pointer_cast<Rmr>(lookup(h, Kind::rmr));
  if (!r) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_RMR);
  if (!p) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  p->ia_handle = r->ia.get();
  p->pz_handle = r->pz.get();
  p->lmr_triplet = r->triplet;
  p->mem_priv = r->priv;
  p->rmr_context = r->rmr_context;
  return DAT_SUCCESS;
}

static void rmr_unbind(Rmr& r) {
  r.mr.close();
  if (r.lmr) r.lmr->refs--;
  r.lmr.reset();
  r.triplet = DAT_LMR_TRIPLET{};
  r.priv = DAT_MEM_PRIV_NONE_FLAG;
  r.rmr_context = 0;
}

DAT_RETURN dat_rmr_bind(DAT_RMR_HANDLE h, const DAT_LMR_TRIPLET* t, DAT_MEM_PRIV_FLAGS priv, DAT_EP_HANDLE eph,
                        DAT_RMR_COOKIE cookie, DAT_COMPLETION_FLAGS flags, DAT_RMR_CONTEXT* out) {
  AgentScope agents;  // may trigger a CNO
  Lock lock(g_mu);
  auto r = std::static_pointer_cast<Rmr>(lookup(h, Kind::rmr));
  if (!r) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_RMR);
  auto ep = std::static_pointer_cast<Ep>(lookup(eph, Kind::ep));
  if (!ep) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
  if (t == nullptr || out == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  if ((static_cast<DAT_UINT32>(priv) & ~static_cast<DAT_UINT32>(DAT_MEM_PRIV_ALL_FLAG)) != 0 ||
      (static_cast<DAT_UINT32>(flags) & ~0x1Fu) != 0)
    return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  if (ep->pz != r->pz) return err(DAT_PROTECTION_VIOLATION, 0);
  const DAT_EP_STATE st = ep_state(*ep);
  if (st != DAT_EP_STATE_CONNECTED && st != DAT_EP_STATE_DISCONNECTED) return err(DAT_INVALID_STATE, 0);
  DAT_DTO_COMPLETION_STATUS status = DAT_DTO_SUCCESS;
  if (t->segment_length == 0) {
    rmr_unbind(*r);  // unbind
    *out = 0;
  } else {
    auto l = lmr_by_context(t->lmr_context);
    if (!l || l->ia != r->ia) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    if (!l->contains(t->virtual_address, t->segment_length)) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    if (l->pz != r->pz) return err(DAT_PROTECTION_VIOLATION, 0);
    // As with memory windows: remote write needs local write on the LMR.
    if ((priv & DAT_MEM_PRIV_REMOTE_WRITE_FLAG) && !(l->priv & DAT_MEM_PRIV_LOCAL_WRITE_FLAG))
      return err(DAT_PRIVILEGES_VIOLATION, 0);
    if (st == DAT_EP_STATE_DISCONNECTED) {
      status = DAT_DTO_ERR_FLUSHED;
    } else {
      remora::Access acc = to_access(
          static_cast<DAT_MEM_PRIV_FLAGS>(priv & (DAT_MEM_PRIV_REMOTE_READ_FLAG | DAT_MEM_PRIV_REMOTE_WRITE_FLAG)));
      if (acc == remora::Access::none) acc = remora::Access::local_read;
      auto mr = r->pz->zone.register_memory(reinterpret_cast<void*>(t->virtual_address), t->segment_length, acc);
      if (!mr) return from_errc(mr.error());
      rmr_unbind(*r);
      r->mr = std::move(*mr);
      r->lmr = l;
      l->refs++;
      r->triplet = *t;
      r->priv = priv;
      r->rmr_context = (priv & (DAT_MEM_PRIV_REMOTE_READ_FLAG | DAT_MEM_PRIV_REMOTE_WRITE_FLAG))
                           ? static_cast<DAT_RMR_CONTEXT>(r->mr.key())
                           : 0;
      *out = r->rmr_context;
    }
  }
  if (ep->request_evd && (status != DAT_DTO_SUCCESS || !(flags & DAT_COMPLETION_SUPPRESS_FLAG))) {
    DAT_EVENT ev{};
    ev.event_number = DAT_RMR_BIND_COMPLETION_EVENT;
    ev.evd_handle = ep->request_evd.get();
    ev.event_data.rmr_completion_event_data.rmr_handle = r.get();
    ev.event_data.rmr_completion_event_data.user_cookie = cookie;
    ev.event_data.rmr_completion_event_data.status = status;
    push_event(*ep->request_evd, ev, status != DAT_DTO_SUCCESS || !(flags & DAT_COMPLETION_UNSIGNALLED_FLAG));
  }
  return DAT_SUCCESS;
}

DAT_RETURN dat_rmr_free(DAT_RMR_HANDLE h) {
  Lock lock(g_mu);
  auto r = std::static_pointer_cast<Rmr>(lookup(h, Kind::rmr));
  if (!r) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_RMR);
  destroy(r);
  return DAT_SUCCESS;
}

}  // extern "C"

namespace remora_dat {

void destroy_memory(const std::shared_ptr<Obj>& o) {
  if (o->kind == Kind::lmr) {
    auto l = std::static_pointer_cast<Lmr>(o);
    drop_lmr_context(l->lmr_context);
    l->mr.close();
    l->ia->lmr_count--;
    if (l->pz) l->pz->refs--;
  } else if (o->kind == Kind::rmr) {
    auto r = std::static_pointer_cast<Rmr>(o);
    rmr_unbind(*r);
    if (r->pz) r->pz->refs--;
  }
}

}  // namespace remora_dat
