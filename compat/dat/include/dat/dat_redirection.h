/* dat/dat_redirection.h - dispatch through the provider table of a handle.
 *
 * The first word of every DAT handle points to the provider's table of entry
 * points (struct dat_provider, dat/udat_redirection.h). DAT_XXX(args) calls
 * the table's xxx_func for the handle in its first argument; the
 * DAT_XXX_FUNC types are the entry points' types. libdat.so.1 exports every
 * dat_xxx function as well, so consumers normally call those directly.
 * Part of Remora's uDAPL 1.2 compatibility layer (written for Remora). */
#ifndef REMORA_DAT_REDIRECTION_H
#define REMORA_DAT_REDIRECTION_H

#include <dat/udat.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dat_provider DAT_PROVIDER;

#ifndef DAT_HANDLE_TO_PROVIDER
#define DAT_HANDLE_TO_PROVIDER(handle) (*(DAT_PROVIDER **)(handle))
#endif

typedef DAT_RETURN (*DAT_IA_OPEN_FUNC)(const DAT_NAME_PTR, DAT_COUNT, DAT_EVD_HANDLE *, DAT_IA_HANDLE *);
typedef DAT_RETURN (*DAT_IA_OPENV_FUNC)(const DAT_NAME_PTR, DAT_COUNT, DAT_EVD_HANDLE *, DAT_IA_HANDLE *, DAT_UINT32, DAT_UINT32, DAT_BOOLEAN);
typedef DAT_RETURN (*DAT_IA_CLOSE_FUNC)(DAT_IA_HANDLE, DAT_CLOSE_FLAGS);
#define DAT_IA_CLOSE(ia_handle, flags) \
    (*DAT_HANDLE_TO_PROVIDER(ia_handle)->ia_close_func)((ia_handle), (flags))
typedef DAT_RETURN (*DAT_IA_QUERY_FUNC)(DAT_IA_HANDLE, DAT_EVD_HANDLE *, DAT_IA_ATTR_MASK, DAT_IA_ATTR *, DAT_PROVIDER_ATTR_MASK, DAT_PROVIDER_ATTR *);
#define DAT_IA_QUERY(ia, async_evd, ia_attr_mask, ia_attr, provider_attr_mask, provider_attr) \
    (*DAT_HANDLE_TO_PROVIDER(ia)->ia_query_func)((ia), (async_evd), (ia_attr_mask), (ia_attr), (provider_attr_mask), (provider_attr))
typedef DAT_RETURN (*DAT_SET_CONSUMER_CONTEXT_FUNC)(DAT_HANDLE, DAT_CONTEXT);
#define DAT_SET_CONSUMER_CONTEXT(handle, context) \
    (*DAT_HANDLE_TO_PROVIDER(handle)->set_consumer_context_func)((handle), (context))
typedef DAT_RETURN (*DAT_GET_CONSUMER_CONTEXT_FUNC)(DAT_HANDLE, DAT_CONTEXT *);
#define DAT_GET_CONSUMER_CONTEXT(handle, context) \
    (*DAT_HANDLE_TO_PROVIDER(handle)->get_consumer_context_func)((handle), (context))
typedef DAT_RETURN (*DAT_GET_HANDLE_TYPE_FUNC)(DAT_HANDLE, DAT_HANDLE_TYPE *);
#define DAT_GET_HANDLE_TYPE(handle, handle_type) \
    (*DAT_HANDLE_TO_PROVIDER(handle)->get_handle_type_func)((handle), (handle_type))
typedef DAT_RETURN (*DAT_CR_QUERY_FUNC)(DAT_CR_HANDLE, DAT_CR_PARAM_MASK, DAT_CR_PARAM *);
#define DAT_CR_QUERY(cr, mask, param) \
    (*DAT_HANDLE_TO_PROVIDER(cr)->cr_query_func)((cr), (mask), (param))
