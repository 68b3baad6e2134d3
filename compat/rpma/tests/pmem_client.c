/* pmem_client.c - initiator of the persistent-flush test.
 * usage: pmem_client <address> <port> <file>  - write a pattern, flush it
 *                                               to persistence, exit
 *        pmem_client --verify <file>           - check the file holds it */
#include <fcntl.h>
#include "common.h"

#define OFF 4000
#define LEN 9000

static unsigned char pattern(size_t i)
{
	return (unsigned char)((i * 7 + 3) & 0xff);
}

static int verify(const char *path)
{
	static unsigned char b[LEN];
	int fd = open(path, O_RDONLY);
	if (fd < 0 || pread(fd, b, LEN, OFF) != LEN) {
		perror(path);
		return 1;
	}
	close(fd);
	for (size_t i = 0; i < LEN; i++)
		if (b[i] != pattern(i)) {
			fprintf(stderr, "byte %zu of the flushed range: %u, want %u\n", i, b[i], pattern(i));
			return 1;
		}
	printf("file holds the %d flushed bytes\n", LEN);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--verify") == 0)
		return verify(argv[2]);
	if (argc < 3) {
		fprintf(stderr, "usage: %s <address> <port> [file] | --verify <file>\n", argv[0]);
		return 2;
	}
	check_loaded_library();
	static char src[LEN];
	for (size_t i = 0; i < LEN; i++)
		src[i] = (char)pattern(i);
	struct ibv_context *ctx;
	struct rpma_peer *peer;
	struct rpma_mr_local *mr;
	REQUIRE_OK(rpma_utils_get_ibv_context(argv[1], RPMA_UTIL_IBV_CONTEXT_REMOTE, &ctx));
	REQUIRE_OK(rpma_peer_new(ctx, &peer));
	REQUIRE_OK(rpma_mr_reg(peer, src, LEN, RPMA_MR_USAGE_WRITE_SRC, &mr));
	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	REQUIRE_OK(rpma_conn_req_new(peer, argv[1], argv[2], NULL, &req));
	REQUIRE_OK(rpma_conn_req_connect(&req, NULL, &conn));
	enum rpma_conn_event ev;
	REQUIRE_OK(rpma_conn_next_event(conn, &ev));
	if (ev != RPMA_CONN_ESTABLISHED)
		return 1;
	struct rpma_conn_private_data pd;
	REQUIRE_OK(rpma_conn_get_private_data(conn, &pd));
	/* the server's layout: two size bytes, then the descriptors in 24 bytes */
	REQUIRE(pd.len == 26);
	const unsigned char *pb = pd.ptr;
	size_t mds = pb[0], pds = pb[1];
	REQUIRE(mds == 21 && pds == 1);
	struct rpma_mr_remote *rmr;
	struct rpma_peer_cfg *pcfg;
	REQUIRE_OK(rpma_mr_remote_from_descriptor(pb + 2, mds, &rmr));
	REQUIRE_OK(rpma_peer_cfg_from_descriptor(pb + 2 + mds, pds, &pcfg));
	REQUIRE_OK(rpma_conn_apply_remote_peer_cfg(conn, pcfg));
	int ft = 0;
	REQUIRE_OK(rpma_mr_remote_get_flush_type(rmr, &ft));
	CHECK(ft & RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT);

	struct rpma_cq *cq;
	struct ibv_wc wc;
	REQUIRE_OK(rpma_conn_get_cq(conn, &cq));
	REQUIRE_OK(rpma_write(conn, rmr, OFF, mr, 0, LEN, RPMA_F_COMPLETION_ON_ERROR, NULL));
	/* PMEM_CLIENT_VISIBILITY=1: a control run that only flushes to visibility */
	enum rpma_flush_type type = getenv("PMEM_CLIENT_VISIBILITY") ? RPMA_FLUSH_TYPE_VISIBILITY :
		RPMA_FLUSH_TYPE_PERSISTENT;
	REQUIRE_OK(rpma_flush(conn, rmr, OFF, LEN, type, RPMA_F_COMPLETION_ALWAYS, (void *)7));
	REQUIRE_OK(wait_wc(cq, &wc));
	if (wc.status != IBV_WC_SUCCESS || wc.wr_id != 7) {
		fprintf(stderr, "flush completion: status %d wr_id %lu\n", wc.status, (unsigned long)wc.wr_id);
		return 1;
	}
	printf("FLUSHED\n");
	fflush(stdout);
	/* exit without a goodbye: the server dies next */
	return finish("pmem_client");
}
