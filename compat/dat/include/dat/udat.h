/* dat/udat.h - the uDAPL 1.2 consumer API (user-level DAT).
 * Part of Remora's uDAPL 1.2 compatibility layer (written for Remora). */
#ifndef REMORA_UDAT_H
#define REMORA_UDAT_H

#include <dat/udat_config.h>
#include <dat/dat_platform_specific.h>
#include <dat/dat.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*DAT_AGENT_FUNC)(DAT_PVOID instance_data, DAT_EVD_HANDLE trigger_evd);

typedef struct dat_os_wait_proxy_agent {
    DAT_PVOID instance_data;
    DAT_AGENT_FUNC proxy_agent_func;
} DAT_OS_WAIT_PROXY_AGENT;
/* The "no agent" value (both members NULL), exported by libdat. */
extern const DAT_OS_WAIT_PROXY_AGENT DAT_OS_WAIT_PROXY_AGENT_NULL;

typedef struct dat_cno_param {
    DAT_IA_HANDLE ia_handle;
    DAT_OS_WAIT_PROXY_AGENT agent;
} DAT_CNO_PARAM;
typedef DAT_UINT64 DAT_CNO_PARAM_MASK;
#define DAT_CNO_FIELD_IA_HANDLE 0x1ull
#define DAT_CNO_FIELD_AGENT     0x2ull
#define DAT_CNO_FIELD_ALL       0x3ull

typedef enum dat_evd_state {
    DAT_EVD_STATE_ENABLED,
    DAT_EVD_STATE_DISABLED,
    DAT_EVD_STATE_WAITABLE,
    DAT_EVD_STATE_UNWAITABLE
} DAT_EVD_STATE;

typedef struct dat_evd_param {
    DAT_IA_HANDLE ia_handle;
    DAT_COUNT evd_qlen;
    DAT_EVD_STATE evd_state;
    DAT_CNO_HANDLE cno_handle;
    DAT_EVD_FLAGS evd_flags;
} DAT_EVD_PARAM;
typedef DAT_UINT64 DAT_EVD_PARAM_MASK;
#define DAT_EVD_FIELD_IA_HANDLE 0x01ull
#define DAT_EVD_FIELD_EVD_QLEN  0x02ull
#define DAT_EVD_FIELD_EVD_STATE 0x04ull
#define DAT_EVD_FIELD_CNO       0x08ull
#define DAT_EVD_FIELD_EVD_FLAGS 0x10ull
#define DAT_EVD_FIELD_ALL       0x1Full

DAT_EXPORT DAT_RETURN dat_ia_query(IN DAT_IA_HANDLE ia, OUT DAT_EVD_HANDLE *async_evd,
                                   IN DAT_IA_ATTR_MASK ia_attr_mask, OUT DAT_IA_ATTR *ia_attr,
                                   IN DAT_PROVIDER_ATTR_MASK provider_attr_mask,
                                   OUT DAT_PROVIDER_ATTR *provider_attr);

DAT_EXPORT DAT_RETURN dat_lmr_create(IN DAT_IA_HANDLE ia, IN DAT_MEM_TYPE mem_type,
                                     IN DAT_REGION_DESCRIPTION region_description, IN DAT_VLEN length,
                                     IN DAT_PZ_HANDLE pz, IN DAT_MEM_PRIV_FLAGS mem_privileges,
                                     OUT DAT_LMR_HANDLE *lmr_handle, OUT DAT_LMR_CONTEXT *lmr_context,
                                     OUT DAT_RMR_CONTEXT *rmr_context, OUT DAT_VLEN *registered_size,
                                     OUT DAT_VADDR *registered_address);

DAT_EXPORT DAT_RETURN dat_evd_create(IN DAT_IA_HANDLE ia, IN DAT_COUNT evd_min_qlen, IN DAT_CNO_HANDLE cno,
                                     IN DAT_EVD_FLAGS flags, OUT DAT_EVD_HANDLE *evd);
DAT_EXPORT DAT_RETURN dat_evd_query(IN DAT_EVD_HANDLE evd, IN DAT_EVD_PARAM_MASK mask, OUT DAT_EVD_PARAM *param);
DAT_EXPORT DAT_RETURN dat_evd_modify_cno(IN DAT_EVD_HANDLE evd, IN DAT_CNO_HANDLE cno);
DAT_EXPORT DAT_RETURN dat_evd_enable(IN DAT_EVD_HANDLE evd);
DAT_EXPORT DAT_RETURN dat_evd_disable(IN DAT_EVD_HANDLE evd);
DAT_EXPORT DAT_RETURN dat_evd_wait(IN DAT_EVD_HANDLE evd, IN DAT_TIMEOUT timeout, IN DAT_COUNT threshold,
                                   OUT DAT_EVENT *event, OUT DAT_COUNT *nmore);
DAT_EXPORT DAT_RETURN dat_evd_set_unwaitable(IN DAT_EVD_HANDLE evd);
DAT_EXPORT DAT_RETURN dat_evd_clear_unwaitable(IN DAT_EVD_HANDLE evd);

DAT_EXPORT DAT_RETURN dat_cno_create(IN DAT_IA_HANDLE ia, IN DAT_OS_WAIT_PROXY_AGENT agent,
                                     OUT DAT_CNO_HANDLE *cno);
DAT_EXPORT DAT_RETURN dat_cno_modify_agent(IN DAT_CNO_HANDLE cno, IN DAT_OS_WAIT_PROXY_AGENT agent);
DAT_EXPORT DAT_RETURN dat_cno_query(IN DAT_CNO_HANDLE cno, IN DAT_CNO_PARAM_MASK mask, OUT DAT_CNO_PARAM *param);
DAT_EXPORT DAT_RETURN dat_cno_free(IN DAT_CNO_HANDLE cno);
DAT_EXPORT DAT_RETURN dat_cno_wait(IN DAT_CNO_HANDLE cno, IN DAT_TIMEOUT timeout, OUT DAT_EVD_HANDLE *evd);

#ifdef __cplusplus
}
#endif
#endif /* REMORA_UDAT_H */
