/* test_compat.c - what deployed DAT 1.2 providers (compat-dapl on
 * InfiniBand) do where the pages are silent, and what programs written for
 * them (compat-dapl's dtest and dapltest) rely on:
 *   - sends and receives from LMRs registered with local write only (dtest);
 *   - zero-length LMR triplets valid in every post call and in the sync
 *     calls, their context and address ignored;
 *   - dat_lmr_create of a range that wraps or is not mapped fails with
 *     DAT_INVALID_PARAMETER and registers nothing;
 *   - connection qualifiers above 65535 (dapltest's 0xAffab1e);
 *   - DAT_PSP_PROVIDER_FLAG: the provider creates the EP of a request;
 *   - dat_ia_query checking its masks and output pointers;
 *   - DAT_CR_ARRIVAL_EVENT_DATA.sp_handle as the DAT 1.2 union, EVD state
 *     bits, the EP's remote address after an accept. */
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>

#include "dat_test.h"

#define LEN 4096
static char cbuf[LEN], sbuf[LEN];

static DAT_LMR_TRIPLET junk_triplet(void) {
    DAT_LMR_TRIPLET t;
    t.lmr_context = 0xdeadbeefu; /* no such LMR */
    t.pad = 0;
    t.virtual_address = 0x10; /* not mapped */
    t.segment_length = 0;
    return t;
}