typedef DAT_RETURN (*DAT_CR_ACCEPT_FUNC)(DAT_CR_HANDLE, DAT_EP_HANDLE, DAT_COUNT, const DAT_PVOID);
#define DAT_CR_ACCEPT(cr, ep, private_data_size, private_data) \
    (*DAT_HANDLE_TO_PROVIDER(cr)->cr_accept_func)((cr), (ep), (private_data_size), (private_data))
typedef DAT_RETURN (*DAT_CR_REJECT_FUNC)(DAT_CR_HANDLE);
#define DAT_CR_REJECT(cr) \
    (*DAT_HANDLE_TO_PROVIDER(cr)->cr_reject_func)((cr))
typedef DAT_RETURN (*DAT_CR_HANDOFF_FUNC)(DAT_CR_HANDLE, DAT_CONN_QUAL);
#define DAT_CR_HANDOFF(cr, handoff) \
    (*DAT_HANDLE_TO_PROVIDER(cr)->cr_handoff_func)((cr), (handoff))
typedef DAT_RETURN (*DAT_EVD_RESIZE_FUNC)(DAT_EVD_HANDLE, DAT_COUNT);
#define DAT_EVD_RESIZE(evd, evd_min_qlen) \
    (*DAT_HANDLE_TO_PROVIDER(evd)->evd_resize_func)((evd), (evd_min_qlen))
typedef DAT_RETURN (*DAT_EVD_POST_SE_FUNC)(DAT_EVD_HANDLE, const DAT_EVENT *);
#define DAT_EVD_POST_SE(evd, event) \
    (*DAT_HANDLE_TO_PROVIDER(evd)->evd_post_se_func)((evd), (event))
typedef DAT_RETURN (*DAT_EVD_DEQUEUE_FUNC)(DAT_EVD_HANDLE, DAT_EVENT *);
#define DAT_EVD_DEQUEUE(evd, event) \
    (*DAT_HANDLE_TO_PROVIDER(evd)->evd_dequeue_func)((evd), (event))
typedef DAT_RETURN (*DAT_EVD_FREE_FUNC)(DAT_EVD_HANDLE);
#define DAT_EVD_FREE(evd) \
    (*DAT_HANDLE_TO_PROVIDER(evd)->evd_free_func)((evd))
typedef DAT_RETURN (*DAT_EVD_QUERY_FUNC)(DAT_EVD_HANDLE, DAT_EVD_PARAM_MASK, DAT_EVD_PARAM *);
#define DAT_EVD_QUERY(evd, mask, param) \
    (*DAT_HANDLE_TO_PROVIDER(evd)->evd_query_func)((evd), (mask), (param))
typedef DAT_RETURN (*DAT_EP_CREATE_FUNC)(DAT_IA_HANDLE, DAT_PZ_HANDLE, DAT_EVD_HANDLE, DAT_EVD_HANDLE, DAT_EVD_HANDLE, const DAT_EP_ATTR *, DAT_EP_HANDLE *);
#define DAT_EP_CREATE(ia, pz, recv_evd, request_evd, connect_evd, ep_attr, ep) \
    (*DAT_HANDLE_TO_PROVIDER(ia)->ep_create_func)((ia), (pz), (recv_evd), (request_evd), (connect_evd), (ep_attr), (ep))
typedef DAT_RETURN (*DAT_EP_CREATE_WITH_SRQ_FUNC)(DAT_IA_HANDLE, DAT_PZ_HANDLE, DAT_EVD_HANDLE, DAT_EVD_HANDLE, DAT_EVD_HANDLE, DAT_SRQ_HANDLE, const DAT_EP_ATTR *, DAT_EP_HANDLE *);
#define DAT_EP_CREATE_WITH_SRQ(ia, pz, recv_evd, request_evd, connect_evd, srq, ep_attr, ep) \
    (*DAT_HANDLE_TO_PROVIDER(ia)->ep_create_with_srq_func)((ia), (pz), (recv_evd), (request_evd), (connect_evd), (srq), (ep_attr), (ep))
