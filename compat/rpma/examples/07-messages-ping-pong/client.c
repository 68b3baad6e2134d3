/* 07-messages-ping-pong/client.c - ten pings, each answered with +1. */
#include "example.h"

int main(int argc, char **argv)
{
	ex_usage(argc, argv, 3, NULL);
	struct rpma_peer *peer = ex_peer(argv[1], RPMA_UTIL_IBV_CONTEXT_REMOTE);
	struct ex_mem mem = ex_mem_get(NULL, 4096);
	uint64_t *out = (uint64_t *)mem.ptr, *in = (uint64_t *)(mem.ptr + 64);
	struct rpma_mr_local *mr;
	EX_CHECK(rpma_mr_reg(peer, mem.ptr, 4096, RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &mr));
	struct rpma_conn *conn = ex_connect(peer, argv[1], argv[2], NULL, NULL, 0);
	struct rpma_cq *cq;
	EX_CHECK(rpma_conn_get_cq(conn, &cq));

	uint64_t v = 1;
	for (int i = 0; i < 10; i++) {
		EX_CHECK(rpma_recv(conn, mr, 64, 8, NULL));
		*out = v;
		EX_CHECK(rpma_send(conn, mr, 0, 8, RPMA_F_COMPLETION_ON_ERROR, NULL));
		struct ibv_wc wc;
		ex_wait_wc(cq, &wc);
		EX_ASSERT(wc.opcode == IBV_WC_RECV && wc.byte_len == 8);
		printf("ping %lu -> pong %lu\n", (unsigned long)v, (unsigned long)*in);
		EX_ASSERT(*in == v + 1);
		v = *in + 1;
	}
	*out = 0; /* stop */
	EX_CHECK(rpma_send(conn, mr, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL));
	struct ibv_wc wc;
	ex_wait_wc(cq, &wc);
	ex_disconnect(&conn);
	EX_CHECK(rpma_mr_dereg(&mr));
	ex_mem_put(&mem);
	EX_CHECK(rpma_peer_delete(&peer));
	return 0;
}
