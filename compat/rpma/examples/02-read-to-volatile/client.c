/* 02-read-to-volatile/client.c - read the server's region into local memory. */
#include "example.h"

#define SIZE 4096

int main(int argc, char **argv)
{
	ex_usage(argc, argv, 3, NULL);
	struct rpma_peer *peer = ex_peer(argv[1], RPMA_UTIL_IBV_CONTEXT_REMOTE);
	struct ex_mem mem = ex_mem_get(NULL, SIZE);
	struct rpma_mr_local *dst;
	EX_CHECK(rpma_mr_reg(peer, mem.ptr, SIZE, RPMA_MR_USAGE_READ_DST, &dst));

	struct rpma_conn *conn = ex_connect(peer, argv[1], argv[2], NULL, NULL, 0);
	struct rpma_conn_private_data pd;
	EX_CHECK(rpma_conn_get_private_data(conn, &pd));
	struct rpma_mr_remote *src = ex_remote(pd.ptr, pd.len);
	size_t rsize;
	EX_CHECK(rpma_mr_remote_get_size(src, &rsize));

	struct rpma_cq *cq;
	struct ibv_wc wc;
	EX_CHECK(rpma_conn_get_cq(conn, &cq));
	EX_CHECK(rpma_read(conn, dst, 0, src, 0, rsize < SIZE ? rsize : SIZE, RPMA_F_COMPLETION_ALWAYS, NULL));
	ex_wait_wc(cq, &wc);
	EX_ASSERT(wc.opcode == IBV_WC_RDMA_READ);
	printf("read: %s\n", mem.ptr);
	EX_ASSERT(strcmp(mem.ptr, "The server's greeting, read by RDMA.") == 0);

	ex_disconnect(&conn);
	EX_CHECK(rpma_mr_remote_delete(&src));
	EX_CHECK(rpma_mr_dereg(&dst));
	ex_mem_put(&mem);
	EX_CHECK(rpma_peer_delete(&peer));
	return 0;
}