typedef DAT_RETURN (*DAT_EP_QUERY_FUNC)(DAT_EP_HANDLE, DAT_EP_PARAM_MASK, DAT_EP_PARAM *);
#define DAT_EP_QUERY(ep, mask, param) \
    (*DAT_HANDLE_TO_PROVIDER(ep)->ep_query_func)((ep), (mask), (param))
typedef DAT_RETURN (*DAT_EP_MODIFY_FUNC)(DAT_EP_HANDLE, DAT_EP_PARAM_MASK, const DAT_EP_PARAM *);
#define DAT_EP_MODIFY(ep, mask, param) \
    (*DAT_HANDLE_TO_PROVIDER(ep)->ep_modify_func)((ep), (mask), (param))
typedef DAT_RETURN (*DAT_EP_CONNECT_FUNC)(DAT_EP_HANDLE, DAT_IA_ADDRESS_PTR, DAT_CONN_QUAL, DAT_TIMEOUT, DAT_COUNT, const DAT_PVOID, DAT_QOS, DAT_CONNECT_FLAGS);
#define DAT_EP_CONNECT(ep, remote_ia_address, remote_conn_qual, timeout, private_data_size, private_data, qos, connect_flags) \
    (*DAT_HANDLE_TO_PROVIDER(ep)->ep_connect_func)((ep), (remote_ia_address), (remote_conn_qual), (timeout), (private_data_size), (private_data), (qos), (connect_flags))
typedef DAT_RETURN (*DAT_EP_DUP_CONNECT_FUNC)(DAT_EP_HANDLE, DAT_EP_HANDLE, DAT_TIMEOUT, DAT_COUNT, const DAT_PVOID, DAT_QOS);
#define DAT_EP_DUP_CONNECT(ep, dup_ep, timeout, private_data_size, private_data, qos) \
    (*DAT_HANDLE_TO_PROVIDER(ep)->ep_dup_connect_func)((ep), (dup_ep), (timeout), (private_data_size), (private_data), (qos))
typedef DAT_RETURN (*DAT_EP_DISCONNECT_FUNC)(DAT_EP_HANDLE, DAT_CLOSE_FLAGS);
#define DAT_EP_DISCONNECT(ep, flags) \
    (*DAT_HANDLE_TO_PROVIDER(ep)->ep_disconnect_func)((ep), (flags))
typedef DAT_RETURN (*DAT_EP_POST_SEND_FUNC)(DAT_EP_HANDLE, DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE, DAT_COMPLETION_FLAGS);
#define DAT_EP_POST_SEND(ep, num_segments, local_iov, user_cookie, flags) \
    (*DAT_HANDLE_TO_PROVIDER(ep)->ep_post_send_func)((ep), (num_segments), (local_iov), (user_cookie), (flags))
typedef DAT_RETURN (*DAT_EP_POST_RECV_FUNC)(DAT_EP_HANDLE, DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE, DAT_COMPLETION_FLAGS);
#define DAT_EP_POST_RECV(ep, num_segments, local_iov, user_cookie, flags) \
    (*DAT_HANDLE_TO_PROVIDER(ep)->ep_post_recv_func)((ep), (num_segments), (local_iov), (user_cookie), (flags))
typedef DAT_RETURN (*DAT_EP_POST_RDMA_READ_FUNC)(DAT_EP_HANDLE, DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE, const DAT_RMR_TRIPLET *, DAT_COMPLETION_FLAGS);
#define DAT_EP_POST_RDMA_READ(ep, num_segments, local_iov, user_cookie, remote_buffer, flags) \
    (*DAT_HANDLE_TO_PROVIDER(ep)->ep_post_rdma_read_func)((ep), (num_segments), (local_iov), (user_cookie), (remote_buffer), (flags))
