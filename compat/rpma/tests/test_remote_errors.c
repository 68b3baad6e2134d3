/* test_remote_errors.c - the target's reason for a failed PERSISTENT flush
 * reaches the initiator's completion (rpma_cq_get_wc) as its own status:
 *
 *  (a) the server's region is a shared file mapping registered with
 *      RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT, and the write-back at the target
 *      (msync) fails with EIO: the flush completes with IBV_WC_REM_OP_ERR,
 *      vendor_err = remora::Errc::io_error;
 *  (b) the server's region is registered WITHOUT FLUSH_TYPE_PERSISTENT and
 *      the client is handed a descriptor whose usage byte was altered to
 *      claim it, so the initiator's own check lets the flush through and the
 *      target refuses it: IBV_WC_REM_INV_REQ_ERR, vendor_err =
 *      remora::Errc::not_supported.
 *
 * Both sides live in this process (as in test_data.c). msync is replaced by
 * the definition below: the program is linked with -rdynamic (ENABLE_EXPORTS),
 * so librpma.so.0's undefined reference to msync binds to it at load time.
 * Armed, it fails only MS_SYNC calls inside the target file's mapping, i.e.
 * only the target's write-back; everything else goes to the real system call.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "common.h"

/* remora::Errc values (include/remora/error.hpp) carried in wc.vendor_err. */
#define REMORA_ERRC_NOT_SUPPORTED 7
#define REMORA_ERRC_IO_ERROR 17

static _Atomic(uintptr_t) g_fail_lo, g_fail_hi;
static atomic_int g_fail_errno;
static atomic_int g_failed_calls, g_sync_calls;

int msync(void *addr, size_t len, int flags)
{
	const uintptr_t a = (uintptr_t)addr;
	const int e = atomic_load(&g_fail_errno);
	if ((flags & MS_SYNC) && a >= atomic_load(&g_fail_lo) && a < atomic_load(&g_fail_hi)) {
		atomic_fetch_add(&g_sync_calls, 1);
		if (e != 0) {
			atomic_fetch_add(&g_failed_calls, 1);
			errno = e;
			return -1;
		}
	}
	return (int)syscall(SYS_msync, addr, len, flags);
}

#define FILE_SZ 8192
#define SZ 4096
static char plain[SZ] __attribute__((aligned(4096)));
static char local[SZ];

static void set_direct_write_to_pmem(struct rpma_conn *c)
{
	struct rpma_peer_cfg *pcfg;
	REQUIRE_OK(rpma_peer_cfg_new(&pcfg));
	REQUIRE_OK(rpma_peer_cfg_set_direct_write_to_pmem(pcfg, true));
	REQUIRE_OK(rpma_conn_apply_remote_peer_cfg(c, pcfg));
	rpma_peer_cfg_delete(&pcfg);
}

/* The descriptor of `mr` as the client receives it; `add_usage` ORed into
 * the usage byte (offset 20 of librpma's 21-byte encoding) on the way. */
static struct rpma_mr_remote *remote_with_usage(struct rpma_mr_local *mr, int add_usage)
{
	size_t ds;
	unsigned char desc[64];
	struct rpma_mr_remote *r = NULL;
	REQUIRE_OK(rpma_mr_get_descriptor_size(mr, &ds));
	REQUIRE(ds == 21);
	REQUIRE_OK(rpma_mr_get_descriptor(mr, desc));
	desc[20] = (unsigned char)(desc[20] | add_usage);
	REQUIRE_OK(rpma_mr_remote_from_descriptor(desc, ds, &r));
	return r;
}

/* After a failed flush the connection is broken (as an RC QP in error):
 * the client sees RPMA_CONN_LOST; the server's side ends too. */
static void close_broken_pair(struct pair *p)
{
	enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
	EXPECT_OK(rpma_conn_next_event(p->client, &ev));
	CHECK(ev == RPMA_CONN_LOST);
	ev = RPMA_CONN_UNDEFINED;
	EXPECT_OK(rpma_conn_next_event(p->server, &ev));
	CHECK(ev == RPMA_CONN_LOST || ev == RPMA_CONN_CLOSED);
	(void)rpma_conn_disconnect(p->client);
	EXPECT_OK(rpma_conn_delete(&p->client));
	EXPECT_OK(rpma_conn_delete(&p->server));
	EXPECT_OK(rpma_ep_shutdown(&p->ep));
}

