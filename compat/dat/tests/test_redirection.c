/* compat/dat/tests/test_redirection.c - every handle starts with a pointer to
 * the provider function table (the DAT 1.2 redirection ABI); calls made
 * through it reach the same functions as the exported symbols. */
#include "dat_test.h"

typedef struct {
    const char *device_name;
    void *extension;
    void (*f[68])(void);
} provider_t;

enum { IA_QUERY = 1, GET_HANDLE_TYPE = 5, CNO_CREATE = 6, EVD_CREATE = 15, EVD_FREE = 24, EP_POST_RDMA_WRITE = 34,
       LMR_CREATE = 37, LMR_FREE = 39, PZ_CREATE = 50, PZ_FREE = 52, PSP_CREATE_ANY = 53, LMR_SYNC_RDMA_WRITE = 58,
       SRQ_CREATE = 62, SRQ_FREE = 63, SRQ_QUERY = 65, SRQ_SET_LW = 67 };

#define PROV(h) (*(provider_t **)(h))

typedef DAT_RETURN (*ia_query_t)(DAT_IA_HANDLE, DAT_EVD_HANDLE *, DAT_IA_ATTR_MASK, DAT_IA_ATTR *,
                                 DAT_PROVIDER_ATTR_MASK, DAT_PROVIDER_ATTR *);
typedef DAT_RETURN (*get_type_t)(DAT_HANDLE, DAT_HANDLE_TYPE *);
typedef DAT_RETURN (*pz_create_t)(DAT_IA_HANDLE, DAT_PZ_HANDLE *);
typedef DAT_RETURN (*pz_free_t)(DAT_PZ_HANDLE);
typedef DAT_RETURN (*evd_create_t)(DAT_IA_HANDLE, DAT_COUNT, DAT_CNO_HANDLE, DAT_EVD_FLAGS, DAT_EVD_HANDLE *);
typedef DAT_RETURN (*evd_free_t)(DAT_EVD_HANDLE);
typedef DAT_RETURN (*lmr_create_t)(DAT_IA_HANDLE, DAT_MEM_TYPE, DAT_REGION_DESCRIPTION, DAT_VLEN, DAT_PZ_HANDLE,
                                   DAT_MEM_PRIV_FLAGS, DAT_LMR_HANDLE *, DAT_LMR_CONTEXT *, DAT_RMR_CONTEXT *,
                                   DAT_VLEN *, DAT_VADDR *);
typedef DAT_RETURN (*lmr_free_t)(DAT_LMR_HANDLE);
typedef DAT_RETURN (*sync_t)(DAT_IA_HANDLE, const DAT_LMR_TRIPLET *, DAT_VLEN);
typedef DAT_RETURN (*srq_create_t)(DAT_IA_HANDLE, DAT_PZ_HANDLE, DAT_SRQ_ATTR *, DAT_SRQ_HANDLE *);
typedef DAT_RETURN (*srq_query_t)(DAT_SRQ_HANDLE, DAT_SRQ_PARAM_MASK, DAT_SRQ_PARAM *);
typedef DAT_RETURN (*srq_set_lw_t)(DAT_SRQ_HANDLE, DAT_COUNT);
typedef DAT_RETURN (*srq_free_t)(DAT_SRQ_HANDLE);
typedef DAT_RETURN (*psp_any_t)(DAT_IA_HANDLE, DAT_CONN_QUAL *, DAT_EVD_HANDLE, DAT_PSP_FLAGS, DAT_PSP_HANDLE *);

static char buf[4096];

int main(void) {
    DAT_EVD_HANDLE async, evd, cr;
    DAT_IA_HANDLE ia = open_ia(IA_NAME, &async);
    DAT_PZ_HANDLE pz;
    DAT_LMR_HANDLE lmr;
    DAT_LMR_CONTEXT lc;
    DAT_RMR_CONTEXT rc;
    DAT_VLEN sz;
    DAT_VADDR va;
    DAT_REGION_DESCRIPTION r;
    DAT_HANDLE_TYPE t;
    DAT_PROVIDER_ATTR pa;
    DAT_LMR_TRIPLET seg1;
    DAT_SRQ_ATTR sa;
    DAT_SRQ_HANDLE srq;
    DAT_SRQ_PARAM sp;
    DAT_PSP_HANDLE psp;
    DAT_CONN_QUAL q;
    alarm(60);
    CHECK(strcmp(PROV(ia)->device_name, "remora") == 0);
    OK(((ia_query_t)PROV(ia)->f[IA_QUERY])(ia, NULL, 0, NULL, DAT_PROVIDER_FIELD_ALL, &pa));
    CHECK(pa.dapl_version_major == 1 && pa.dapl_version_minor == 2);
    OK(((pz_create_t)PROV(ia)->f[PZ_CREATE])(ia, &pz));
    OK(((get_type_t)PROV(pz)->f[GET_HANDLE_TYPE])(pz, &t));
    CHECK(t == DAT_HANDLE_TYPE_PZ);
    OK(((evd_create_t)PROV(ia)->f[EVD_CREATE])(ia, 8, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &evd));
    OK(((evd_create_t)PROV(ia)->f[EVD_CREATE])(ia, 8, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &cr));
    OK(((psp_any_t)PROV(ia)->f[PSP_CREATE_ANY])(ia, &q, cr, DAT_PSP_CONSUMER_FLAG, &psp));
    OK(((get_type_t)PROV(psp)->f[GET_HANDLE_TYPE])(psp, &t));
    CHECK(t == DAT_HANDLE_TYPE_PSP);
    r.for_va = buf;
    OK(((lmr_create_t)PROV(ia)->f[LMR_CREATE])(ia, DAT_MEM_TYPE_VIRTUAL, r, sizeof buf, pz, DAT_MEM_PRIV_ALL_FLAG,
                                                &lmr, &lc, &rc, &sz, &va));
    seg1.lmr_context = lc;
    seg1.pad = 0;
    seg1.virtual_address = va;
    seg1.segment_length = sz;
    OK(((sync_t)PROV(ia)->f[LMR_SYNC_RDMA_WRITE])(ia, &seg1, 1));
    sa.max_recv_dtos = 4;
    sa.max_recv_iov = 1;
    sa.low_watermark = 0;
    OK(((srq_create_t)PROV(ia)->f[SRQ_CREATE])(ia, pz, &sa, &srq));
    OK(((srq_set_lw_t)PROV(srq)->f[SRQ_SET_LW])(srq, 2));
    OK(((srq_query_t)PROV(srq)->f[SRQ_QUERY])(srq, DAT_SRQ_FIELD_ALL, &sp));
    CHECK(sp.low_watermark == 2 && sp.max_recv_dtos == 4);
    OK(((srq_free_t)PROV(srq)->f[SRQ_FREE])(srq));
    OK(((lmr_free_t)PROV(lmr)->f[LMR_FREE])(lmr));
    OK(((evd_free_t)PROV(evd)->f[EVD_FREE])(evd));
    OK(((pz_free_t)PROV(pz)->f[PZ_FREE])(pz));
    OK(dat_psp_free(psp));
    OK(dat_evd_free(cr));
    OK(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG));
    printf("test_redirection: ok\n");
    return 0;
}
