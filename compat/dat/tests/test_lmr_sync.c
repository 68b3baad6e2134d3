/* compat/dat/tests/test_lmr_sync.c - dat_lmr_sync_rdma_write(3DAT) and
 * dat_lmr_sync_rdma_read(3DAT) (shared/seeds/000_*.txt, 001_*.txt). */
#include "dat_test.h"

/* b lies inside a larger arena so that one byte before it is a valid
 * address outside its LMR (the INVALID_PARAMETER case), not UB. */
static char a[4096], c[4096], src[4096];
static char b_arena[64 + 4096];
static char *const b = b_arena + 64;
#define B_SIZE 4096

typedef struct {
    DAT_VADDR addr;
    DAT_VLEN len;
} range_msg;

int main(void) {
    DAT_EVD_HANDLE async;
    DAT_IA_HANDLE ia;
    DAT_PROVIDER_ATTR pa;
    pair_t p;
    lmr_t la, lb, lc, ls, lmsg_s, lmsg_r;
    DAT_LMR_TRIPLET segs[3];
    range_msg out, in;
    alarm(120);
    ia = open_ia(IA_NAME, &async);
    pair_open(&p, ia, NULL);

    STEP("the provider attribute says whether the sync calls are needed");
    OK(dat_ia_query(ia, NULL, 0, NULL, DAT_PROVIDER_FIELD_ALL, &pa));
    CHECK(pa.lmr_sync_req == DAT_FALSE || pa.lmr_sync_req == DAT_TRUE);
    fprintf(stderr, "   lmr_sync_req = %s\n", pa.lmr_sync_req ? "DAT_TRUE" : "DAT_FALSE");

    la = mk_lmr(ia, p.spz, a, sizeof a, DAT_MEM_PRIV_ALL_FLAG);
    lb = mk_lmr(ia, p.spz, b, B_SIZE, DAT_MEM_PRIV_ALL_FLAG);
    lc = mk_lmr(ia, p.cpz, c, sizeof c, DAT_MEM_PRIV_ALL_FLAG); /* another PZ */
    ls = mk_lmr(ia, p.cpz, src, sizeof src, DAT_MEM_PRIV_ALL_FLAG);
    lmsg_s = mk_lmr(ia, p.cpz, &out, sizeof out, DAT_MEM_PRIV_LOCAL_READ_FLAG);
    lmsg_r = mk_lmr(ia, p.spz, &in, sizeof in, DAT_MEM_PRIV_LOCAL_WRITE_FLAG);

    STEP("after an incoming RDMA write completes, sync the range it names, then read");
    {
        DAT_LMR_TRIPLET t = seg(&lmsg_r, &in, sizeof in);
        DAT_RMR_TRIPLET r = rseg(&la, a + 64, 256);
        DAT_DTO_COMPLETION_EVENT_DATA d;
        OK(dat_ep_post_recv(p.sep, 1, &t, cookie64(1), 0));
        memset(src, 'w', 256);
        t = seg(&ls, src, 256);
        OK(dat_ep_post_rdma_write(p.cep, 1, &t, cookie64(2), &r, 0));
        /* The initiator then tells the target which range it wrote. */
        out.addr = r.target_address;
        out.len = r.segment_length;
        t = seg(&lmsg_s, &out, sizeof out);
        OK(dat_ep_post_send(p.cep, 1, &t, cookie64(3), 0));
        d = wait_dto(p.s_rcv);
        CHECK(d.status == DAT_DTO_SUCCESS && d.user_cookie.as_64 == 1 && d.transfered_length == sizeof in);
        segs[0].lmr_context = la.lctx;
        segs[0].pad = 0;
        segs[0].virtual_address = in.addr;
        segs[0].segment_length = in.len;
        OK(dat_lmr_sync_rdma_write(ia, segs, 1));
        CHECK(a[64] == 'w' && a[64 + 255] == 'w' && a[63] == 0 && a[64 + 256] == 0);
        CHECK(wait_dto(p.c_req).status == DAT_DTO_SUCCESS);
        CHECK(wait_dto(p.c_req).status == DAT_DTO_SUCCESS);
    }

    STEP("several ranges in one call, across LMRs and protection zones");
    segs[0] = seg(&la, a, 100);
    segs[1] = seg(&lb, b + 4000, 96);
    segs[2] = seg(&lc, c + 1, 10);
    OK(dat_lmr_sync_rdma_write(ia, segs, 3));
    OK(dat_lmr_sync_rdma_read(ia, segs, 3));

    STEP("local writes, then dat_lmr_sync_rdma_read before the peer's RDMA read");
    {
        DAT_LMR_TRIPLET t;
        DAT_RMR_TRIPLET r = rseg(&lb, b, 32);
        memset(b, 'L', 32);
        segs[0] = seg(&lb, b, 32);
        OK(dat_lmr_sync_rdma_read(ia, segs, 1));
        memset(src, 0, 32);
        t = seg(&ls, src, 32);
        OK(dat_ep_post_rdma_read(p.cep, 1, &t, cookie64(4), &r, 0));
        CHECK(wait_dto(p.c_req).status == DAT_DTO_SUCCESS);
        CHECK(src[0] == 'L' && src[31] == 'L');
    }

    STEP("whole LMR and zero segments are fine");
    segs[0] = seg(&la, a, sizeof a);
    OK(dat_lmr_sync_rdma_write(ia, segs, 1));
    OK(dat_lmr_sync_rdma_write(ia, NULL, 0));
    OK(dat_lmr_sync_rdma_read(ia, NULL, 0));

    STEP("DAT_INVALID_HANDLE: the IA handle is invalid");
    segs[0] = seg(&la, a, 10);
    EXPECT(dat_lmr_sync_rdma_write(DAT_HANDLE_NULL, segs, 1), DAT_INVALID_HANDLE);
    EXPECT(dat_lmr_sync_rdma_read(DAT_HANDLE_NULL, segs, 1), DAT_INVALID_HANDLE);
    EXPECT(dat_lmr_sync_rdma_write(p.cpz, segs, 1), DAT_INVALID_HANDLE);
    EXPECT(dat_lmr_sync_rdma_read((DAT_IA_HANDLE)segs, segs, 1), DAT_INVALID_HANDLE);

    STEP("DAT_INVALID_PARAMETER: a segment outside its LMR (in a batch)");
    segs[0] = seg(&la, a, 10);
    segs[1] = seg(&lb, b + 4090, 10); /* 4 bytes past the end */
    EXPECT(dat_lmr_sync_rdma_write(ia, segs, 2), DAT_INVALID_PARAMETER);
    EXPECT(dat_lmr_sync_rdma_read(ia, segs, 2), DAT_INVALID_PARAMETER);
    segs[1] = seg(&lb, b - 1, 10); /* starts before it */
    EXPECT(dat_lmr_sync_rdma_write(ia, segs, 2), DAT_INVALID_PARAMETER);
    EXPECT(dat_lmr_sync_rdma_read(ia, segs, 2), DAT_INVALID_PARAMETER);

    STEP("DAT_INVALID_PARAMETER: the LMR (context) is invalid");
    segs[1] = seg(&lb, b, 10);
    segs[1].lmr_context = lb.lctx ^ 0x40000000u;
    EXPECT(dat_lmr_sync_rdma_write(ia, segs, 2), DAT_INVALID_PARAMETER);
    EXPECT(dat_lmr_sync_rdma_read(ia, segs, 2), DAT_INVALID_PARAMETER);
    OK(dat_lmr_free(lb.h));
    segs[1] = seg(&lb, b, 10); /* a freed LMR */
    EXPECT(dat_lmr_sync_rdma_write(ia, segs, 2), DAT_INVALID_PARAMETER);
    EXPECT(dat_lmr_sync_rdma_read(ia, segs, 2), DAT_INVALID_PARAMETER);
    EXPECT(dat_lmr_sync_rdma_write(ia, NULL, 1), DAT_INVALID_PARAMETER);

    OK(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG));
    printf("test_lmr_sync: ok\n");
    return 0;
}