typedef DAT_RETURN (*DAT_EP_POST_RDMA_WRITE_FUNC)(DAT_EP_HANDLE, DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE, const DAT_RMR_TRIPLET *, DAT_COMPLETION_FLAGS);
#define DAT_EP_POST_RDMA_WRITE(ep, num_segments, local_iov, user_cookie, remote_buffer, flags) \
    (*DAT_HANDLE_TO_PROVIDER(ep)->ep_post_rdma_write_func)((ep), (num_segments), (local_iov), (user_cookie), (remote_buffer), (flags))
typedef DAT_RETURN (*DAT_EP_GET_STATUS_FUNC)(DAT_EP_HANDLE, DAT_EP_STATE *, DAT_BOOLEAN *, DAT_BOOLEAN *);
#define DAT_EP_GET_STATUS(ep, state, recv_idle, request_idle) \
    (*DAT_HANDLE_TO_PROVIDER(ep)->ep_get_status_func)((ep), (state), (recv_idle), (request_idle))
typedef DAT_RETURN (*DAT_EP_FREE_FUNC)(DAT_EP_HANDLE);
#define DAT_EP_FREE(ep) \
    (*DAT_HANDLE_TO_PROVIDER(ep)->ep_free_func)((ep))
typedef DAT_RETURN (*DAT_EP_RESET_FUNC)(DAT_EP_HANDLE);
#define DAT_EP_RESET(ep) \
    (*DAT_HANDLE_TO_PROVIDER(ep)->ep_reset_func)((ep))
typedef DAT_RETURN (*DAT_EP_RECV_QUERY_FUNC)(DAT_EP_HANDLE, DAT_COUNT *, DAT_COUNT *);
#define DAT_EP_RECV_QUERY(ep, nbufs_allocated, bufs_alloc_span) \
    (*DAT_HANDLE_TO_PROVIDER(ep)->ep_recv_query_func)((ep), (nbufs_allocated), (bufs_alloc_span))
typedef DAT_RETURN (*DAT_EP_SET_WATERMARK_FUNC)(DAT_EP_HANDLE, DAT_COUNT, DAT_COUNT);
#define DAT_EP_SET_WATERMARK(ep, soft_high_watermark, hard_high_watermark) \
    (*DAT_HANDLE_TO_PROVIDER(ep)->ep_set_watermark_func)((ep), (soft_high_watermark), (hard_high_watermark))
typedef DAT_RETURN (*DAT_LMR_FREE_FUNC)(DAT_LMR_HANDLE);
#define DAT_LMR_FREE(lmr) \
    (*DAT_HANDLE_TO_PROVIDER(lmr)->lmr_free_func)((lmr))
typedef DAT_RETURN (*DAT_LMR_QUERY_FUNC)(DAT_LMR_HANDLE, DAT_LMR_PARAM_MASK, DAT_LMR_PARAM *);
#define DAT_LMR_QUERY(lmr, mask, param) \
    (*DAT_HANDLE_TO_PROVIDER(lmr)->lmr_query_func)((lmr), (mask), (param))
typedef DAT_RETURN (*DAT_LMR_SYNC_RDMA_READ_FUNC)(DAT_IA_HANDLE, const DAT_LMR_TRIPLET *, DAT_VLEN);
#define DAT_LMR_SYNC_RDMA_READ(ia, local_segments, num_segments) \
    (*DAT_HANDLE_TO_PROVIDER(ia)->lmr_sync_rdma_read_func)((ia), (local_segments), (num_segments))
typedef DAT_RETURN (*DAT_LMR_SYNC_RDMA_WRITE_FUNC)(DAT_IA_HANDLE, const DAT_LMR_TRIPLET *, DAT_VLEN);
#define DAT_LMR_SYNC_RDMA_WRITE(ia, local_segments, num_segments) \
    (*DAT_HANDLE_TO_PROVIDER(ia)->lmr_sync_rdma_write_func)((ia), (local_segments), (num_segments))
