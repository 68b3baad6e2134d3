/* compat/dat/tests/test_ep_post_rdma_write.c - dat_ep_post_rdma_write(3DAT),
 * one block per paragraph of the seed page (shared/seeds/003_*.txt). */
#include "dat_test.h"

/* src lies inside a larger arena so that a segment one byte before it is a
 * valid address outside its LMR (the INVALID_PARAMETER case), not UB. */
static char arena[64 + 8192];
static char *const src = arena + 64;
static char dst[8192], other[4096], rdonly[4096];
#define SRC_SIZE 8192

static DAT_EVENT drain_one(DAT_EVD_HANDLE evd) {
    DAT_EVENT ev;
    OK(dat_evd_dequeue(evd, &ev));
    return ev;
}

int main(void) {
    DAT_EVD_HANDLE async;
    DAT_IA_HANDLE ia;
    pair_t p;
    DAT_EP_ATTR ca = default_ep_attr();
    lmr_t ls, lt, lother, lro, lnoread;
    DAT_DTO_COMPLETION_EVENT_DATA d;
    DAT_EVENT ev;
    DAT_COUNT nmore;
    alarm(120);

    ia = open_ia(IA_NAME, &async);
    ca.max_request_dtos = 4;
    pair_open(&p, ia, &ca);
    ls = mk_lmr(ia, p.cpz, src, SRC_SIZE, DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_LOCAL_WRITE_FLAG);
    lt = mk_lmr(ia, p.spz, dst, sizeof dst, DAT_MEM_PRIV_ALL_FLAG);
    lother = mk_lmr(ia, p.spz, other, sizeof other, DAT_MEM_PRIV_ALL_FLAG);
    lro = mk_lmr(ia, p.spz, rdonly, sizeof rdonly, DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_REMOTE_READ_FLAG);
    CHECK(lt.rctx != 0);

    STEP("the local_iov segments are traversed in I/O vector order");
    {
        DAT_LMR_TRIPLET iov[3];
        DAT_RMR_TRIPLET r = rseg(&lt, dst + 100, 3 * 10);
        memcpy(src + 2000, "CCCCCCCCCC", 10);
        memcpy(src + 0, "AAAAAAAAAA", 10);
        memcpy(src + 1000, "BBBBBBBBBB", 10);
        iov[0] = seg(&ls, src + 1000, 10); /* B */
        iov[1] = seg(&ls, src + 0, 10);    /* A */
        iov[2] = seg(&ls, src + 2000, 10); /* C */
        OK(dat_ep_post_rdma_write(p.cep, 3, iov, cookie64(0x1111), &r, DAT_COMPLETION_DEFAULT_FLAG));
        d = wait_dto(p.c_req);
        CHECK(d.status == DAT_DTO_SUCCESS);
        CHECK(d.transfered_length == 30);
        CHECK(memcmp(dst + 100, "BBBBBBBBBBAAAAAAAAAACCCCCCCCCC", 30) == 0);
    }

    STEP("the user_cookie comes back in the completion event, with the EP");
    CHECK(d.user_cookie.as_64 == 0x1111);
    CHECK(d.ep_handle == p.cep);

    STEP("completions are reported in posting order (write, read, write)");
    {
        DAT_LMR_TRIPLET iov = seg(&ls, src, 4096);
        DAT_RMR_TRIPLET r = rseg(&lt, dst + 4096, 4096);
        int k;
        for (k = 0; k < 5; ++k) {
            iov = seg(&ls, src, 4096);
            r = rseg(&lt, dst + 4096, 4096);
            OK(dat_ep_post_rdma_write(p.cep, 1, &iov, cookie64(1001), &r, 0));
            iov = seg(&ls, src + 7000, 10);
            r = rseg(&lt, dst, 10);
            OK(dat_ep_post_rdma_read(p.cep, 1, &iov, cookie64(1002), &r, 0));
            OK(dat_ep_post_rdma_write(p.cep, 1, &iov, cookie64(1003), &r, 0));
            CHECK(wait_dto(p.c_req).user_cookie.as_64 == 1001);
            CHECK(wait_dto(p.c_req).user_cookie.as_64 == 1002);
            CHECK(wait_dto(p.c_req).user_cookie.as_64 == 1003);
        }
    }

    STEP("local_iov may be reused once the call returned (the provider copied it)");
    {
        DAT_LMR_TRIPLET iov = seg(&ls, src, 10);
        DAT_RMR_TRIPLET r = rseg(&lt, dst + 200, 10);
        OK(dat_ep_post_rdma_write(p.cep, 1, &iov, cookie64(7), &r, DAT_COMPLETION_DEFAULT_FLAG));
        memset(&iov, 0xff, sizeof iov);
        memset(&r, 0xff, sizeof r);
        d = wait_dto(p.c_req);
        CHECK(d.status == DAT_DTO_SUCCESS && d.user_cookie.as_64 == 7);
        CHECK(memcmp(dst + 200, "AAAAAAAAAA", 10) == 0);
    }

    STEP("0x01 suppresses the successful completion");
    {
        DAT_LMR_TRIPLET iov = seg(&ls, src + 1000, 10);
        DAT_RMR_TRIPLET r = rseg(&lt, dst + 300, 10);
        OK(dat_ep_post_rdma_write(p.cep, 1, &iov, cookie64(21), &r, DAT_COMPLETION_SUPPRESS_FLAG));
        r = rseg(&lt, dst + 400, 10);
        OK(dat_ep_post_rdma_write(p.cep, 1, &iov, cookie64(22), &r, DAT_COMPLETION_DEFAULT_FLAG));
        d = wait_dto(p.c_req);
        CHECK(d.user_cookie.as_64 == 22); /* the suppressed one never shows */
        /* a DTO EVD reports the bare DAT_QUEUE_EMPTY, as compat-dapl does */
        CHECK(dat_evd_dequeue(p.c_req, &ev) == DAT_QUEUE_EMPTY);
        CHECK(memcmp(dst + 300, "BBBBBBBBBB", 10) == 0);
    }

    STEP("0x04 without the EP configured for it is DAT_INVALID_PARAMETER");
    {
        DAT_LMR_TRIPLET iov = seg(&ls, src, 10);
        DAT_RMR_TRIPLET r = rseg(&lt, dst, 10);
        EXPECT(dat_ep_post_rdma_write(p.cep, 1, &iov, cookie64(1), &r, DAT_COMPLETION_UNSIGNALLED_FLAG),
               DAT_INVALID_PARAMETER);
    }

    STEP("0x04 on an EP created with it: completion without notification");
    {
        pair_t q;
        DAT_EP_ATTR ua = default_ep_attr();
        lmr_t qs, qt;
        DAT_LMR_TRIPLET iov;
        DAT_RMR_TRIPLET r;
        ua.request_completion_flags = DAT_COMPLETION_UNSIGNALLED_FLAG;
        pair_open(&q, ia, &ua);
        qs = mk_lmr(ia, q.cpz, src, SRC_SIZE, DAT_MEM_PRIV_LOCAL_READ_FLAG);
        qt = mk_lmr(ia, q.spz, other, sizeof other, DAT_MEM_PRIV_ALL_FLAG);
        iov = seg(&qs, src, 10);
        r = rseg(&qt, other, 10);
        OK(dat_ep_post_rdma_write(q.cep, 1, &iov, cookie64(31), &r, DAT_COMPLETION_UNSIGNALLED_FLAG));
        /* A waiter is not woken by it ... */
        EXPECT(dat_evd_wait(q.c_req, 300000, 1, &ev, &nmore), DAT_TIMEOUT_EXPIRED);
        CHECK(nmore == 1);
        /* ... but the completion is there to dequeue. */
        ev = drain_one(q.c_req);
        CHECK(ev.event_data.dto_completion_event_data.user_cookie.as_64 == 31);
        CHECK(ev.event_data.dto_completion_event_data.status == DAT_DTO_SUCCESS);
        CHECK(memcmp(other, "AAAAAAAAAA", 10) == 0);
        OK(dat_ep_disconnect(q.cep, DAT_CLOSE_ABRUPT_FLAG));
        OK(dat_ep_free(q.cep));
        OK(dat_ep_free(q.sep));
        OK(dat_lmr_free(qs.h));
        OK(dat_lmr_free(qt.h));
    }

    STEP("0x08 barrier fence: the write waits for the earlier RDMA read");
    {
        DAT_LMR_TRIPLET iov;
        DAT_RMR_TRIPLET r;
        memset(dst + 4096, 'o', 1024);   /* old contents at the target */
        memset(src + 4096, 'n', 1024);   /* new contents */
        memset(src + 6000, 0, 1024);     /* read lands here */
        iov = seg(&ls, src + 6000, 1024);
        r = rseg(&lt, dst + 4096, 1024);
        OK(dat_ep_post_rdma_read(p.cep, 1, &iov, cookie64(41), &r, DAT_COMPLETION_DEFAULT_FLAG));
        iov = seg(&ls, src + 4096, 1024);
        OK(dat_ep_post_rdma_write(p.cep, 1, &iov, cookie64(42), &r, DAT_COMPLETION_BARRIER_FENCE_FLAG));
        d = wait_dto(p.c_req);
        CHECK(d.user_cookie.as_64 == 41 && d.status == DAT_DTO_SUCCESS);
        d = wait_dto(p.c_req);
        CHECK(d.user_cookie.as_64 == 42 && d.status == DAT_DTO_SUCCESS);
        CHECK(src[6000] == 'o' && src[6000 + 1023] == 'o'); /* the read saw the old data */
        CHECK(dst[4096] == 'n' && dst[4096 + 1023] == 'n');
    }

    STEP("DAT_INVALID_PARAMETER: a segment outside its LMR, bad counts, flags, remote buffer");
    {
        DAT_LMR_TRIPLET iov = seg(&ls, src + SRC_SIZE - 5, 10);
        DAT_RMR_TRIPLET r = rseg(&lt, dst, 100);
        EXPECT(dat_ep_post_rdma_write(p.cep, 1, &iov, cookie64(0), &r, 0), DAT_INVALID_PARAMETER);
        iov = seg(&ls, src - 1, 10);
        EXPECT(dat_ep_post_rdma_write(p.cep, 1, &iov, cookie64(0), &r, 0), DAT_INVALID_PARAMETER);
        iov = seg(&ls, src, 10);
        EXPECT(dat_ep_post_rdma_write(p.cep, -1, &iov, cookie64(0), &r, 0), DAT_INVALID_PARAMETER);
        EXPECT(dat_ep_post_rdma_write(p.cep, 99, &iov, cookie64(0), &r, 0), DAT_INVALID_PARAMETER);
        EXPECT(dat_ep_post_rdma_write(p.cep, 1, NULL, cookie64(0), &r, 0), DAT_INVALID_PARAMETER);
        EXPECT(dat_ep_post_rdma_write(p.cep, 1, &iov, cookie64(0), NULL, 0), DAT_INVALID_PARAMETER);
        EXPECT(dat_ep_post_rdma_write(p.cep, 1, &iov, cookie64(0), &r, (DAT_COMPLETION_FLAGS)0x40),
               DAT_INVALID_PARAMETER);
    }

    STEP("DAT_LENGTH_ERROR: the remote buffer is smaller than the local data");
    {
        DAT_LMR_TRIPLET iov[2];
        DAT_RMR_TRIPLET r = rseg(&lt, dst, 15);
        iov[0] = seg(&ls, src, 10);
        iov[1] = seg(&ls, src + 100, 10);
        EXPECT(dat_ep_post_rdma_write(p.cep, 2, iov, cookie64(0), &r, 0), DAT_LENGTH_ERROR);
    }

    STEP("DAT_PROTECTION_VIOLATION: an LMR of another PZ than the EP's");
    {
        DAT_LMR_TRIPLET iov = seg(&lother, other, 10); /* lother is in the server's PZ */
        DAT_RMR_TRIPLET r = rseg(&lt, dst, 10);
        EXPECT(dat_ep_post_rdma_write(p.cep, 1, &iov, cookie64(0), &r, 0), DAT_PROTECTION_VIOLATION);
    }

    STEP("DAT_PRIVILEGES_VIOLATION: an invalid LMR (a source needs no local read, as on InfiniBand)");
    {
        DAT_LMR_TRIPLET iov;
        DAT_RMR_TRIPLET r = rseg(&lt, dst, 10);
        lnoread = mk_lmr(ia, p.cpz, src, SRC_SIZE, DAT_MEM_PRIV_LOCAL_WRITE_FLAG);
        iov = seg(&lnoread, src, 10);
        OK(dat_ep_post_rdma_write(p.cep, 1, &iov, cookie64(77), &r, 0));
        d = wait_dto(p.c_req);
        CHECK(d.status == DAT_DTO_SUCCESS && d.user_cookie.as_64 == 77 && d.transfered_length == 10);
        iov.lmr_context = lnoread.lctx ^ 0x5a5a0000u;
        EXPECT(dat_ep_post_rdma_write(p.cep, 1, &iov, cookie64(0), &r, 0), DAT_PRIVILEGES_VIOLATION);
        OK(dat_lmr_free(lnoread.h));
        iov = seg(&lnoread, src, 10); /* a freed LMR */
        EXPECT(dat_ep_post_rdma_write(p.cep, 1, &iov, cookie64(0), &r, 0), DAT_PRIVILEGES_VIOLATION);
    }

    STEP("DAT_INVALID_HANDLE: the ep_handle is invalid");
    {
        DAT_LMR_TRIPLET iov = seg(&ls, src, 10);
        DAT_RMR_TRIPLET r = rseg(&lt, dst, 10);
        EXPECT(dat_ep_post_rdma_write(DAT_HANDLE_NULL, 1, &iov, cookie64(0), &r, 0), DAT_INVALID_HANDLE);
        EXPECT(dat_ep_post_rdma_write(p.cpz, 1, &iov, cookie64(0), &r, 0), DAT_INVALID_HANDLE);
        EXPECT(dat_ep_post_rdma_write((DAT_EP_HANDLE)&iov, 1, &iov, cookie64(0), &r, 0), DAT_INVALID_HANDLE);
    }

    STEP("DAT_INSUFFICIENT_RESOURCES: the request queue (max_request_dtos 4) is full");
    {
        DAT_LMR_TRIPLET iov = seg(&ls, src, 10);
        DAT_RMR_TRIPLET r = rseg(&lt, dst, 10);
        int i;
        for (i = 0; i < 4; ++i) OK(dat_ep_post_rdma_write(p.cep, 1, &iov, cookie64(50 + i), &r, 0));
        EXPECT(dat_ep_post_rdma_write(p.cep, 1, &iov, cookie64(54), &r, 0), DAT_INSUFFICIENT_RESOURCES);
        d = wait_dto(p.c_req);
        CHECK(d.user_cookie.as_64 == 50);
        OK(dat_ep_post_rdma_write(p.cep, 1, &iov, cookie64(55), &r, 0));
        for (i = 0; i < 4; ++i) CHECK(wait_dto(p.c_req).status == DAT_DTO_SUCCESS);
    }

    STEP("remote violations are completion statuses, then the EP is disconnected");
    {
        DAT_LMR_TRIPLET iov = seg(&ls, src, 10);
        DAT_RMR_TRIPLET r = rseg(&lro, rdonly, 10); /* no remote write on the target */
        memset(rdonly, 'r', 10);
        OK(dat_ep_post_rdma_write(p.cep, 1, &iov, cookie64(61), &r, 0));
        d = wait_dto(p.c_req);
        CHECK(d.user_cookie.as_64 == 61);
        CHECK(d.status == DAT_DTO_ERR_REMOTE_ACCESS);
        CHECK(memcmp(rdonly, "rrrrrrrrrr", 10) == 0);
        CHECK(ep_state_of(p.cep) == DAT_EP_STATE_DISCONNECTED);
        ev = wait_event(p.c_conn, DAT_CONNECTION_EVENT_BROKEN);
        CHECK(ev.event_data.connect_event_data.ep_handle == p.cep);
    }

    STEP("legal in DISCONNECTED: success, and the DTO is flushed to the request EVD at once");
    {
        DAT_LMR_TRIPLET iov = seg(&ls, src, 10);
        DAT_RMR_TRIPLET r = rseg(&lt, dst, 10);
        OK(dat_ep_post_rdma_write(p.cep, 1, &iov, cookie64(71), &r, 0));
        ev = drain_one(p.c_req);
        CHECK(ev.event_number == DAT_DTO_COMPLETION_EVENT);
        CHECK(ev.event_data.dto_completion_event_data.user_cookie.as_64 == 71);
        CHECK(ev.event_data.dto_completion_event_data.status == DAT_DTO_ERR_FLUSHED);
    }

    STEP("a forged rmr_context: REMOTE_ACCESS, target untouched");
    {
        pair_t q;
        lmr_t qs, qt;
        DAT_LMR_TRIPLET iov;
        DAT_RMR_TRIPLET r;
        pair_open(&q, ia, NULL);
        qs = mk_lmr(ia, q.cpz, src, SRC_SIZE, DAT_MEM_PRIV_LOCAL_READ_FLAG);
        qt = mk_lmr(ia, q.spz, other, sizeof other, DAT_MEM_PRIV_ALL_FLAG);
        memset(other, 'x', 16);
        iov = seg(&qs, src, 10);
        r = rseg(&qt, other, 10);
        r.rmr_context ^= 0x00100001u;
        OK(dat_ep_post_rdma_write(q.cep, 1, &iov, cookie64(81), &r, 0));
        d = wait_dto(q.c_req);
        CHECK(d.status == DAT_DTO_ERR_REMOTE_ACCESS && d.user_cookie.as_64 == 81);
        CHECK(memcmp(other, "xxxxxxxxxx", 10) == 0);
        CHECK(ep_state_of(q.cep) == DAT_EP_STATE_DISCONNECTED);
        OK(dat_ep_free(q.cep));
        OK(dat_ep_free(q.sep));
    }

    STEP("a target region of another PZ than the target EP's: REMOTE_ACCESS");
    {
        pair_t q;
        DAT_PZ_HANDLE third;
        lmr_t qs, qt;
        DAT_LMR_TRIPLET iov;
        DAT_RMR_TRIPLET r;
        pair_open(&q, ia, NULL);
        OK(dat_pz_create(ia, &third));
        qs = mk_lmr(ia, q.cpz, src, SRC_SIZE, DAT_MEM_PRIV_LOCAL_READ_FLAG);
        qt = mk_lmr(ia, third, other, sizeof other, DAT_MEM_PRIV_ALL_FLAG);
        memset(other, 'y', 16);
        iov = seg(&qs, src, 10);
        r = rseg(&qt, other, 10);
        OK(dat_ep_post_rdma_write(q.cep, 1, &iov, cookie64(91), &r, 0));
        d = wait_dto(q.c_req);
        CHECK(d.status == DAT_DTO_ERR_REMOTE_ACCESS && d.user_cookie.as_64 == 91);
        CHECK(memcmp(other, "yyyyyyyyyy", 10) == 0);
        OK(dat_ep_free(q.cep));
        OK(dat_ep_free(q.sep));
        OK(dat_lmr_free(qt.h));
        OK(dat_pz_free(third));
    }

    STEP("DAT_INVALID_STATE: not CONNECTED or DISCONNECTED");
    {
        pair_t q;
        DAT_LMR_TRIPLET iov;
        DAT_RMR_TRIPLET r = rseg(&lt, dst, 10);
        lmr_t qs;
        struct sockaddr_in sa = loopback();
        pair_objects(&q, ia, NULL);
        qs = mk_lmr(ia, q.cpz, src, SRC_SIZE, DAT_MEM_PRIV_LOCAL_READ_FLAG);
        iov = seg(&qs, src, 10);
        CHECK(ep_state_of(q.cep) == DAT_EP_STATE_UNCONNECTED);
        EXPECT(dat_ep_post_rdma_write(q.cep, 1, &iov, cookie64(0), &r, 0), DAT_INVALID_STATE);
        OK(dat_ep_connect(q.cep, (DAT_IA_ADDRESS_PTR)&sa, q.port, 10 * SEC, 0, NULL, DAT_QOS_BEST_EFFORT,
                          DAT_CONNECT_DEFAULT_FLAG));
        wait_event(q.s_cr, DAT_CONNECTION_REQUEST_EVENT); /* never accepted */
        CHECK(ep_state_of(q.cep) == DAT_EP_STATE_ACTIVE_CONNECTION_PENDING);
        EXPECT(dat_ep_post_rdma_write(q.cep, 1, &iov, cookie64(0), &r, 0), DAT_INVALID_STATE);
        OK(dat_ep_free(q.cep));
    }

    OK(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG));
    printf("test_ep_post_rdma_write: ok\n");
    return 0;
}
