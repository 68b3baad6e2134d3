// compat/dat/src/dat_internal.hpp - helpers shared by the DAT sources.
#pragma once

#include "dat_impl.hpp"

namespace remora_dat {

using Lock = std::lock_guard<std::recursive_mutex>;
extern std::recursive_mutex g_mu;

void add_handle(const std::shared_ptr<Obj>& o);
void remove_handle(const Obj* o);
std::shared_ptr<Obj> lookup(const void* h, Kind k);
std::shared_ptr<Obj> lookup_any(const void* h);
std::vector<std::shared_ptr<Obj>> children_of(const Ia* ia);
/// Release an object's resources and drop its handle (any kind).
void destroy(const std::shared_ptr<Obj>& o);

std::shared_ptr<Lmr> lmr_by_context(DAT_LMR_CONTEXT c);
DAT_LMR_CONTEXT new_lmr_context(const std::shared_ptr<Lmr>& l);
void drop_lmr_context(DAT_LMR_CONTEXT c);
int count_lmrs(const Ia* ia);
int max_lmrs();

void register_ep_rid(const std::shared_ptr<Ep>& ep);
void unregister_ep_rid(std::uint64_t rid);
std::shared_ptr<Ep> ep_by_rid(std::uint64_t rid);

DAT_RETURN err(DAT_UINT32 type, DAT_UINT32 sub);
/// The one place a remora error becomes a DAT return code.
DAT_RETURN from_errc(std::error_code ec, DAT_UINT32 handle_sub = 0);
DAT_DTO_COMPLETION_STATUS dto_status(std::error_code ec);
remora::Access to_access(DAT_MEM_PRIV_FLAGS p);

bool resolve_name(const std::string& name, IaName* out);
std::vector<std::string> provider_names();

std::shared_ptr<Evd> make_evd(const std::shared_ptr<Ia>& ia, DAT_COUNT qlen, DAT_EVD_FLAGS flags);
void wake(Evd& e);
/// Queue an event on an EVD (software queue) and wake its waiter.
void push_event(Evd& e, const DAT_EVENT& ev, bool notify = true);
DAT_EP_STATE ep_state(const Ep& ep);
void collect(Evd& e);

/// Declared before the Lock in every API call that can move events into an
/// EVD (and so trigger a CNO): when the outermost scope of the thread ends,
/// after the lock is released, it calls the proxy agents of the CNOs
/// triggered meanwhile.
struct AgentScope {
  AgentScope();
  ~AgentScope();
  AgentScope(const AgentScope&) = delete;
  AgentScope& operator=(const AgentScope&) = delete;
};
void destroy_memory(const std::shared_ptr<Obj>& o);
/// The EP a DAT_PSP_PROVIDER_FLAG PSP creates for a connection request:
/// unconfigured (no PZ, no EVDs; dat_ep_modify configures it), tentative.
std::shared_ptr<Ep> make_provider_ep(const std::shared_ptr<Ia>& ia);

}  // namespace remora_dat
