/* test_data.c - rpma_read/write/write_with_imm/atomic_write/flush/send/
 * send_with_imm/recv/srq_*, rpma_conn_req_recv, rpma_cq_* */
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>
#include "common.h"

#define SZ 4096
static char target[SZ], plain[SZ], local[SZ], inbox[SZ];
static struct rpma_mr_local *inbox_mr;

static void post_early_recv(struct rpma_conn_req *req, void *arg)
{
	(void)arg;
	EXPECT_RC(rpma_conn_req_recv(NULL, inbox_mr, 0, 64, (void *)0x1), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_req_recv(req, NULL, 0, 64, (void *)0x1), RPMA_E_INVAL);
	EXPECT_OK(rpma_conn_req_recv(req, inbox_mr, 0, 64, (void *)0x51));
}

int main(void)
{
	check_loaded_library();
	struct ibv_context *ctx;
	struct rpma_peer *peer;
	REQUIRE_OK(rpma_utils_get_ibv_context("127.0.0.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx));
	REQUIRE_OK(rpma_peer_new(ctx, &peer));
	struct rpma_mr_local *tmr, *pmr, *lmr;
	REQUIRE_OK(rpma_mr_reg(peer, target, SZ, RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_READ_SRC |
		RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY | RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT, &tmr));
	REQUIRE_OK(rpma_mr_reg(peer, plain, SZ, RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY, &pmr));
	REQUIRE_OK(rpma_mr_reg(peer, local, SZ, RPMA_MR_USAGE_WRITE_SRC | RPMA_MR_USAGE_READ_DST |
		RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &lmr));
	REQUIRE_OK(rpma_mr_reg(peer, inbox, SZ, RPMA_MR_USAGE_RECV, &inbox_mr));
	struct rpma_mr_remote *rt = remote_of(tmr), *rp = remote_of(pmr);

	struct pair p;
	pair_open_cfg(&p, peer, NULL, NULL, NULL, NULL, post_early_recv, NULL);
	struct rpma_conn *c = p.client;
	struct rpma_cq *cq, *scq;
	REQUIRE_OK(rpma_conn_get_cq(c, &cq));
	REQUIRE_OK(rpma_conn_get_cq(p.server, &scq));
	uint32_t cqp, sqp;
	REQUIRE_OK(rpma_conn_get_qp_num(c, &cqp));
	REQUIRE_OK(rpma_conn_get_qp_num(p.server, &sqp));
	struct ibv_wc wc;
	int got = 0;

	/* ---- rpma_cq_* argument errors and an empty queue ---- */
	int fd;
	EXPECT_RC(rpma_cq_get_fd(NULL, &fd), RPMA_E_INVAL);
	EXPECT_RC(rpma_cq_get_fd(cq, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_cq_get_fd(cq, &fd));
	EXPECT_RC(rpma_cq_wait(NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_cq_get_wc(NULL, 1, &wc, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_cq_get_wc(cq, 0, &wc, &got), RPMA_E_INVAL);
	EXPECT_RC(rpma_cq_get_wc(cq, 1, NULL, &got), RPMA_E_INVAL);
	EXPECT_RC(rpma_cq_get_wc(cq, 2, &wc, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_cq_get_wc(cq, 1, &wc, NULL), RPMA_E_NO_COMPLETION);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	EXPECT_RC(rpma_cq_wait(cq), RPMA_E_NO_COMPLETION);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	/* Blocking, with nothing posted: no completion can come, so the wait
	 * says so rather than never ending (the alarm turns a hang into a
	 * failure). */
	alarm(30);
	EXPECT_RC(rpma_cq_wait(cq), RPMA_E_NO_COMPLETION);
	alarm(0);

	/* ---- rpma_write ---- */
	strcpy(local, "written by rpma_write");
	EXPECT_RC(rpma_write(NULL, rt, 0, lmr, 0, 22, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_write(c, rt, 0, lmr, 0, 22, 0, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_write(c, NULL, 0, lmr, 0, 22, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_write(c, rt, 0, NULL, 0, 22, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_write(c, NULL, 0, NULL, 0, 1, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_write(c, NULL, 8, NULL, 0, 0, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_write(c, rt, 100, lmr, 0, 22, RPMA_F_COMPLETION_ALWAYS, (void *)0x11));
	REQUIRE_OK(wait_wc(cq, &wc));
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE && wc.wr_id == 0x11);
	CHECK(wc.qp_num == cqp);

	/* ---- rpma_flush ---- */
	EXPECT_RC(rpma_flush(NULL, rt, 0, 64, RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_flush(c, NULL, 0, 64, RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_flush(c, rt, 0, 64, (enum rpma_flush_type)7, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_flush(c, rt, 0, 64, RPMA_FLUSH_TYPE_VISIBILITY, 0, NULL), RPMA_E_INVAL);
	/* no direct write to pmem announced yet */
	EXPECT_RC(rpma_flush(c, rt, 0, 64, RPMA_FLUSH_TYPE_PERSISTENT, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_NOSUPP);
	struct rpma_peer_cfg *pcfg;
	REQUIRE_OK(rpma_peer_cfg_new(&pcfg));
	REQUIRE_OK(rpma_peer_cfg_set_direct_write_to_pmem(pcfg, true));
	REQUIRE_OK(rpma_conn_apply_remote_peer_cfg(c, pcfg));
	rpma_peer_cfg_delete(&pcfg);
	/* a region not registered for persistent flushes */
	EXPECT_RC(rpma_flush(c, rp, 0, 64, RPMA_FLUSH_TYPE_PERSISTENT, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_NOSUPP);
	EXPECT_OK(rpma_flush(c, rt, 100, 22, RPMA_FLUSH_TYPE_PERSISTENT, RPMA_F_COMPLETION_ALWAYS, (void *)0x12));
	REQUIRE_OK(wait_wc(cq, &wc));
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ && wc.wr_id == 0x12);
	CHECK(strcmp(target + 100, "written by rpma_write") == 0);
	EXPECT_OK(rpma_flush(c, rp, 0, 64, RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS, (void *)0x13));
	REQUIRE_OK(wait_wc(cq, &wc));
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 0x13);

	/* COMPLETION_ON_ERROR: a successful write reports nothing */
	EXPECT_OK(rpma_write(c, rp, 0, lmr, 0, 8, RPMA_F_COMPLETION_ON_ERROR, (void *)0x14));
	EXPECT_OK(rpma_flush(c, rp, 0, 8, RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS, (void *)0x15));
	REQUIRE_OK(wait_wc(cq, &wc));
	CHECK(wc.wr_id == 0x15);
	CHECK(memcmp(plain, local, 8) == 0);

	/* ---- rpma_read ---- */
	strcpy(target + 1000, "read me");
	EXPECT_RC(rpma_read(NULL, lmr, 0, rt, 1000, 8, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_read(c, lmr, 0, rt, 1000, 8, 0, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_read(c, NULL, 0, rt, 1000, 8, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_read(c, lmr, 0, NULL, 1000, 8, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_read(c, NULL, 0, NULL, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_read(c, lmr, 2000, rt, 1000, 8, RPMA_F_COMPLETION_ALWAYS, (void *)0x21));
	REQUIRE_OK(wait_wc(cq, &wc));
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ && wc.wr_id == 0x21);
	CHECK(strcmp(local + 2000, "read me") == 0);

	/* ---- rpma_atomic_write ---- */
	char v8[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	EXPECT_RC(rpma_atomic_write(NULL, rt, 8, v8, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_atomic_write(c, NULL, 8, v8, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_atomic_write(c, rt, 8, NULL, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_atomic_write(c, rt, 12, v8, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_atomic_write(c, rt, 8, v8, 0, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_atomic_write(c, rt, 8, v8, RPMA_F_COMPLETION_ALWAYS, (void *)0x31));
	REQUIRE_OK(wait_wc(cq, &wc));
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE && wc.wr_id == 0x31);
	CHECK(memcmp(target + 8, v8, 8) == 0);

	/* ---- rpma_send / rpma_recv (the early receive from rpma_conn_req_recv) ---- */
	strcpy(local + 3000, "ping");
	EXPECT_RC(rpma_send(NULL, lmr, 3000, 5, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_send(c, lmr, 3000, 5, 0, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_send(c, NULL, 3000, 5, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_send(c, NULL, 0, 5, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_send(c, lmr, 3000, 5, RPMA_F_COMPLETION_ALWAYS, (void *)0x41));
	REQUIRE_OK(wait_wc(cq, &wc));
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND && wc.wr_id == 0x41);
	REQUIRE_OK(wait_wc(scq, &wc));
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.wr_id == 0x51);
	CHECK(wc.byte_len == 5 && strcmp(inbox, "ping") == 0 && wc.qp_num == sqp);
	CHECK((wc.wc_flags & IBV_WC_WITH_IMM) == 0);

	/* ---- rpma_send_with_imm ---- */
	EXPECT_RC(rpma_recv(NULL, inbox_mr, 0, 64, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_recv(p.server, NULL, 0, 64, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_recv(p.server, NULL, 4, 0, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_recv(p.server, inbox_mr, 64, 64, (void *)0x52));
	EXPECT_RC(rpma_send_with_imm(NULL, lmr, 3000, 5, RPMA_F_COMPLETION_ALWAYS, 7, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_send_with_imm(c, lmr, 3000, 5, 0, 7, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_send_with_imm(c, NULL, 1, 0, RPMA_F_COMPLETION_ALWAYS, 7, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_send_with_imm(c, lmr, 3000, 5, RPMA_F_COMPLETION_ALWAYS, 0x01020304, (void *)0x42));
	REQUIRE_OK(wait_wc(cq, &wc));
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND && wc.wr_id == 0x42);
	REQUIRE_OK(wait_wc(scq, &wc));
	CHECK(wc.opcode == IBV_WC_RECV && wc.wr_id == 0x52 && (wc.wc_flags & IBV_WC_WITH_IMM));
	CHECK(ntohl(wc.imm_data) == 0x01020304);

	/* ---- rpma_write_with_imm ---- */
	EXPECT_OK(rpma_recv(p.server, inbox_mr, 128, 64, (void *)0x53));
	EXPECT_RC(rpma_write_with_imm(NULL, rt, 0, lmr, 0, 4, RPMA_F_COMPLETION_ALWAYS, 9, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_write_with_imm(c, rt, 0, lmr, 0, 4, 0, 9, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_write_with_imm(c, NULL, 0, lmr, 0, 4, RPMA_F_COMPLETION_ALWAYS, 9, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_write_with_imm(c, rt, 0, NULL, 0, 4, RPMA_F_COMPLETION_ALWAYS, 9, NULL), RPMA_E_INVAL);
	strcpy(local + 3100, "imm!");
	EXPECT_OK(rpma_write_with_imm(c, rt, 3100, lmr, 3100, 5, RPMA_F_COMPLETION_ALWAYS, 0xcafe, (void *)0x43));
	REQUIRE_OK(wait_wc(cq, &wc));
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE && wc.wr_id == 0x43);
	REQUIRE_OK(wait_wc(scq, &wc));
	CHECK(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && wc.wr_id == 0x53 && (wc.wc_flags & IBV_WC_WITH_IMM));
	CHECK(ntohl(wc.imm_data) == 0xcafe && strcmp(target + 3100, "imm!") == 0);

	/* ---- several completions at once ---- */
	EXPECT_OK(rpma_write(c, rp, 0, lmr, 0, 8, RPMA_F_COMPLETION_ALWAYS, (void *)0x61));
	EXPECT_OK(rpma_write(c, rp, 8, lmr, 0, 8, RPMA_F_COMPLETION_ALWAYS, (void *)0x62));
	EXPECT_OK(rpma_flush(c, rp, 0, 16, RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS, (void *)0x63));
	struct ibv_wc wcs[4];
	int total = 0;
	while (total < 3) {
		REQUIRE_OK(rpma_cq_wait(cq));
		int rc = rpma_cq_get_wc(cq, 4, wcs + total, &got);
		if (rc == RPMA_E_NO_COMPLETION)
			continue;
		REQUIRE_OK(rc);
		total += got;
	}
	CHECK(total == 3 && wcs[0].wr_id == 0x61 && wcs[1].wr_id == 0x62 && wcs[2].wr_id == 0x63);

	/* ---- RPMA_E_PROVIDER: what ibv_post_send/ibv_post_recv would refuse ---- */
	/* a remote range outside the region */
	EXPECT_RC(rpma_write(c, rt, SZ - 4, lmr, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_PROVIDER);
	EXPECT_RC(rpma_write_with_imm(c, rt, SZ, lmr, 0, 8, RPMA_F_COMPLETION_ALWAYS, 1, NULL), RPMA_E_PROVIDER);
	EXPECT_RC(rpma_read(c, lmr, 0, rt, SZ - 1, 8, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_PROVIDER);
	EXPECT_RC(rpma_atomic_write(c, rt, SZ, v8, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_PROVIDER);
	EXPECT_RC(rpma_flush(c, rt, SZ - 8, 64, RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS, NULL),
		RPMA_E_PROVIDER);
	/* a region without the privilege the operation needs (registered for sends only) */
	struct rpma_mr_local *only_send;
	REQUIRE_OK(rpma_mr_reg(p.peer, inbox, SZ, RPMA_MR_USAGE_SEND, &only_send));
	EXPECT_RC(rpma_recv(p.server, only_send, 0, 64, NULL), RPMA_E_PROVIDER);
	EXPECT_RC(rpma_srq_recv(NULL, only_send, 0, 64, NULL), RPMA_E_INVAL);
	rpma_mr_dereg(&only_send);
	/* a message larger than the peer accepts */
	static char big[128 * 1024];
	struct rpma_mr_local *bmr;
	REQUIRE_OK(rpma_mr_reg(p.peer, big, sizeof(big), RPMA_MR_USAGE_SEND, &bmr));
	EXPECT_RC(rpma_send(c, bmr, 0, sizeof(big), RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_PROVIDER);
	EXPECT_RC(rpma_send_with_imm(c, bmr, 0, sizeof(big), RPMA_F_COMPLETION_ALWAYS, 3, NULL), RPMA_E_PROVIDER);
	rpma_mr_dereg(&bmr);
	/* a full receive queue (rq_size 10 by default) */
	int posted = 0, rc = 0;
	while (posted < 100 && (rc = rpma_recv(c, lmr, 0, 8, NULL)) == 0)
		posted++;
	CHECK(posted == 10 && rc == RPMA_E_PROVIDER);

	/* ---- zero-length operations without regions (allowed by the man pages) ---- */
	EXPECT_OK(rpma_write(c, NULL, 0, NULL, 0, 0, RPMA_F_COMPLETION_ALWAYS, (void *)0x64));
	REQUIRE_OK(wait_wc(cq, &wc));
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE && wc.wr_id == 0x64);
	EXPECT_OK(rpma_read(c, NULL, 0, NULL, 0, 0, RPMA_F_COMPLETION_ALWAYS, (void *)0x65));
	REQUIRE_OK(wait_wc(cq, &wc));
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ && wc.wr_id == 0x65);
	EXPECT_OK(rpma_recv(p.server, NULL, 0, 0, (void *)0x54));
	EXPECT_OK(rpma_send(c, NULL, 0, 0, RPMA_F_COMPLETION_ALWAYS, (void *)0x66));
	REQUIRE_OK(wait_wc(cq, &wc));
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND && wc.wr_id == 0x66);
	REQUIRE_OK(wait_wc(scq, &wc));
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.wr_id == 0x54 && wc.byte_len == 0);

	/* ---- a forged key: the target refuses, the completion says so ---- */
	size_t ds;
	unsigned char desc[256];
	struct rpma_mr_remote *forged;
	REQUIRE_OK(rpma_mr_get_descriptor_size(pmr, &ds));
	REQUIRE_OK(rpma_mr_get_descriptor(pmr, desc));
	desc[16] ^= 0x5a; /* the key: bytes 16-19 */
	REQUIRE_OK(rpma_mr_remote_from_descriptor(desc, ds, &forged));
	EXPECT_OK(rpma_write(c, forged, 0, lmr, 0, 8, RPMA_F_COMPLETION_ON_ERROR, (void *)0x71));
	REQUIRE_OK(wait_wc(cq, &wc));
	CHECK(wc.wr_id == 0x71 && wc.status != IBV_WC_SUCCESS);
	rpma_mr_remote_delete(&forged);

	/* ---- a queue's descriptor asked for after its completion came ----
	 * The library gives a queue its own descriptor only when the program
	 * first asks for it or waits (a queue that is only polled needs none).
	 * A completion made before that must still make the descriptor
	 * readable, and rpma_cq_wait must still return for it. A new pair: its
	 * queues were never waited on. */
	{
		struct pair f;
		pair_open_cfg(&f, peer, NULL, NULL, NULL, NULL, NULL, NULL);
		struct rpma_cq *fcq;
		REQUIRE_OK(rpma_conn_get_cq(f.client, &fcq));
		EXPECT_OK(rpma_write(f.client, rp, 0, lmr, 0, 8, RPMA_F_COMPLETION_ALWAYS, (void *)0xa1));
		usleep(200 * 1000); /* the completion is made meanwhile (by the library's own thread over tcp) */
		int ffd = -1;
		/* No descriptor left to make one: RPMA_E_PROVIDER, *fd as it was,
		 * and a later call (with descriptors again) works. */
		int probe = dup(0);
		CHECK(probe >= 0);
		close(probe);
		struct rlimit lim, low;
		REQUIRE_OK(getrlimit(RLIMIT_NOFILE, &lim));
		low = lim;
		low.rlim_cur = (rlim_t)probe; /* every descriptor below it is open */
		REQUIRE_OK(setrlimit(RLIMIT_NOFILE, &low));
		const int get_rc = rpma_cq_get_fd(fcq, &ffd);
		struct rpma_cq *gcq;
		REQUIRE_OK(rpma_conn_get_cq(f.server, &gcq));
		const int wait_rc = rpma_cq_wait(gcq);
		REQUIRE_OK(setrlimit(RLIMIT_NOFILE, &lim));
		EXPECT_RC(get_rc, RPMA_E_PROVIDER);
		CHECK(ffd == -1);
		EXPECT_RC(wait_rc, RPMA_E_PROVIDER);
		EXPECT_OK(rpma_cq_get_fd(fcq, &ffd));
		struct pollfd pf = {ffd, POLLIN, 0};
		CHECK(poll(&pf, 1, 10000) == 1 && (pf.revents & POLLIN));
		EXPECT_OK(rpma_cq_get_wc(fcq, 1, &wc, NULL));
		CHECK(wc.wr_id == 0xa1 && wc.status == IBV_WC_SUCCESS);
		/* and the same through rpma_cq_wait on the server's queue (its one
		 * wait so far failed before it began): a receive completed before
		 * the first wait that works */
		EXPECT_OK(rpma_recv(f.server, lmr, 512, 64, (void *)0xa2));
		strcpy(local + 3000, "early");
		EXPECT_OK(rpma_send(f.client, lmr, 3000, 6, RPMA_F_COMPLETION_ON_ERROR, NULL));
		usleep(200 * 1000);
		alarm(30);
		EXPECT_OK(rpma_cq_wait(gcq));
		alarm(0);
		EXPECT_OK(rpma_cq_get_wc(gcq, 1, &wc, NULL));
		CHECK(wc.wr_id == 0xa2 && wc.opcode == IBV_WC_RECV && strcmp(local + 512, "early") == 0);
		pair_close(&f);
	}

	rpma_mr_remote_delete(&rt);
	rpma_mr_remote_delete(&rp);
	pair_close(&p);

	/* ---- a receive CQ and a shared RQ ---- */
	struct ibv_context *ctx2;
	struct rpma_peer *peer2;
	REQUIRE_OK(rpma_utils_get_ibv_context("127.0.0.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx2));
	REQUIRE_OK(rpma_peer_new(ctx2, &peer2));
	struct rpma_srq *srq = NULL;
	struct rpma_cq *srcq = NULL;
	EXPECT_RC(rpma_srq_new(NULL, NULL, &srq), RPMA_E_INVAL);
	EXPECT_RC(rpma_srq_new(peer2, NULL, NULL), RPMA_E_INVAL);
	REQUIRE_OK(rpma_srq_new(peer2, NULL, &srq));
	EXPECT_RC(rpma_srq_get_rcq(NULL, &srcq), RPMA_E_INVAL);
	EXPECT_RC(rpma_srq_get_rcq(srq, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_srq_get_rcq(srq, &srcq));
	CHECK(srcq != NULL);
	EXPECT_RC(rpma_srq_delete(NULL), RPMA_E_INVAL);
	struct rpma_mr_local *imr2;
	REQUIRE_OK(rpma_mr_reg(peer2, inbox, SZ, RPMA_MR_USAGE_RECV, &imr2));
	EXPECT_RC(rpma_srq_recv(NULL, imr2, 0, 64, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_srq_recv(srq, NULL, 0, 64, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_srq_recv(srq, imr2, 256, 64, (void *)0x81));
	struct rpma_conn_cfg *scfg, *ccfg;
	REQUIRE_OK(rpma_conn_cfg_new(&scfg));
	REQUIRE_OK(rpma_conn_cfg_set_srq(scfg, srq));
	REQUIRE_OK(rpma_conn_cfg_new(&ccfg));
	REQUIRE_OK(rpma_conn_cfg_set_rcq_size(ccfg, 4));
	struct pair q;
	pair_open_cfg(&q, peer2, scfg, ccfg, NULL, NULL, NULL, NULL);
	struct rpma_cq *rcq = NULL, *ccq = NULL, *crcq = NULL;
	EXPECT_OK(rpma_conn_get_rcq(q.server, &rcq));
	CHECK(rcq == srcq);
	EXPECT_OK(rpma_conn_get_cq(q.client, &ccq));
	EXPECT_OK(rpma_conn_get_rcq(q.client, &crcq));
	CHECK(crcq != NULL && crcq != ccq);
	struct rpma_mr_local *lmr2;
	REQUIRE_OK(rpma_mr_reg(q.peer, local, SZ, RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &lmr2));
	strcpy(local, "to the srq");
	EXPECT_OK(rpma_send(q.client, lmr2, 0, 11, RPMA_F_COMPLETION_ON_ERROR, NULL));
	REQUIRE_OK(wait_wc(srcq, &wc));
	uint32_t sqp2;
	REQUIRE_OK(rpma_conn_get_qp_num(q.server, &sqp2));
	CHECK(wc.opcode == IBV_WC_RECV && wc.wr_id == 0x81 && wc.qp_num == sqp2 && strcmp(inbox + 256, "to the srq") == 0);
	/* the client's receive CQ: receives land there, not on the main CQ */
	EXPECT_OK(rpma_recv(q.client, lmr2, 2048, 64, (void *)0x91));
	EXPECT_OK(rpma_srq_recv(srq, imr2, 0, 0, (void *)0x82)); /* a zero-length receive is allowed */
	struct rpma_mr_local *smr2;
	REQUIRE_OK(rpma_mr_reg(peer2, target, SZ, RPMA_MR_USAGE_SEND, &smr2));
	strcpy(target, "back");
	EXPECT_OK(rpma_send(q.server, smr2, 0, 5, RPMA_F_COMPLETION_ON_ERROR, NULL));
	REQUIRE_OK(wait_wc(crcq, &wc));
	CHECK(wc.opcode == IBV_WC_RECV && wc.wr_id == 0x91 && strcmp(local + 2048, "back") == 0);
	EXPECT_RC(rpma_cq_get_wc(ccq, 1, &wc, NULL), RPMA_E_NO_COMPLETION);
	rpma_mr_dereg(&lmr2);
	rpma_mr_dereg(&smr2);
	pair_close(&q);
	rpma_conn_cfg_delete(&scfg);
	rpma_conn_cfg_delete(&ccfg);
	rpma_mr_dereg(&imr2);
	EXPECT_OK(rpma_srq_delete(&srq));
	CHECK(srq == NULL);
	rpma_peer_delete(&peer2);
	rpma_mr_dereg(&tmr);
	rpma_mr_dereg(&pmr);
	rpma_mr_dereg(&lmr);
	rpma_mr_dereg(&inbox_mr);
	rpma_peer_delete(&peer);
	return finish("test_data");
}
