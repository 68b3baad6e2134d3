/* 10-write-with-imm/client.c - write, and tell the server where, in the
 * immediate data. */
#include "example.h"

int main(int argc, char **argv)
{
	ex_usage(argc, argv, 3, NULL);
	struct rpma_peer *peer = ex_peer(argv[1], RPMA_UTIL_IBV_CONTEXT_REMOTE);
	struct ex_mem mem = ex_mem_get(NULL, 4096);
	struct rpma_mr_local *src;
	EX_CHECK(rpma_mr_reg(peer, mem.ptr, 4096, RPMA_MR_USAGE_WRITE_SRC, &src));
	struct rpma_conn *conn = ex_connect(peer, argv[1], argv[2], NULL, NULL, 0);
	struct rpma_conn_private_data pd;
	EX_CHECK(rpma_conn_get_private_data(conn, &pd));
	struct rpma_mr_remote *dst = ex_remote(pd.ptr, pd.len);

	struct rpma_cq *cq;
	struct ibv_wc wc;
	EX_CHECK(rpma_conn_get_cq(conn, &cq));
	strcpy(mem.ptr, "written with imm");
	const uint32_t offset = 300;
	EX_CHECK(rpma_write_with_imm(conn, dst, offset, src, 0, 17, RPMA_F_COMPLETION_ALWAYS, offset, NULL));
	ex_wait_wc(cq, &wc);
	EX_ASSERT(wc.opcode == IBV_WC_RDMA_WRITE);
	printf("written at offset %u with immediate data\n", offset);
	ex_disconnect(&conn);
	EX_CHECK(rpma_mr_remote_delete(&dst));
	EX_CHECK(rpma_mr_dereg(&src));
	ex_mem_put(&mem);
	EX_CHECK(rpma_peer_delete(&peer));
	return 0;
}
