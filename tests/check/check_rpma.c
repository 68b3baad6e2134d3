/* tests/check/check_rpma.c - librpma 1.2.0 programs for remora-check, each
 * with one deliberate bug or its correct twin (docs/check.md). The server's
 * region is a file the program maps itself (MAP_SHARED) and registers for
 * persistent flushes, as librpma's example 03 does; client and server
 * connections live in one process (compat/rpma/tests/common.h).
 *
 *   check_rpma <scenario> <dir>
 *
 * Scenarios: crash-ok (write, then a PERSISTENT flush of the written range),
 * crash-noflush (the flush forgotten), crash-wrong-range (a flush of another
 * range), reuse-bug / reuse-ok (the source buffer changed before the write's
 * completion, or not). */
#include <fcntl.h>
#include <sys/mman.h>

#include "common.h"

#define SZ 4096
#define BIG (4u << 20)
static const char record[64] = "librpma-style record: written, then flushed to persistence. ok!!";
static char source[BIG], target[BIG];

static void expect_wc(struct rpma_cq *cq, uint64_t id)
{
	struct ibv_wc wc;
	REQUIRE_OK(wait_wc(cq, &wc));
	REQUIRE(wc.status == IBV_WC_SUCCESS);
	REQUIRE(wc.wr_id == id);
}

static int crash(const char *how, const char *dir)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/pmem.bin", dir);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	REQUIRE(fd >= 0 && ftruncate(fd, SZ) == 0);
	char *pmem = mmap(NULL, SZ, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	REQUIRE(pmem != MAP_FAILED);

	struct ibv_context *ctx;
	struct rpma_peer *peer;
	REQUIRE_OK(rpma_utils_get_ibv_context("127.0.0.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx));
	REQUIRE_OK(rpma_peer_new(ctx, &peer));
	struct rpma_mr_local *dst_mr, *src_mr;
	REQUIRE_OK(rpma_mr_reg(peer, pmem, SZ, RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT, &dst_mr));
	memcpy(source, record, sizeof(record));
	REQUIRE_OK(rpma_mr_reg(peer, source, sizeof(record), RPMA_MR_USAGE_WRITE_SRC, &src_mr));
	struct rpma_mr_remote *dst = remote_of(dst_mr);

	struct pair p;
	pair_open_cfg(&p, peer, NULL, NULL, NULL, NULL, NULL, NULL);
	struct rpma_peer_cfg *pcfg;
	REQUIRE_OK(rpma_peer_cfg_new(&pcfg));
	REQUIRE_OK(rpma_peer_cfg_set_direct_write_to_pmem(pcfg, true));
	REQUIRE_OK(rpma_conn_apply_remote_peer_cfg(p.client, pcfg));
	rpma_peer_cfg_delete(&pcfg);
	struct rpma_cq *cq;
	REQUIRE_OK(rpma_conn_get_cq(p.client, &cq));

	REQUIRE_OK(rpma_write(p.client, dst, 128, src_mr, 0, sizeof(record), RPMA_F_COMPLETION_ALWAYS, (void *)0x81));
	if (strcmp(how, "ok") == 0)
		REQUIRE_OK(rpma_flush(p.client, dst, 128, sizeof(record), RPMA_FLUSH_TYPE_PERSISTENT,
			RPMA_F_COMPLETION_ALWAYS, (void *)0x82));
	else if (strcmp(how, "wrong-range") == 0)
		REQUIRE_OK(rpma_flush(p.client, dst, 0, sizeof(record), RPMA_FLUSH_TYPE_PERSISTENT,
			RPMA_F_COMPLETION_ALWAYS, (void *)0x82));
	expect_wc(cq, 0x81);
	if (strcmp(how, "noflush") != 0)
		expect_wc(cq, 0x82);
	REQUIRE(memcmp(pmem + 128, record, sizeof(record)) == 0);

	pair_close(&p);
	REQUIRE_OK(rpma_mr_remote_delete(&dst));
	REQUIRE_OK(rpma_mr_dereg(&src_mr));
	REQUIRE_OK(rpma_mr_dereg(&dst_mr));
	REQUIRE_OK(rpma_peer_delete(&peer));
	munmap(pmem, SZ);
	close(fd);
	return 0;
}

static int reuse(int bug)
{
	struct ibv_context *ctx;
	struct rpma_peer *peer;
	REQUIRE_OK(rpma_utils_get_ibv_context("127.0.0.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx));
	REQUIRE_OK(rpma_peer_new(ctx, &peer));
	struct rpma_mr_local *dst_mr, *src_mr;
	REQUIRE_OK(rpma_mr_reg(peer, target, BIG, RPMA_MR_USAGE_WRITE_DST, &dst_mr));
	memset(source, 's', BIG);
	REQUIRE_OK(rpma_mr_reg(peer, source, BIG, RPMA_MR_USAGE_WRITE_SRC, &src_mr));
	struct rpma_mr_remote *dst = remote_of(dst_mr);
	struct pair p;
	pair_open_cfg(&p, peer, NULL, NULL, NULL, NULL, NULL, NULL);
	struct rpma_cq *cq;
	REQUIRE_OK(rpma_conn_get_cq(p.client, &cq));
	REQUIRE_OK(rpma_write(p.client, dst, 0, src_mr, 0, BIG, RPMA_F_COMPLETION_ALWAYS, (void *)0x91));
	if (bug)
		memset(source + 2048, 'X', 32);
	expect_wc(cq, 0x91);
	if (!bug)
		REQUIRE(memcmp(target, source, BIG) == 0);
	pair_close(&p);
	REQUIRE_OK(rpma_mr_remote_delete(&dst));
	REQUIRE_OK(rpma_mr_dereg(&src_mr));
	REQUIRE_OK(rpma_mr_dereg(&dst_mr));
	REQUIRE_OK(rpma_peer_delete(&peer));
	return 0;
}

static int run(int argc, char **argv)
{
	const char *s = argc > 1 ? argv[1] : "";
	const char *dir = argc > 2 ? argv[2] : ".";
	if (strcmp(s, "crash-ok") == 0)
		return crash("ok", dir);
	if (strcmp(s, "crash-noflush") == 0)
		return crash("noflush", dir);
	if (strcmp(s, "crash-wrong-range") == 0)
		return crash("wrong-range", dir);
	if (strcmp(s, "reuse-bug") == 0)
		return reuse(1);
	if (strcmp(s, "reuse-ok") == 0)
		return reuse(0);
	fprintf(stderr, "check_rpma: unknown scenario %s\n", s);
	return 2;
}

int main(int argc, char **argv)
{
	alarm(60);
	int rc = run(argc, argv);
	/* remora-check may force the exit status: this says the program got to its end */
	if (rc == 0)
		fprintf(stderr, "check-program: done\n");
	return rc;
}