typedef DAT_RETURN (*DAT_RMR_CREATE_FUNC)(DAT_PZ_HANDLE, DAT_RMR_HANDLE *);
#define DAT_RMR_CREATE(pz, rmr) \
    (*DAT_HANDLE_TO_PROVIDER(pz)->rmr_create_func)((pz), (rmr))
typedef DAT_RETURN (*DAT_RMR_QUERY_FUNC)(DAT_RMR_HANDLE, DAT_RMR_PARAM_MASK, DAT_RMR_PARAM *);
#define DAT_RMR_QUERY(rmr, mask, param) \
    (*DAT_HANDLE_TO_PROVIDER(rmr)->rmr_query_func)((rmr), (mask), (param))
typedef DAT_RETURN (*DAT_RMR_BIND_FUNC)(DAT_RMR_HANDLE, const DAT_LMR_TRIPLET *, DAT_MEM_PRIV_FLAGS, DAT_EP_HANDLE, DAT_RMR_COOKIE, DAT_COMPLETION_FLAGS, DAT_RMR_CONTEXT *);
#define DAT_RMR_BIND(rmr, lmr_triplet, mem_priv, ep, user_cookie, flags, rmr_context) \
    (*DAT_HANDLE_TO_PROVIDER(rmr)->rmr_bind_func)((rmr), (lmr_triplet), (mem_priv), (ep), (user_cookie), (flags), (rmr_context))
typedef DAT_RETURN (*DAT_RMR_FREE_FUNC)(DAT_RMR_HANDLE);
#define DAT_RMR_FREE(rmr) \
    (*DAT_HANDLE_TO_PROVIDER(rmr)->rmr_free_func)((rmr))
typedef DAT_RETURN (*DAT_PSP_CREATE_FUNC)(DAT_IA_HANDLE, DAT_CONN_QUAL, DAT_EVD_HANDLE, DAT_PSP_FLAGS, DAT_PSP_HANDLE *);
#define DAT_PSP_CREATE(ia, conn_qual, evd, flags, psp) \
    (*DAT_HANDLE_TO_PROVIDER(ia)->psp_create_func)((ia), (conn_qual), (evd), (flags), (psp))
typedef DAT_RETURN (*DAT_PSP_CREATE_ANY_FUNC)(DAT_IA_HANDLE, DAT_CONN_QUAL *, DAT_EVD_HANDLE, DAT_PSP_FLAGS, DAT_PSP_HANDLE *);
#define DAT_PSP_CREATE_ANY(ia, conn_qual, evd, flags, psp) \
    (*DAT_HANDLE_TO_PROVIDER(ia)->psp_create_any_func)((ia), (conn_qual), (evd), (flags), (psp))
typedef DAT_RETURN (*DAT_PSP_QUERY_FUNC)(DAT_PSP_HANDLE, DAT_PSP_PARAM_MASK, DAT_PSP_PARAM *);
#define DAT_PSP_QUERY(psp, mask, param) \
    (*DAT_HANDLE_TO_PROVIDER(psp)->psp_query_func)((psp), (mask), (param))
typedef DAT_RETURN (*DAT_PSP_FREE_FUNC)(DAT_PSP_HANDLE);
#define DAT_PSP_FREE(psp) \
    (*DAT_HANDLE_TO_PROVIDER(psp)->psp_free_func)((psp))
typedef DAT_RETURN (*DAT_RSP_CREATE_FUNC)(DAT_IA_HANDLE, DAT_CONN_QUAL, DAT_EP_HANDLE, DAT_EVD_HANDLE, DAT_RSP_HANDLE *);
#define DAT_RSP_CREATE(ia, conn_qual, ep, evd, rsp) \
    (*DAT_HANDLE_TO_PROVIDER(ia)->rsp_create_func)((ia), (conn_qual), (ep), (evd), (rsp))
