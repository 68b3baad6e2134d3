/* dat/udat.h - the uDAPL 1.2 consumer API (user-level DAT). Include this
 * header (it includes dat/dat.h); link with -ldat.
 * Part of Remora's uDAPL 1.2 compatibility layer (written for Remora). */
#ifndef REMORA_UDAT_H
#define REMORA_UDAT_H

#include <dat/udat_config.h>
#include <dat/dat_platform_specific.h>
#include <dat/dat.h>
#include <dat/udat_vendor_specific.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef DAT_HANDLE DAT_CNO_HANDLE;

/* EVD state: one bit from each of three independent groups (enabled or
 * disabled; waitable or unwaitable; notification configuration). */
typedef enum dat_evd_state {
    DAT_EVD_STATE_ENABLED          = 0x01,
    DAT_EVD_STATE_DISABLED         = 0x02,
    DAT_EVD_STATE_WAITABLE         = 0x04,
    DAT_EVD_STATE_UNWAITABLE       = 0x08,
    DAT_EVD_STATE_CONFIG_NOTIFY    = 0x10,
    DAT_EVD_STATE_CONFIG_SOLICITED = 0x20,
    DAT_EVD_STATE_CONFIG_THRESHOLD = 0x30
} DAT_EVD_STATE;

typedef enum dat_evd_param_mask {
    DAT_EVD_FIELD_IA_HANDLE = 0x01,
    DAT_EVD_FIELD_EVD_QLEN  = 0x02,
    DAT_EVD_FIELD_EVD_STATE = 0x04,
    DAT_EVD_FIELD_CNO       = 0x08,
    DAT_EVD_FIELD_EVD_FLAGS = 0x10,
    DAT_EVD_FIELD_ALL       = 0x1F
} DAT_EVD_PARAM_MASK;

struct dat_evd_param {
    DAT_IA_HANDLE ia_handle;
    DAT_COUNT evd_qlen;
    DAT_EVD_STATE evd_state;
    DAT_CNO_HANDLE cno_handle;
    DAT_EVD_FLAGS evd_flags;
};

/* Shared memory: a cookie of DAT_LMR_COOKIE_SIZE bytes names the region. */
#define DAT_LMR_COOKIE_SIZE 40
typedef char (*DAT_LMR_COOKIE)[DAT_LMR_COOKIE_SIZE];

typedef struct dat_shared_memory {
    DAT_PVOID virtual_address;
    DAT_LMR_COOKIE shared_memory_id;
} DAT_SHARED_MEMORY;

typedef union dat_region_description {
    DAT_PVOID for_va;
    DAT_LMR_HANDLE for_lmr_handle;
    DAT_SHARED_MEMORY for_shared_memory;
} DAT_REGION_DESCRIPTION;

struct dat_lmr_param {
    DAT_IA_HANDLE ia_handle;
    DAT_MEM_TYPE mem_type;
    DAT_REGION_DESCRIPTION region_desc;
    DAT_VLEN length;
    DAT_PZ_HANDLE pz_handle;
    DAT_MEM_PRIV_FLAGS mem_priv;
    DAT_LMR_CONTEXT lmr_context;
    DAT_RMR_CONTEXT rmr_context;
    DAT_VLEN registered_size;
    DAT_VADDR registered_address;
};

/* OS wait proxy agent of a CNO */
typedef void (*DAT_AGENT_FUNC)(DAT_PVOID instance_data, DAT_EVD_HANDLE trigger_evd);

typedef struct dat_os_wait_proxy_agent {
    DAT_PVOID instance_data;
    DAT_AGENT_FUNC proxy_agent_func;
} DAT_OS_WAIT_PROXY_AGENT;

/* "No agent": both members NULL. */
#ifdef __cplusplus
#define DAT_OS_WAIT_PROXY_AGENT_NULL (DAT_OS_WAIT_PROXY_AGENT{NULL, NULL})
#else
#define DAT_OS_WAIT_PROXY_AGENT_NULL ((DAT_OS_WAIT_PROXY_AGENT){(DAT_PVOID)NULL, (DAT_AGENT_FUNC)NULL})
#endif

/* dat_ia_open's async_evd_handle argument: the consumer already has an
 * asynchronous EVD (DAT_EVD_ASYNC_EXISTS), or its scope is left to the
 * provider (DAT_EVD_OUT_OF_SCOPE). */
#define DAT_EVD_ASYNC_EXISTS ((DAT_EVD_HANDLE)0x1)
#define DAT_EVD_OUT_OF_SCOPE ((DAT_EVD_HANDLE)0x2)

typedef struct dat_cno_param {
    DAT_IA_HANDLE ia_handle;
    DAT_OS_WAIT_PROXY_AGENT agent;
} DAT_CNO_PARAM;

typedef enum dat_cno_param_mask {
    DAT_CNO_FIELD_IA_HANDLE = 0x1,
    DAT_CNO_FIELD_AGENT     = 0x2,
    DAT_CNO_FIELD_ALL       = 0x3
} DAT_CNO_PARAM_MASK;

/* Provider attributes (uDAPL) */
typedef enum dat_pz_support {
    DAT_PZ_UNIQUE,
    DAT_PZ_SHAREABLE
} DAT_PZ_SUPPORT;

