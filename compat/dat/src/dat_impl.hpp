// compat/dat/src/dat_impl.hpp - the objects behind DAT handles.
//
// Every DAT handle is the address of one of the objects below. A global table
// maps live handle addresses to their objects, so a stale or forged handle is
// recognised (DAT_INVALID_HANDLE) without being dereferenced. One global
// recursive mutex serialises the API; blocking waits drop it while they sleep.
#pragma once

#include <netinet/in.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <remora/remora.hpp>

extern "C" {
#include "dat/udat.h"
}

namespace remora_dat {

enum class Kind : std::uint8_t { ia, pz, lmr, rmr, evd, cno, ep, psp, rsp, cr, srq };

struct Ia;
struct Pz;
struct Evd;
struct Ep;
struct Srq;
struct Cno;

/// The DAT 1.2 provider function table (dat_provider.cpp).
extern const void* const kProviderTable;

/// Base of every handle object. A DAT handle is the object's address; its
/// first word points to the provider function table, as in the DAT 1.2
/// redirection ABI (DAT_HANDLE_TO_PROVIDER). No virtual functions: the
/// table pointer must stay at offset 0 (shared_ptr deletes the right type).
struct Obj {
  explicit Obj(Kind k) : kind(k) {}
  const void* provider = kProviderTable;
  Kind kind;
  DAT_CONTEXT context{};
  std::shared_ptr<Ia> ia;  // owning IA (null for the IA itself)
};

/// A resolved IA name.
struct IaName {
  std::string provider;
  std::string address;  // IPv4, dotted
  std::string interface;
};

struct Ia : Obj {
  Ia() : Obj(Kind::ia) {}
  std::string name;
  bool ro_aware = false;
  remora::Fabric fabric;
  remora::ProtectionZone cm_zone;  // listeners live here
  sockaddr_in addr{};
  std::shared_ptr<Evd> async_evd;
  bool own_async_evd = false;
  int lmr_count = 0;  // live LMRs, for max_lmrs
};

struct Pz : Obj {
  Pz() : Obj(Kind::pz) {}
  remora::ProtectionZone zone;
  int refs = 0;  // LMRs, RMRs, EPs, SRQs
};

struct Lmr : Obj {
  Lmr() : Obj(Kind::lmr) {}
  std::shared_ptr<Pz> pz;
  DAT_MEM_TYPE mem_type = DAT_MEM_TYPE_VIRTUAL;  // as reported
  DAT_REGION_DESCRIPTION region{};
  DAT_VLEN length = 0;
  DAT_MEM_PRIV_FLAGS priv = DAT_MEM_PRIV_NONE_FLAG;
  DAT_LMR_CONTEXT lmr_context = 0;
  DAT_RMR_CONTEXT rmr_context = 0;
  remora::MemoryRegion mr;
  std::uintptr_t base = 0;
  std::size_t size = 0;
  std::array<char, DAT_LMR_COOKIE_SIZE> cookie{};
  int refs = 0;  // bound RMRs
  bool contains(DAT_VADDR a, DAT_VLEN len) const { return a >= base && len <= size && a - base <= size - len; }
};

struct Rmr : Obj {
  Rmr() : Obj(Kind::rmr) {}
  std::shared_ptr<Pz> pz;
  std::shared_ptr<Lmr> lmr;  // bound to, or null
  DAT_LMR_TRIPLET triplet{};
  DAT_MEM_PRIV_FLAGS priv = DAT_MEM_PRIV_NONE_FLAG;
  DAT_RMR_CONTEXT rmr_context = 0;
  remora::MemoryRegion mr;
};

struct Evd;

/// A CNO is untriggered or triggered; the first notification that reaches it
/// while untriggered triggers it and names its EVD (later ones are dropped
/// until dat_cno_wait takes the trigger), as in the DAT 1.2 reference.
struct Cno : Obj {
  Cno() : Obj(Kind::cno) {}
  DAT_OS_WAIT_PROXY_AGENT agent{};
  int refs = 0;
  bool waiting = false;
  bool triggered = false;
  std::weak_ptr<Evd> trigger_evd;  // empty: triggered with no EVD (all detached)
};

struct Sp;

struct QueuedEvent {
  DAT_EVENT ev;
  bool notify = true;
};

struct Evd : Obj {
  Evd() : Obj(Kind::evd), seq(++created) {}
  ~Evd();
  static inline std::uint64_t created = 0;  // under the DAT lock
  std::uint64_t seq;                        // creation order
  DAT_EVD_FLAGS flags = DAT_EVD_DEFAULT_FLAG;
  DAT_COUNT qlen = 0;
  std::shared_ptr<Cno> cno;
  bool enabled = true;
  bool waitable = true;
  bool waiting = false;
  int refs = 0;
  int efd = -1;  // eventfd: software events and wake-ups
  std::deque<QueuedEvent> queue;
  std::map<std::uint64_t, std::unique_ptr<remora::CompletionQueue>> cqs;  // by zone id
  std::vector<std::weak_ptr<Ep>> conn_eps;
  std::vector<std::weak_ptr<Sp>> sps;
  remora::CompletionQueue* cq_for(Pz& pz);
  std::size_t notify_count() const {
    std::size_t n = 0;
    for (auto& q : queue) n += q.notify ? 1 : 0;
    return n;
  }
};

struct Slot {
  DAT_DTO_COOKIE cookie{};
  DAT_COMPLETION_FLAGS flags = DAT_COMPLETION_DEFAULT_FLAG;
  bool busy = false;
  std::uint32_t gen = 0;
};

/// A fixed table of outstanding operations; the Remora cookie names a slot.
/// It keeps what a completion needs from the post (the consumer's cookie and
/// flags). Posting order needs no help here: the core reports each
/// endpoint's sends and receives in the order they were posted.
struct SlotTable {
  std::vector<Slot> slots;
  std::vector<std::uint32_t> free;
  std::size_t limit = 0;  // at most this many busy
  std::size_t busy = 0;
  void init(std::size_t n, std::size_t cap) {
    slots.assign(cap, Slot{});
    free.clear();
    for (std::size_t i = cap; i > 0; --i) free.push_back(static_cast<std::uint32_t>(i - 1));
    limit = n;
    busy = 0;
  }
  bool take(std::uint64_t tag, DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags, std::uint64_t* token) {
    if (busy >= limit || free.empty()) return false;
    std::uint32_t i = free.back();
    free.pop_back();
    Slot& s = slots[i];
    s.busy = true;
    s.cookie = cookie;
    s.flags = flags;
    ++s.gen;
    ++busy;
    *token = tag | (std::uint64_t{s.gen & 0x3fffffffu} << 32) | i;
    return true;
  }
  /// The busy slot a token names, or null (stale or foreign token).
  Slot* find(std::uint64_t token) {
    std::uint32_t i = static_cast<std::uint32_t>(token);
    if (i >= slots.size() || !slots[i].busy || (slots[i].gen & 0x3fffffffu) != ((token >> 32) & 0x3fffffffu))
      return nullptr;
    return &slots[i];
  }
  bool release(std::uint64_t token, Slot* out) {
    Slot* s = find(token);
    if (!s) return false;
    *out = *s;
    s->busy = false;
    free.push_back(static_cast<std::uint32_t>(s - slots.data()));
    --busy;
    return true;
  }
  /// Take back a slot whose post failed (the newest one).
  void undo(std::uint64_t token) {
    Slot s;
    (void)release(token, &s);
  }
};

constexpr std::uint64_t kTokenRecv = 1ull << 62;
constexpr std::uint64_t kTokenSrq = 1ull << 63;

struct Srq : Obj {
  Srq() : Obj(Kind::srq) {}
  std::shared_ptr<Pz> pz;
  remora::SharedReceiveQueue q;
  SlotTable slots;
  DAT_COUNT max_recv_iov = 1;
  DAT_COUNT low_watermark = 0;
  int refs = 0;
};

enum class Role : std::uint8_t { none, active, passive };

struct Ep : Obj {
  Ep() : Obj(Kind::ep) {}
  std::shared_ptr<Pz> pz;
  std::shared_ptr<Evd> recv_evd, request_evd, connect_evd;
  std::shared_ptr<Srq> srq;
  DAT_EP_ATTR attr{};
  remora::Endpoint rep;
  std::unique_ptr<remora::CompletionQueue> private_cq;  // when an EVD is missing
  std::uint64_t rid = 0;
  SlotTable req, rcv;
  Role role = Role::none;
  bool reserved = false;   // bound to an RSP
  bool tentative = false;  // its RSP received a request
  bool timed_out = false;
  std::chrono::steady_clock::time_point deadline{};
  bool has_deadline = false;
  sockaddr_in remote{};
  bool remote_known = false;
  DAT_CONN_QUAL remote_qual = 0;
  std::deque<std::vector<std::uint8_t>> pdata;  // recent connection events' private data
  DAT_COUNT soft_hw = 0, hard_hw = 0;
};

struct Cr;

/// PSP or RSP.
struct Sp : Obj {
  explicit Sp(Kind k) : Obj(k) {}
  DAT_CONN_QUAL conn_qual = 0;
  std::shared_ptr<Evd> evd;
  DAT_PSP_FLAGS flags = DAT_PSP_CONSUMER_FLAG;
  std::shared_ptr<Ep> ep;  // RSP only
  remora::Listener listener;
  bool used = false;  // RSP: one request only
};

struct Cr : Obj {
  Cr() : Obj(Kind::cr) {}
  std::shared_ptr<Sp> sp;
  remora::ConnectionRequest req;
  std::vector<std::uint8_t> pdata;
  sockaddr_in remote{};
  std::shared_ptr<Ep> provider_ep;  // made for a DAT_PSP_PROVIDER_FLAG PSP
};

}  // namespace remora_dat
