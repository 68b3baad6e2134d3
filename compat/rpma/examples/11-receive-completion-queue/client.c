/* 11-receive-completion-queue/client.c - send three messages, wait for the
 * server's acknowledgement. */
#include "example.h"

int main(int argc, char **argv)
{
	ex_usage(argc, argv, 3, NULL);
	struct rpma_peer *peer = ex_peer(argv[1], RPMA_UTIL_IBV_CONTEXT_REMOTE);
	struct ex_mem mem = ex_mem_get(NULL, 4096);
	struct rpma_mr_local *mr;
	EX_CHECK(rpma_mr_reg(peer, mem.ptr, 4096, RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &mr));
	struct rpma_conn *conn = ex_connect(peer, argv[1], argv[2], NULL, NULL, 0);
	struct rpma_cq *cq;
	struct ibv_wc wc;
	EX_CHECK(rpma_conn_get_cq(conn, &cq));
	EX_CHECK(rpma_recv(conn, mr, 2048, 64, (void *)9));
	for (int i = 0; i < 3; i++) {
		snprintf(mem.ptr + i * 64, 64, "message #%d", i + 1);
		EX_CHECK(rpma_send(conn, mr, (size_t)i * 64, 64, RPMA_F_COMPLETION_ON_ERROR, NULL));
	}
	ex_wait_wc(cq, &wc); /* no receive CQ here: the answer lands on the CQ */
	EX_ASSERT(wc.opcode == IBV_WC_RECV && wc.wr_id == 9);
	printf("server: %s\n", mem.ptr + 2048);
	EX_ASSERT(strcmp(mem.ptr + 2048, "all received") == 0);
	ex_disconnect(&conn);
	EX_CHECK(rpma_mr_dereg(&mr));
	ex_mem_put(&mem);
	EX_CHECK(rpma_peer_delete(&peer));
	return 0;
}
