// compat/dat/src/dat_provider.cpp - the provider function table.
//
// Programs built against headers that dispatch through the handle (the DAT
// 1.2 "redirection" style, dat/dat_redirection.h: the first word of every
// handle points to the provider's table of entry points) reach the same
// functions as programs that call the exported symbols. The table is a
// struct dat_provider (dat/udat_redirection.h), whose member order and types
// tests/test_abi.c checks against compat-dapl 1.2's.
#include "dat_internal.hpp"

extern "C" {
#include "dat/udat_redirection.h"
}

namespace remora_dat {
namespace {

// The table's ia_open_func is the four-argument DAT 1.2 provider entry
// point (the registry passes the version itself).
DAT_RETURN ia_open(const DAT_NAME_PTR name, DAT_COUNT qlen, DAT_EVD_HANDLE* async_evd, DAT_IA_HANDLE* ia) {
  return dat_ia_openv(name, qlen, async_evd, ia, DAT_VERSION_MAJOR, DAT_VERSION_MINOR, DAT_THREADSAFE);
}

const dat_provider table = {
    "remora",
    nullptr,
    &ia_open,
    &dat_ia_query,
    &dat_ia_close,
    &dat_set_consumer_context,
    &dat_get_consumer_context,
    &dat_get_handle_type,
    &dat_cno_create,
    &dat_cno_modify_agent,
    &dat_cno_query,
    &dat_cno_free,
    &dat_cno_wait,
    &dat_cr_query,
    &dat_cr_accept,
    &dat_cr_reject,
    &dat_cr_handoff,
    &dat_evd_create,
    &dat_evd_query,
    &dat_evd_modify_cno,
    &dat_evd_enable,
    &dat_evd_disable,
    &dat_evd_wait,
    &dat_evd_resize,
    &dat_evd_post_se,
    &dat_evd_dequeue,
    &dat_evd_free,
    &dat_ep_create,
    &dat_ep_query,
    &dat_ep_modify,
    &dat_ep_connect,
    &dat_ep_dup_connect,
    &dat_ep_disconnect,
    &dat_ep_post_send,
    &dat_ep_post_recv,
    &dat_ep_post_rdma_read,
    &dat_ep_post_rdma_write,
    &dat_ep_get_status,
    &dat_ep_free,
    &dat_lmr_create,
    &dat_lmr_query,
    &dat_lmr_free,
    &dat_rmr_create,
    &dat_rmr_query,
    &dat_rmr_bind,
    &dat_rmr_free,
    &dat_psp_create,
    &dat_psp_query,
    &dat_psp_free,
    &dat_rsp_create,
    &dat_rsp_query,
    &dat_rsp_free,
    &dat_pz_create,
    &dat_pz_query,
    &dat_pz_free,
    // DAT 1.1 additions
    &dat_psp_create_any,
    &dat_ep_reset,
    &dat_evd_set_unwaitable,
    &dat_evd_clear_unwaitable,
    // DAT 1.2 additions
    &dat_lmr_sync_rdma_read,
    &dat_lmr_sync_rdma_write,
    &dat_ep_create_with_srq,
    &dat_ep_recv_query,
    &dat_ep_set_watermark,
    &dat_srq_create,
    &dat_srq_free,
    &dat_srq_post_recv,
    &dat_srq_query,
    &dat_srq_resize,
    &dat_srq_set_lw,
};
static_assert(sizeof(dat_provider) == 2 * sizeof(void*) + 68 * sizeof(void (*)()), "one pointer per entry point");

}  // namespace

const void* const kProviderTable = &table;

}  // namespace remora_dat
