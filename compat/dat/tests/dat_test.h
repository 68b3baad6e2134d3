/* compat/dat/tests/dat_test.h - small C harness for the uDAPL tests. */
#ifndef DAT_TEST_H
#define DAT_TEST_H

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dat/udat.h>

#define IA_NAME "ofi-tcp-lo"
#define SEC 1000000u /* DAT timeouts are microseconds */

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);    \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

static inline const char *dt_name(DAT_RETURN r) {
    const char *a = "?", *b = "";
    dat_strerror(r, &a, &b);
    return a;
}

#define OK(call)                                                                        \
    do {                                                                                \
        DAT_RETURN _r = (call);                                                         \
        if (_r != DAT_SUCCESS) {                                                        \
            fprintf(stderr, "%s:%d: %s -> 0x%08x %s\n", __FILE__, __LINE__, #call,      \
                    (unsigned)_r, dt_name(_r));                                         \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

/* The call must fail with this DAT_RETURN type (the subtype is free). */
#define EXPECT(call, type)                                                              \
    do {                                                                                \
        DAT_RETURN _r = (call);                                                         \
        if (DAT_GET_TYPE(_r) != (DAT_UINT32)(type) ||                                   \
            ((type) != DAT_SUCCESS && !(_r & DAT_CLASS_ERROR))) {                       \
            fprintf(stderr, "%s:%d: %s -> 0x%08x %s, expected %s\n", __FILE__, __LINE__, \
                    #call, (unsigned)_r, dt_name(_r), #type);                           \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

#define STEP(name) fprintf(stderr, "-- %s\n", name)

static inline DAT_DTO_COOKIE cookie64(DAT_UINT64 v) {
    DAT_DTO_COOKIE c;
    c.as_64 = v;
    return c;
}

static inline DAT_EVENT wait_event(DAT_EVD_HANDLE evd, DAT_EVENT_NUMBER expect) {
    DAT_EVENT ev;
    DAT_COUNT nmore = 0;
    OK(dat_evd_wait(evd, 10 * SEC, 1, &ev, &nmore));
    if (ev.event_number != expect) {
        fprintf(stderr, "event 0x%x, expected 0x%x\n", (unsigned)ev.event_number, (unsigned)expect);
        exit(1);
    }
    return ev;
}

static inline DAT_DTO_COMPLETION_EVENT_DATA wait_dto(DAT_EVD_HANDLE evd) {
    return wait_event(evd, DAT_DTO_COMPLETION_EVENT).event_data.dto_completion_event_data;
}

static inline DAT_IA_HANDLE open_ia(const char *name, DAT_EVD_HANDLE *async) {
    DAT_IA_HANDLE ia;
    *async = DAT_HANDLE_NULL;
    OK(dat_ia_open((const DAT_NAME_PTR)name, 8, async, &ia));
    return ia;
}

static inline DAT_EVD_HANDLE mk_evd(DAT_IA_HANDLE ia, DAT_EVD_FLAGS f, DAT_COUNT qlen) {
    DAT_EVD_HANDLE e;
    OK(dat_evd_create(ia, qlen, DAT_HANDLE_NULL, f, &e));
    return e;
}

static inline DAT_EP_ATTR default_ep_attr(void) {
    DAT_EP_ATTR a;
    memset(&a, 0, sizeof a);
    a.service_type = DAT_SERVICE_TYPE_RC;
    a.max_message_size = 65536;
    a.max_rdma_size = 1 << 20;
    a.qos = DAT_QOS_BEST_EFFORT;
    a.max_recv_dtos = 16;
    a.max_request_dtos = 16;
    a.max_recv_iov = 4;
    a.max_request_iov = 4;
    a.max_rdma_read_iov = 4;
    a.max_rdma_write_iov = 4;
    return a;
}

/* A connected client/server pair inside one IA, each side in its own PZ. */
typedef struct {
    DAT_IA_HANDLE ia;
    DAT_EVD_HANDLE async;
    DAT_PZ_HANDLE cpz, spz;
    DAT_EVD_HANDLE c_req, c_rcv, c_conn, s_req, s_rcv, s_conn, s_cr;
    DAT_EP_HANDLE cep, sep;
    DAT_PSP_HANDLE psp;
    DAT_CONN_QUAL port;
} pair_t;

static inline struct sockaddr_in loopback(void) {
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return sa;
}

static inline void pair_objects(pair_t *p, DAT_IA_HANDLE ia, const DAT_EP_ATTR *cattr) {
    DAT_EP_ATTR sattr = default_ep_attr();
    memset(p, 0, sizeof *p);
    p->ia = ia;
    OK(dat_pz_create(ia, &p->cpz));
    OK(dat_pz_create(ia, &p->spz));
    p->c_req = mk_evd(ia, DAT_EVD_DTO_FLAG, 64);
    p->c_rcv = mk_evd(ia, DAT_EVD_DTO_FLAG, 64);
    p->c_conn = mk_evd(ia, DAT_EVD_CONNECTION_FLAG, 8);
    p->s_req = mk_evd(ia, DAT_EVD_DTO_FLAG, 64);
    p->s_rcv = mk_evd(ia, DAT_EVD_DTO_FLAG, 64);
    p->s_conn = mk_evd(ia, DAT_EVD_CONNECTION_FLAG, 8);
    p->s_cr = mk_evd(ia, DAT_EVD_CR_FLAG, 8);
    OK(dat_ep_create(ia, p->cpz, p->c_rcv, p->c_req, p->c_conn, cattr, &p->cep));
    OK(dat_ep_create(ia, p->spz, p->s_rcv, p->s_req, p->s_conn, &sattr, &p->sep));
    OK(dat_psp_create_any(ia, &p->port, p->s_cr, DAT_PSP_CONSUMER_FLAG, &p->psp));
}

static inline void pair_connect(pair_t *p) {
    struct sockaddr_in sa = loopback();
    DAT_EVENT ev;
    OK(dat_ep_connect(p->cep, (DAT_IA_ADDRESS_PTR)&sa, p->port, 10 * SEC, 0, NULL, DAT_QOS_BEST_EFFORT,
                      DAT_CONNECT_DEFAULT_FLAG));
    ev = wait_event(p->s_cr, DAT_CONNECTION_REQUEST_EVENT);
    OK(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, p->sep, 0, NULL));
    wait_event(p->c_conn, DAT_CONNECTION_EVENT_ESTABLISHED);
    wait_event(p->s_conn, DAT_CONNECTION_EVENT_ESTABLISHED);
}

static inline void pair_open(pair_t *p, DAT_IA_HANDLE ia, const DAT_EP_ATTR *cattr) {
    pair_objects(p, ia, cattr);
    pair_connect(p);
}

static inline DAT_EP_STATE ep_state_of(DAT_EP_HANDLE ep) {
    DAT_EP_STATE st;
    OK(dat_ep_get_status(ep, &st, NULL, NULL));
    return st;
}

/* Register [p, p+len) and return handle/contexts. */
typedef struct {
    DAT_LMR_HANDLE h;
    DAT_LMR_CONTEXT lctx;
    DAT_RMR_CONTEXT rctx;
    DAT_VLEN size;
    DAT_VADDR addr;
} lmr_t;

static inline lmr_t mk_lmr(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, void *p, DAT_VLEN len, DAT_MEM_PRIV_FLAGS priv) {
    lmr_t l;
    DAT_REGION_DESCRIPTION r;
    r.for_va = p;
    OK(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, len, pz, priv, &l.h, &l.lctx, &l.rctx, &l.size, &l.addr));
    return l;
}

static inline DAT_LMR_TRIPLET seg(const lmr_t *l, const void *p, DAT_VLEN len) {
    DAT_LMR_TRIPLET t;
    t.lmr_context = l->lctx;
    t.pad = 0;
    t.virtual_address = (DAT_VADDR)(uintptr_t)p;
    t.segment_length = len;
    return t;
}

static inline DAT_RMR_TRIPLET rseg(const lmr_t *l, const void *p, DAT_VLEN len) {
    DAT_RMR_TRIPLET t;
    t.rmr_context = l->rctx;
    t.pad = 0;
    t.target_address = (DAT_VADDR)(uintptr_t)p;
    t.segment_length = len;
    return t;
}

#endif