typedef DAT_RETURN (*DAT_RSP_QUERY_FUNC)(DAT_RSP_HANDLE, DAT_RSP_PARAM_MASK, DAT_RSP_PARAM *);
#define DAT_RSP_QUERY(rsp, mask, param) \
    (*DAT_HANDLE_TO_PROVIDER(rsp)->rsp_query_func)((rsp), (mask), (param))
typedef DAT_RETURN (*DAT_RSP_FREE_FUNC)(DAT_RSP_HANDLE);
#define DAT_RSP_FREE(rsp) \
    (*DAT_HANDLE_TO_PROVIDER(rsp)->rsp_free_func)((rsp))
typedef DAT_RETURN (*DAT_PZ_CREATE_FUNC)(DAT_IA_HANDLE, DAT_PZ_HANDLE *);
#define DAT_PZ_CREATE(ia, pz) \
    (*DAT_HANDLE_TO_PROVIDER(ia)->pz_create_func)((ia), (pz))
typedef DAT_RETURN (*DAT_PZ_QUERY_FUNC)(DAT_PZ_HANDLE, DAT_PZ_PARAM_MASK, DAT_PZ_PARAM *);
#define DAT_PZ_QUERY(pz, mask, param) \
    (*DAT_HANDLE_TO_PROVIDER(pz)->pz_query_func)((pz), (mask), (param))
typedef DAT_RETURN (*DAT_PZ_FREE_FUNC)(DAT_PZ_HANDLE);
#define DAT_PZ_FREE(pz) \
    (*DAT_HANDLE_TO_PROVIDER(pz)->pz_free_func)((pz))
typedef DAT_RETURN (*DAT_SRQ_CREATE_FUNC)(DAT_IA_HANDLE, DAT_PZ_HANDLE, DAT_SRQ_ATTR *, DAT_SRQ_HANDLE *);
#define DAT_SRQ_CREATE(ia, pz, srq_attr, srq) \
    (*DAT_HANDLE_TO_PROVIDER(ia)->srq_create_func)((ia), (pz), (srq_attr), (srq))
typedef DAT_RETURN (*DAT_SRQ_SET_LW_FUNC)(DAT_SRQ_HANDLE, DAT_COUNT);
#define DAT_SRQ_SET_LW(srq, low_watermark) \
    (*DAT_HANDLE_TO_PROVIDER(srq)->srq_set_lw_func)((srq), (low_watermark))
typedef DAT_RETURN (*DAT_SRQ_FREE_FUNC)(DAT_SRQ_HANDLE);
#define DAT_SRQ_FREE(srq) \
    (*DAT_HANDLE_TO_PROVIDER(srq)->srq_free_func)((srq))
typedef DAT_RETURN (*DAT_SRQ_QUERY_FUNC)(DAT_SRQ_HANDLE, DAT_SRQ_PARAM_MASK, DAT_SRQ_PARAM *);
#define DAT_SRQ_QUERY(srq, mask, param) \
    (*DAT_HANDLE_TO_PROVIDER(srq)->srq_query_func)((srq), (mask), (param))
typedef DAT_RETURN (*DAT_SRQ_RESIZE_FUNC)(DAT_SRQ_HANDLE, DAT_COUNT);
#define DAT_SRQ_RESIZE(srq, srq_max_recv_dto) \
    (*DAT_HANDLE_TO_PROVIDER(srq)->srq_resize_func)((srq), (srq_max_recv_dto))
typedef DAT_RETURN (*DAT_SRQ_POST_RECV_FUNC)(DAT_SRQ_HANDLE, DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE);
#define DAT_SRQ_POST_RECV(srq, num_segments, local_iov, user_cookie) \
    (*DAT_HANDLE_TO_PROVIDER(srq)->srq_post_recv_func)((srq), (num_segments), (local_iov), (user_cookie))

#ifdef __cplusplus
}
#endif
#endif /* REMORA_DAT_REDIRECTION_H */