static void print_wc(const char *what, const struct ibv_wc *wc)
{
	printf("%s: wr_id %#llx status %d opcode %d vendor_err %u\n", what, (unsigned long long)wc->wr_id,
		(int)wc->status, (int)wc->opcode, wc->vendor_err);
}

/* (a) the write-back fails at the target. */
static void persistent_flush_write_back_fails(struct rpma_peer *peer, struct rpma_mr_local *lmr)
{
	char path[] = "/tmp/rpma-remote-errors-XXXXXX";
	int fd = mkstemp(path);
	REQUIRE(fd >= 0);
	REQUIRE(ftruncate(fd, FILE_SZ) == 0);
	void *fmem = mmap(NULL, FILE_SZ, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	REQUIRE(fmem != MAP_FAILED);
	close(fd);
	unlink(path);
	atomic_store(&g_fail_lo, (uintptr_t)fmem);
	atomic_store(&g_fail_hi, (uintptr_t)fmem + FILE_SZ);

	struct rpma_mr_local *fmr;
	REQUIRE_OK(rpma_mr_reg(peer, fmem, FILE_SZ, RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_READ_SRC |
		RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT, &fmr));
	struct rpma_mr_remote *rf = remote_with_usage(fmr, 0);
	int ft = 0;
	EXPECT_OK(rpma_mr_remote_get_flush_type(rf, &ft));
	CHECK(ft & RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT);

	struct pair p;
	pair_open_cfg(&p, peer, NULL, NULL, NULL, NULL, NULL, NULL);
	set_direct_write_to_pmem(p.client);
	struct rpma_cq *cq;
	REQUIRE_OK(rpma_conn_get_cq(p.client, &cq));
	struct ibv_wc wc;

	/* Control: while msync works the PERSISTENT flush succeeds, and the
	 * target's write-back went through the interposer. */
	strcpy(local, "persisted");
	EXPECT_OK(rpma_write(p.client, rf, 0, lmr, 0, 10, RPMA_F_COMPLETION_ALWAYS, (void *)0xa1));
	REQUIRE_OK(wait_wc(cq, &wc));
	CHECK(wc.wr_id == 0xa1 && wc.status == IBV_WC_SUCCESS);
	EXPECT_OK(rpma_flush(p.client, rf, 0, 10, RPMA_FLUSH_TYPE_PERSISTENT, RPMA_F_COMPLETION_ALWAYS, (void *)0xa2));
	REQUIRE_OK(wait_wc(cq, &wc));
	print_wc("persistent flush, msync working", &wc);
	CHECK(wc.wr_id == 0xa2 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ);
	CHECK(atomic_load(&g_sync_calls) >= 1);
	CHECK(atomic_load(&g_failed_calls) == 0);
	CHECK(strcmp((char *)fmem, "persisted") == 0);

	/* The device reports an I/O error on write-back. */
	atomic_store(&g_fail_errno, EIO);
	strcpy(local, "not durable");
	EXPECT_OK(rpma_write(p.client, rf, 4096, lmr, 0, 12, RPMA_F_COMPLETION_ALWAYS, (void *)0xa3));
	REQUIRE_OK(wait_wc(cq, &wc));
	CHECK(wc.wr_id == 0xa3 && wc.status == IBV_WC_SUCCESS); /* the write itself landed */
	EXPECT_OK(rpma_flush(p.client, rf, 4096, 12, RPMA_FLUSH_TYPE_PERSISTENT, RPMA_F_COMPLETION_ALWAYS,
		(void *)0xa4));
	REQUIRE_OK(wait_wc(cq, &wc));
	atomic_store(&g_fail_errno, 0);
	print_wc("persistent flush, msync failing with EIO", &wc);
	CHECK(wc.wr_id == 0xa4);
	CHECK(wc.opcode == IBV_WC_RDMA_READ);
	CHECK(wc.status == IBV_WC_REM_OP_ERR);
	CHECK(wc.vendor_err == REMORA_ERRC_IO_ERROR);
	CHECK(atomic_load(&g_failed_calls) >= 1); /* the failure came from the target's msync */

	close_broken_pair(&p);
	atomic_store(&g_fail_lo, 0);
	atomic_store(&g_fail_hi, 0);
	rpma_mr_remote_delete(&rf);
	EXPECT_OK(rpma_mr_dereg(&fmr));
	munmap(fmem, FILE_SZ);
}

/* (b) the target cannot carry out a PERSISTENT flush: its region is not
 * persistent, only the (altered) descriptor claims it is. */
static void persistent_flush_to_volatile_region(struct rpma_peer *peer, struct rpma_mr_local *lmr)
{
	struct rpma_mr_local *pmr;
	REQUIRE_OK(rpma_mr_reg(peer, plain, SZ, RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY, &pmr));
	struct rpma_mr_remote *honest = remote_with_usage(pmr, 0);
	struct rpma_mr_remote *forged = remote_with_usage(pmr, RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT);
	int ft = 0;
	EXPECT_OK(rpma_mr_remote_get_flush_type(forged, &ft));
	CHECK(ft & RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT); /* the claim is what the client sees */

	struct pair p;
	pair_open_cfg(&p, peer, NULL, NULL, NULL, NULL, NULL, NULL);
	set_direct_write_to_pmem(p.client);
	struct rpma_cq *cq;
	REQUIRE_OK(rpma_conn_get_cq(p.client, &cq));
	struct ibv_wc wc;

	/* The honest descriptor: the initiator refuses it itself. */
	EXPECT_RC(rpma_flush(p.client, honest, 0, 64, RPMA_FLUSH_TYPE_PERSISTENT, RPMA_F_COMPLETION_ALWAYS, NULL),
		RPMA_E_NOSUPP);
	/* The region is usable otherwise: write + VISIBILITY flush succeed. */
	strcpy(local, "volatile");
	EXPECT_OK(rpma_write(p.client, forged, 0, lmr, 0, 9, RPMA_F_COMPLETION_ALWAYS, (void *)0xb1));
	REQUIRE_OK(wait_wc(cq, &wc));
	CHECK(wc.wr_id == 0xb1 && wc.status == IBV_WC_SUCCESS);
	EXPECT_OK(rpma_flush(p.client, forged, 0, 9, RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS,
		(void *)0xb2));
	REQUIRE_OK(wait_wc(cq, &wc));
	CHECK(wc.wr_id == 0xb2 && wc.status == IBV_WC_SUCCESS);
	CHECK(strcmp(plain, "volatile") == 0);

	/* The forged descriptor gets the PERSISTENT flush to the target. */
	const int before = atomic_load(&g_sync_calls);
	EXPECT_OK(rpma_flush(p.client, forged, 0, 9, RPMA_FLUSH_TYPE_PERSISTENT, RPMA_F_COMPLETION_ALWAYS,
		(void *)0xb3));
	REQUIRE_OK(wait_wc(cq, &wc));
	print_wc("persistent flush, region not persistent at the target", &wc);
	CHECK(wc.wr_id == 0xb3);
	CHECK(wc.opcode == IBV_WC_RDMA_READ);
	CHECK(wc.status == IBV_WC_REM_INV_REQ_ERR);
	CHECK(wc.vendor_err == REMORA_ERRC_NOT_SUPPORTED);
	CHECK(atomic_load(&g_sync_calls) == before); /* refused, nothing written back */

	close_broken_pair(&p);
	rpma_mr_remote_delete(&honest);
	rpma_mr_remote_delete(&forged);
	EXPECT_OK(rpma_mr_dereg(&pmr));
}

int main(void)
{
	check_loaded_library();
	/* The interposer must be the msync the library binds to: the first
	 * definition in the global scope, i.e. exported by this program. */
	int (*ours)(void *, size_t, int) = msync;
	void *ours_p;
	memcpy(&ours_p, &ours, sizeof(ours_p));
	REQUIRE(dlsym(RTLD_DEFAULT, "msync") == ours_p);

	struct ibv_context *ctx;
	struct rpma_peer *peer;
	REQUIRE_OK(rpma_utils_get_ibv_context("127.0.0.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx));
	REQUIRE_OK(rpma_peer_new(ctx, &peer));
	struct rpma_mr_local *lmr;
	REQUIRE_OK(rpma_mr_reg(peer, local, SZ, RPMA_MR_USAGE_WRITE_SRC, &lmr));

	persistent_flush_write_back_fails(peer, lmr);
	persistent_flush_to_volatile_region(peer, lmr);

	EXPECT_OK(rpma_mr_dereg(&lmr));
	EXPECT_OK(rpma_peer_delete(&peer));
	return finish("test_remote_errors");
}
