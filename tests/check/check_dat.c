/* tests/check/check_dat.c - uDAPL 1.2 programs for remora-check, each with
 * one deliberate bug or its correct twin (docs/check.md). A client and a
 * server endpoint connected inside one IA (compat/dat/tests/dat_test.h).
 *
 *   check_dat <scenario>
 *
 * The report and exit status are asserted by tests/check/expect.sh. */
#include "dat_test.h"

#define BIG (4u << 20) /* a write long enough to be in flight when the bug strikes */
static char src[BIG], dst[BIG], msg[64], note[8];

static DAT_DTO_COMPLETION_EVENT_DATA expect_dto(DAT_EVD_HANDLE evd, DAT_UINT64 cookie) {
    DAT_DTO_COMPLETION_EVENT_DATA d = wait_dto(evd);
    CHECK(d.status == DAT_DTO_SUCCESS);
    CHECK(d.user_cookie.as_64 == cookie);
    return d;
}

/* Check 2: the gather memory of dat_ep_post_rdma_write changed before its
 * completion (dat_ep_post_rdma_write(3DAT): "must not modify"). */
static int reuse(DAT_IA_HANDLE ia, int bug) {
    pair_t p;
    lmr_t ls, lt;
    DAT_LMR_TRIPLET iov;
    DAT_RMR_TRIPLET r;
    pair_open(&p, ia, NULL);
    memset(src, 's', BIG);
    ls = mk_lmr(ia, p.cpz, src, BIG, DAT_MEM_PRIV_LOCAL_READ_FLAG);
    lt = mk_lmr(ia, p.spz, dst, BIG, DAT_MEM_PRIV_ALL_FLAG);
    iov = seg(&ls, src, BIG);
    r = rseg(&lt, dst, BIG);
    OK(dat_ep_post_rdma_write(p.cep, 1, &iov, cookie64(0x51), &r, DAT_COMPLETION_DEFAULT_FLAG));
    if (bug) memset(src + 4000, 'X', 16);
    expect_dto(p.c_req, 0x51);
    return 0;
}

/* Check 1, incoming: the client writes into the server's LMR and sends a
 * note; the server reads the LMR when the note arrives, after
 * dat_lmr_sync_rdma_write (ok) or without it (bug). */
static int nc_incoming(DAT_IA_HANDLE ia, int bug) {
    pair_t p;
    lmr_t ls, lt, lm, ln;
    DAT_LMR_TRIPLET iov, t;
    DAT_RMR_TRIPLET r;
    DAT_PROVIDER_ATTR pa;
    int same;
    pair_open(&p, ia, NULL);
    ls = mk_lmr(ia, p.cpz, src, 4096, DAT_MEM_PRIV_LOCAL_READ_FLAG);
    ln = mk_lmr(ia, p.cpz, note, sizeof note, DAT_MEM_PRIV_LOCAL_READ_FLAG);
    lt = mk_lmr(ia, p.spz, dst, 4096, DAT_MEM_PRIV_ALL_FLAG);
    lm = mk_lmr(ia, p.spz, msg, sizeof msg, DAT_MEM_PRIV_LOCAL_WRITE_FLAG);
    t = seg(&lm, msg, sizeof msg);
    OK(dat_ep_post_recv(p.sep, 1, &t, cookie64(0x60), DAT_COMPLETION_DEFAULT_FLAG));
    memcpy(src, "data placed by an RDMA write....", 32);
    iov = seg(&ls, src, 32);
    OK(dat_lmr_sync_rdma_read(ia, &iov, 1));
    r = rseg(&lt, dst + 256, 32);
    OK(dat_ep_post_rdma_write(p.cep, 1, &iov, cookie64(0x61), &r, DAT_COMPLETION_DEFAULT_FLAG));
    memcpy(note, "done", 5);
    iov = seg(&ln, note, 5);
    OK(dat_lmr_sync_rdma_read(ia, &iov, 1));
    OK(dat_ep_post_send(p.cep, 1, &iov, cookie64(0x62), DAT_COMPLETION_DEFAULT_FLAG));
    expect_dto(p.c_req, 0x61);
    expect_dto(p.c_req, 0x62);
    expect_dto(p.s_rcv, 0x60);
    if (!bug) {
        t = seg(&lt, dst + 256, 32);
        OK(dat_lmr_sync_rdma_write(ia, &t, 1));
    }
    same = memcmp(dst + 256, src, 32) == 0;
    OK(dat_ia_query(ia, NULL, 0, NULL, DAT_PROVIDER_FIELD_ALL, &pa));
    /* Under the emulation a forgotten sync shows poison, never the data. */
    if (pa.lmr_sync_req) CHECK(same == !bug);
    return 0;
}

/* Check 1, outgoing: the CPU writes the gather memory and posts a write
 * without dat_lmr_sync_rdma_read (bug) or after it (ok). */
static int nc_local(DAT_IA_HANDLE ia, int bug) {
    pair_t p;
    lmr_t ls, lt;
    DAT_LMR_TRIPLET iov;
    DAT_RMR_TRIPLET r;
    pair_open(&p, ia, NULL);
    ls = mk_lmr(ia, p.cpz, src, 4096, DAT_MEM_PRIV_LOCAL_READ_FLAG);
    lt = mk_lmr(ia, p.spz, dst, 4096, DAT_MEM_PRIV_ALL_FLAG);
    memset(src + 1000, 'L', 24);
    iov = seg(&ls, src + 1000, 24);
    if (!bug) OK(dat_lmr_sync_rdma_read(ia, &iov, 1));
    iov = seg(&ls, src + 900, 200);
    r = rseg(&lt, dst, 200);
    OK(dat_ep_post_rdma_write(p.cep, 1, &iov, cookie64(0x71), &r, DAT_COMPLETION_DEFAULT_FLAG));
    expect_dto(p.c_req, 0x71);
    return 0;
}

static int run(int argc, char **argv) {
    DAT_EVD_HANDLE async;
    DAT_IA_HANDLE ia;
    const char *s = argc > 1 ? argv[1] : "";
    alarm(60);
    ia = open_ia(IA_NAME, &async);
    if (!strcmp(s, "reuse-bug")) return reuse(ia, 1);
    if (!strcmp(s, "reuse-ok")) return reuse(ia, 0);
    if (!strcmp(s, "nc-incoming-bug")) return nc_incoming(ia, 1);
    if (!strcmp(s, "nc-incoming-ok")) return nc_incoming(ia, 0);
    if (!strcmp(s, "nc-local-bug")) return nc_local(ia, 1);
    if (!strcmp(s, "nc-local-ok")) return nc_local(ia, 0);
    fprintf(stderr, "check_dat: unknown scenario %s\n", s);
    return 2;
}

int main(int argc, char **argv) {
    int rc = run(argc, argv);
    /* remora-check may force the exit status: this says the program got to its end */
    if (rc == 0) fprintf(stderr, "check-program: done\n");
    return rc;
}