struct dat_provider_attr {
    char provider_name[DAT_NAME_MAX_LENGTH];
    DAT_UINT32 provider_version_major;
    DAT_UINT32 provider_version_minor;
    DAT_UINT32 dapl_version_major;
    DAT_UINT32 dapl_version_minor;
    DAT_MEM_TYPE lmr_mem_types_supported;
    DAT_IOV_OWNERSHIP iov_ownership_on_return;
    DAT_QOS dat_qos_supported;
    DAT_COMPLETION_FLAGS completion_flags_supported;
    DAT_BOOLEAN is_thread_safe;
    DAT_COUNT max_private_data_size;
    DAT_BOOLEAN supports_multipath;
    DAT_EP_CREATOR_FOR_PSP ep_creator;
    DAT_PZ_SUPPORT pz_support;
    DAT_UINT32 optimal_buffer_alignment;
    /* [i][j]: streams of EVD flag bit i and bit j can share one EVD */
    const DAT_BOOLEAN evd_stream_merging_supported[6][6];
    DAT_BOOLEAN srq_supported;
    DAT_COUNT srq_watermarks_supported;
    DAT_BOOLEAN srq_ep_pz_difference_supported;
    DAT_COUNT srq_info_supported;
    DAT_COUNT ep_recv_info_supported;
    DAT_BOOLEAN lmr_sync_req; /* dat_lmr_sync_rdma_* needed */
    DAT_BOOLEAN dto_async_return_guaranteed;
    DAT_BOOLEAN rdma_write_for_rdma_read_req;
    DAT_COUNT num_provider_specific_attr;
    DAT_NAMED_ATTR *provider_specific_attr;
};

/* One bit per DAT_PROVIDER_ATTR member, in member order. */
typedef DAT_UINT64 DAT_PROVIDER_ATTR_MASK;
#define DAT_PROVIDER_FIELD_PROVIDER_NAME                  UINT64_C(0x0000001)
#define DAT_PROVIDER_FIELD_PROVIDER_VERSION_MAJOR         UINT64_C(0x0000002)
#define DAT_PROVIDER_FIELD_PROVIDER_VERSION_MINOR         UINT64_C(0x0000004)
#define DAT_PROVIDER_FIELD_DAPL_VERSION_MAJOR             UINT64_C(0x0000008)
#define DAT_PROVIDER_FIELD_DAPL_VERSION_MINOR             UINT64_C(0x0000010)
#define DAT_PROVIDER_FIELD_LMR_MEM_TYPE_SUPPORTED         UINT64_C(0x0000020)
#define DAT_PROVIDER_FIELD_IOV_OWNERSHIP                  UINT64_C(0x0000040)
#define DAT_PROVIDER_FIELD_DAT_QOS_SUPPORTED              UINT64_C(0x0000080)
#define DAT_PROVIDER_FIELD_COMPLETION_FLAGS_SUPPORTED     UINT64_C(0x0000100)
#define DAT_PROVIDER_FIELD_IS_THREAD_SAFE                 UINT64_C(0x0000200)
#define DAT_PROVIDER_FIELD_MAX_PRIVATE_DATA_SIZE          UINT64_C(0x0000400)
#define DAT_PROVIDER_FIELD_SUPPORTS_MULTIPATH             UINT64_C(0x0000800)
#define DAT_PROVIDER_FIELD_EP_CREATOR                     UINT64_C(0x0001000)
#define DAT_PROVIDER_FIELD_PZ_SUPPORT                     UINT64_C(0x0002000)
#define DAT_PROVIDER_FIELD_OPTIMAL_BUFFER_ALIGNMENT       UINT64_C(0x0004000)
#define DAT_PROVIDER_FIELD_EVD_STREAM_MERGING_SUPPORTED   UINT64_C(0x0008000)
#define DAT_PROVIDER_FIELD_SRQ_SUPPORTED                  UINT64_C(0x0010000)
#define DAT_PROVIDER_FIELD_SRQ_WATERMARKS_SUPPORTED       UINT64_C(0x0020000)
#define DAT_PROVIDER_FIELD_SRQ_EP_PZ_DIFFERENCE_SUPPORTED UINT64_C(0x0040000)
#define DAT_PROVIDER_FIELD_SRQ_INFO_SUPPORTED             UINT64_C(0x0080000)
#define DAT_PROVIDER_FIELD_EP_RECV_INFO_SUPPORTED         UINT64_C(0x0100000)
#define DAT_PROVIDER_FIELD_LMR_SYNC_REQ                   UINT64_C(0x0200000)
#define DAT_PROVIDER_FIELD_DTO_ASYNC_RETURN_GUARANTEED    UINT64_C(0x0400000)
#define DAT_PROVIDER_FIELD_RDMA_WRITE_FOR_RDMA_READ_REQ   UINT64_C(0x0800000)
#define DAT_PROVIDER_FIELD_NUM_PROVIDER_SPECIFIC_ATTR     UINT64_C(0x1000000)
#define DAT_PROVIDER_FIELD_PROVIDER_SPECIFIC_ATTR         UINT64_C(0x2000000)
#define DAT_PROVIDER_FIELD_ALL                            UINT64_C(0x3FFFFFF)
#define DAT_PROVIDER_FIELD_NONE                           UINT64_C(0x0)

/* Functions whose argument types live in this header */
DAT_EXPORT DAT_RETURN dat_evd_query(IN DAT_EVD_HANDLE evd, IN DAT_EVD_PARAM_MASK mask, OUT DAT_EVD_PARAM *param);
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