int main(void) {
    DAT_EVD_HANDLE async;
    DAT_IA_HANDLE ia;
    pair_t p;
    lmr_t cl, sl;

    alarm(120);
    setenv("REMORA_DAT_MAX_LMRS", "3", 1);
    ia = open_ia(IA_NAME, &async);

    STEP("dat_ia_query: NULL attribute pointer with a non-zero mask, unknown IA mask bits");
    {
        DAT_IA_ATTR ia_attr;
        DAT_PROVIDER_ATTR pattr;
        DAT_EVD_HANDLE ae = DAT_HANDLE_NULL;
        EXPECT(dat_ia_query(ia, &ae, DAT_IA_FIELD_ALL, NULL, 0, NULL), DAT_INVALID_PARAMETER);
        EXPECT(dat_ia_query(ia, &ae, DAT_IA_FIELD_IA_MAX_EPS, NULL, 0, NULL), DAT_INVALID_PARAMETER);
        EXPECT(dat_ia_query(ia, &ae, 0, NULL, DAT_PROVIDER_FIELD_ALL, NULL), DAT_INVALID_PARAMETER);
        EXPECT(dat_ia_query(ia, &ae, DAT_IA_FIELD_ALL + 1, &ia_attr, 0, NULL), DAT_INVALID_PARAMETER);
        OK(dat_ia_query(ia, &ae, 0, NULL, 0, NULL));
        CHECK(ae == async);
        OK(dat_ia_query(ia, NULL, DAT_IA_FIELD_ALL, &ia_attr, DAT_PROVIDER_FIELD_ALL, &pattr));
        CHECK(ia_attr.max_mtu_size == ia_attr.max_message_size && ia_attr.max_lmrs == 3);
        CHECK(pattr.ep_creator == DAT_PSP_CREATES_EP_IFASKED && pattr.pz_support == DAT_PZ_UNIQUE);
        CHECK(pattr.evd_stream_merging_supported[0][5] == DAT_TRUE);
    }

    STEP("EVD state: one bit of enabled/disabled and one of waitable/unwaitable");
    {
        DAT_EVD_HANDLE e = mk_evd(ia, DAT_EVD_DTO_FLAG, 4);
        DAT_EVD_PARAM ep;
        OK(dat_evd_set_unwaitable(e));
        OK(dat_evd_disable(e));
        OK(dat_evd_query(e, DAT_EVD_FIELD_ALL, &ep));
        CHECK(ep.evd_state == (DAT_EVD_STATE_DISABLED | DAT_EVD_STATE_UNWAITABLE));
        OK(dat_evd_free(e));
    }

    pair_open(&p, ia, NULL);

    STEP("dat_lmr_create: a range that wraps or is not mapped is DAT_INVALID_PARAMETER, nothing registered");
    {
        DAT_REGION_DESCRIPTION r;
        DAT_LMR_HANDLE h = DAT_HANDLE_NULL;
        DAT_LMR_CONTEXT lc = 0;
        DAT_VLEN sz;
        DAT_VADDR va;
        long page = sysconf(_SC_PAGESIZE);
        char *hole = mmap(NULL, (size_t)page * 3, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHECK(hole != MAP_FAILED);
        CHECK(munmap(hole + page, (size_t)page) == 0); /* mapped, hole, mapped */
        r.for_va = (DAT_PVOID)(uintptr_t)(UINTPTR_MAX - 4095);
        EXPECT(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, 8192, p.cpz, DAT_MEM_PRIV_ALL_FLAG, &h, &lc, NULL, &sz,
                              &va),
               DAT_INVALID_PARAMETER);
        r.for_va = cbuf;
        EXPECT(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, UINT64_MAX - 16, p.cpz, DAT_MEM_PRIV_ALL_FLAG, &h, &lc,
                              NULL, &sz, &va),
               DAT_INVALID_PARAMETER);
        r.for_va = hole;
        EXPECT(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, (DAT_VLEN)page * 3, p.cpz, DAT_MEM_PRIV_ALL_FLAG, &h, &lc,
                              NULL, &sz, &va),
               DAT_INVALID_PARAMETER);
        r.for_va = hole + page;
        EXPECT(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, 16, p.cpz, DAT_MEM_PRIV_ALL_FLAG, &h, &lc, NULL, &sz, &va),
               DAT_INVALID_PARAMETER);
        CHECK(h == DAT_HANDLE_NULL && lc == 0);
        /* The three LMRs max_lmrs allows are all still available. */
        {
            lmr_t a = mk_lmr(ia, p.cpz, hole, (DAT_VLEN)page, DAT_MEM_PRIV_LOCAL_WRITE_FLAG);
            lmr_t b = mk_lmr(ia, p.cpz, hole + 2 * page, (DAT_VLEN)page, DAT_MEM_PRIV_LOCAL_WRITE_FLAG);
            lmr_t c = mk_lmr(ia, p.cpz, cbuf, LEN, DAT_MEM_PRIV_LOCAL_WRITE_FLAG);
            OK(dat_lmr_free(a.h));
            OK(dat_lmr_free(b.h));
            OK(dat_lmr_free(c.h));
        }
        munmap(hole, (size_t)page);
        munmap(hole + 2 * page, (size_t)page);
    }

    /* As dtest registers its message buffers: local write only. */
    cl = mk_lmr(ia, p.cpz, cbuf, LEN, DAT_MEM_PRIV_LOCAL_WRITE_FLAG);
    sl = mk_lmr(ia, p.spz, sbuf, LEN, DAT_MEM_PRIV_LOCAL_WRITE_FLAG | DAT_MEM_PRIV_REMOTE_READ_FLAG |
                                           DAT_MEM_PRIV_REMOTE_WRITE_FLAG);

    STEP("send and receive from LMRs registered with DAT_MEM_PRIV_LOCAL_WRITE_FLAG only");
    {
        DAT_LMR_TRIPLET riov = seg(&sl, sbuf, 64), siov = seg(&cl, cbuf, 64);
        DAT_DTO_COMPLETION_EVENT_DATA d;
        strcpy(cbuf, "sent from a local-write-only LMR");
        OK(dat_ep_post_recv(p.sep, 1, &riov, cookie64(1), DAT_COMPLETION_DEFAULT_FLAG));
        OK(dat_ep_post_send(p.cep, 1, &siov, cookie64(2), DAT_COMPLETION_DEFAULT_FLAG));
        d = wait_dto(p.c_req);
        CHECK(d.status == DAT_DTO_SUCCESS && d.user_cookie.as_64 == 2);
        d = wait_dto(p.s_rcv);
        CHECK(d.status == DAT_DTO_SUCCESS && d.user_cookie.as_64 == 1 && d.transfered_length == 64);
        CHECK(strcmp(sbuf, "sent from a local-write-only LMR") == 0);
    }

    STEP("zero-length triplets: context and address ignored in every post call");
    {
        DAT_LMR_TRIPLET z = junk_triplet();
        DAT_LMR_TRIPLET two[2];
        DAT_RMR_TRIPLET rt = rseg(&sl, sbuf + 128, 32);
        DAT_DTO_COMPLETION_EVENT_DATA d;
        /* a receive of nothing, a send of nothing */
        OK(dat_ep_post_recv(p.sep, 1, &z, cookie64(10), DAT_COMPLETION_DEFAULT_FLAG));
        OK(dat_ep_post_send(p.cep, 1, &z, cookie64(11), DAT_COMPLETION_DEFAULT_FLAG));
        d = wait_dto(p.c_req);
        CHECK(d.status == DAT_DTO_SUCCESS && d.user_cookie.as_64 == 11);
        d = wait_dto(p.s_rcv);
        CHECK(d.status == DAT_DTO_SUCCESS && d.user_cookie.as_64 == 10 && d.transfered_length == 0);
        /* a zero-length segment among real ones */
        memset(cbuf + 256, 'w', 32);
        two[0] = z;
        two[1] = seg(&cl, cbuf + 256, 32);
        OK(dat_ep_post_rdma_write(p.cep, 2, two, cookie64(12), &rt, DAT_COMPLETION_DEFAULT_FLAG));
        d = wait_dto(p.c_req);
        CHECK(d.status == DAT_DTO_SUCCESS && d.user_cookie.as_64 == 12 && d.transfered_length == 32);
        CHECK(memcmp(sbuf + 128, cbuf + 256, 32) == 0);
        two[0] = seg(&cl, cbuf + 512, 32);
        two[1] = z;
        OK(dat_ep_post_rdma_read(p.cep, 2, two, cookie64(13), &rt, DAT_COMPLETION_DEFAULT_FLAG));
        d = wait_dto(p.c_req);
        CHECK(d.status == DAT_DTO_SUCCESS && d.user_cookie.as_64 == 13);
        CHECK(memcmp(cbuf + 512, cbuf + 256, 32) == 0);
        /* only zero-length segments: an RDMA write of nothing */
        OK(dat_ep_post_rdma_write(p.cep, 1, &z, cookie64(14), &rt, DAT_COMPLETION_DEFAULT_FLAG));
        d = wait_dto(p.c_req);
        CHECK(d.status == DAT_DTO_SUCCESS && d.user_cookie.as_64 == 14 && d.transfered_length == 0);
        CHECK(ep_state_of(p.cep) == DAT_EP_STATE_CONNECTED);
    }

    STEP("zero-length triplets in dat_lmr_sync_rdma_read / _write");
    {
        DAT_LMR_TRIPLET t[2];
        t[0] = junk_triplet();
        t[1] = seg(&cl, cbuf, 16);
        OK(dat_lmr_sync_rdma_read(ia, t, 2));
        OK(dat_lmr_sync_rdma_write(ia, t, 2));
        OK(dat_lmr_sync_rdma_write(ia, t, 1));
        t[1].lmr_context ^= 0x5a5a0000u; /* a non-zero segment is still checked */
        EXPECT(dat_lmr_sync_rdma_read(ia, t, 2), DAT_INVALID_PARAMETER);
    }

    STEP("the passive EP knows its peer's address after the accept");
    {
        DAT_EP_PARAM ep;
        OK(dat_ep_query(p.sep, DAT_EP_FIELD_ALL, &ep));
        CHECK(ep.remote_ia_address_ptr != NULL &&
              ((struct sockaddr_in *)ep.remote_ia_address_ptr)->sin_addr.s_addr == htonl(INADDR_LOOPBACK));
    }

    STEP("connection qualifier 0xAffab1e (above 65535) and DAT_PSP_PROVIDER_FLAG");
    {
        const DAT_CONN_QUAL qual = 0xAffab1e;
        DAT_PSP_HANDLE psp;
        DAT_PSP_PARAM pp;
        DAT_CR_PARAM crp;
        DAT_EP_PARAM epp;
        DAT_EP_HANDLE cep, pep;
        DAT_EVENT ev;
        DAT_CR_HANDLE cr;
        struct sockaddr_in sa = loopback();
        DAT_EVD_HANDLE crevd = mk_evd(ia, DAT_EVD_CR_FLAG, 4);
        DAT_EVD_HANDLE c_conn = mk_evd(ia, DAT_EVD_CONNECTION_FLAG, 4);
        OK(dat_psp_create(ia, qual, crevd, DAT_PSP_PROVIDER_FLAG, &psp));
        OK(dat_psp_query(psp, DAT_PSP_FIELD_ALL, &pp));
        CHECK(pp.conn_qual == qual && pp.psp_flags == DAT_PSP_PROVIDER_FLAG);
        OK(dat_ep_create(ia, p.cpz, p.c_rcv, p.c_req, c_conn, NULL, &cep));
        OK(dat_ep_connect(cep, (DAT_IA_ADDRESS_PTR)&sa, qual, 10 * SEC, 0, NULL, DAT_QOS_BEST_EFFORT,
                          DAT_CONNECT_DEFAULT_FLAG));
        ev = wait_event(crevd, DAT_CONNECTION_REQUEST_EVENT);
        CHECK(ev.event_data.cr_arrival_event_data.sp_handle.psp_handle == psp);
        CHECK(ev.event_data.cr_arrival_event_data.conn_qual == qual);
        cr = ev.event_data.cr_arrival_event_data.cr_handle;
        OK(dat_cr_query(cr, DAT_CR_FIELD_ALL, &crp));
        pep = crp.local_ep_handle; /* made by the provider */
        CHECK(pep != DAT_HANDLE_NULL);
        CHECK(ep_state_of(pep) == DAT_EP_STATE_UNCONFIGURED_TENTATIVE);
        memset(&epp, 0, sizeof epp);
        epp.pz_handle = p.spz;
        epp.recv_evd_handle = p.s_rcv;
        epp.request_evd_handle = p.s_req;
        epp.connect_evd_handle = p.s_conn;
        OK(dat_ep_modify(pep,
                         DAT_EP_FIELD_PZ_HANDLE | DAT_EP_FIELD_RECV_EVD_HANDLE | DAT_EP_FIELD_REQUEST_EVD_HANDLE |
                             DAT_EP_FIELD_CONNECT_EVD_HANDLE,
                         &epp));
        CHECK(ep_state_of(pep) == DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING);
        OK(dat_cr_accept(cr, DAT_HANDLE_NULL, 0, NULL)); /* NULL: the provider's EP */
        wait_event(c_conn, DAT_CONNECTION_EVENT_ESTABLISHED);
        wait_event(p.s_conn, DAT_CONNECTION_EVENT_ESTABLISHED);
        CHECK(ep_state_of(pep) == DAT_EP_STATE_CONNECTED);
        {
            DAT_LMR_TRIPLET riov = seg(&sl, sbuf + 1024, 16), siov = seg(&cl, cbuf + 1024, 16);
            memcpy(cbuf + 1024, "provider EP", 12);
            OK(dat_ep_post_recv(pep, 1, &riov, cookie64(20), DAT_COMPLETION_DEFAULT_FLAG));
            OK(dat_ep_post_send(cep, 1, &siov, cookie64(21), DAT_COMPLETION_DEFAULT_FLAG));
            CHECK(wait_dto(p.c_req).status == DAT_DTO_SUCCESS);
            CHECK(wait_dto(p.s_rcv).user_cookie.as_64 == 20);
            CHECK(strcmp(sbuf + 1024, "provider EP") == 0);
        }
        OK(dat_ep_disconnect(cep, DAT_CLOSE_ABRUPT_FLAG));
        wait_event(c_conn, DAT_CONNECTION_EVENT_DISCONNECTED);
        OK(dat_ep_free(cep));
        OK(dat_ep_free(pep));
        /* A rejected request frees the EP the provider made for it. */
        OK(dat_ep_create(ia, p.cpz, p.c_rcv, p.c_req, c_conn, NULL, &cep));
        OK(dat_ep_connect(cep, (DAT_IA_ADDRESS_PTR)&sa, qual, 10 * SEC, 0, NULL, DAT_QOS_BEST_EFFORT,
                          DAT_CONNECT_DEFAULT_FLAG));
        ev = wait_event(crevd, DAT_CONNECTION_REQUEST_EVENT);
        cr = ev.event_data.cr_arrival_event_data.cr_handle;
        OK(dat_cr_query(cr, DAT_CR_FIELD_ALL, &crp));
        pep = crp.local_ep_handle;
        OK(dat_cr_reject(cr));
        {
            DAT_HANDLE_TYPE t;
            EXPECT(dat_get_handle_type(pep, &t), DAT_INVALID_HANDLE);
        }
        wait_event(c_conn, DAT_CONNECTION_EVENT_PEER_REJECTED);
        OK(dat_ep_free(cep));
        OK(dat_psp_free(psp));
        OK(dat_evd_free(crevd));
        OK(dat_evd_free(c_conn));
    }

    OK(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG));
    fprintf(stderr, "test_compat: ok\n");
    return 0;
}
