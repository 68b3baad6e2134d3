// compat/dat/src/dat_provider.cpp - the provider function table.
//
// Programs built against headers that dispatch through the handle (the DAT
// 1.2 "redirection" style: the first word of every handle points to the
// provider's table of entry points) reach the same functions as programs
// that call the exported symbols. The order below is the DAT 1.2 provider
// structure's, as this project understands it; see README.md.
#include "dat_internal.hpp"

namespace remora_dat {
namespace {

using Fn = void (*)();
template <class F>
inline Fn fn(F* f) {
  return reinterpret_cast<Fn>(f);
}

struct ProviderTable {
  const char* device_name;
  void* extension;
  Fn entries[68];
};

const ProviderTable table = {
    "remora",
    nullptr,
    {
        fn(&dat_ia_openv),  // ia_open_func (the registry's entry point)
        fn(&dat_ia_query), fn(&dat_ia_close),
        fn(&dat_set_consumer_context), fn(&dat_get_consumer_context), fn(&dat_get_handle_type),
        fn(&dat_cno_create), fn(&dat_cno_modify_agent), fn(&dat_cno_query), fn(&dat_cno_free), fn(&dat_cno_wait),
        fn(&dat_cr_query), fn(&dat_cr_accept), fn(&dat_cr_reject), fn(&dat_cr_handoff),
        fn(&dat_evd_create), fn(&dat_evd_query),
        fn(&dat_evd_modify_cno), fn(&dat_evd_enable), fn(&dat_evd_disable), fn(&dat_evd_wait),
        fn(&dat_evd_resize), fn(&dat_evd_post_se), fn(&dat_evd_dequeue), fn(&dat_evd_free),
        fn(&dat_ep_create), fn(&dat_ep_query), fn(&dat_ep_modify), fn(&dat_ep_connect), fn(&dat_ep_dup_connect),
        fn(&dat_ep_disconnect), fn(&dat_ep_post_send), fn(&dat_ep_post_recv), fn(&dat_ep_post_rdma_read),
        fn(&dat_ep_post_rdma_write), fn(&dat_ep_get_status), fn(&dat_ep_free),
        fn(&dat_lmr_create), fn(&dat_lmr_query), fn(&dat_lmr_free),
        fn(&dat_rmr_create), fn(&dat_rmr_query), fn(&dat_rmr_bind), fn(&dat_rmr_free),
        fn(&dat_psp_create), fn(&dat_psp_query), fn(&dat_psp_free),
        fn(&dat_rsp_create), fn(&dat_rsp_query), fn(&dat_rsp_free),
        fn(&dat_pz_create), fn(&dat_pz_query), fn(&dat_pz_free),
        // DAT 1.1 additions
        fn(&dat_psp_create_any), fn(&dat_ep_reset),
        fn(&dat_evd_set_unwaitable), fn(&dat_evd_clear_unwaitable),
        // DAT 1.2 additions
        fn(&dat_lmr_sync_rdma_read), fn(&dat_lmr_sync_rdma_write),
        fn(&dat_ep_create_with_srq), fn(&dat_ep_recv_query), fn(&dat_ep_set_watermark),
        fn(&dat_srq_create), fn(&dat_srq_free), fn(&dat_srq_post_recv), fn(&dat_srq_query), fn(&dat_srq_resize),
        fn(&dat_srq_set_lw),
    },
};

}  // namespace

const void* const kProviderTable = &table;

}  // namespace remora_dat
