/* 08-messages-ping-pong-with-srq/client.c - two connections take turns
 * sending pings; the server answers each on its own connection. */
#include "example.h"

#define CONNS 2

int main(int argc, char **argv)
{
	ex_usage(argc, argv, 3, NULL);
	struct rpma_peer *peer = ex_peer(argv[1], RPMA_UTIL_IBV_CONTEXT_REMOTE);
	struct ex_mem mem = ex_mem_get(NULL, 4096);
	struct rpma_mr_local *mr;
	EX_CHECK(rpma_mr_reg(peer, mem.ptr, 4096, RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &mr));
	struct rpma_conn *conns[CONNS];
	for (int c = 0; c < CONNS; c++)
		conns[c] = ex_connect(peer, argv[1], argv[2], NULL, NULL, 0);

	for (int round = 0; round < 5; round++) {
		for (int c = 0; c < CONNS; c++) {
			char *out = mem.ptr + c * 128, *in = out + 64;
			struct rpma_cq *cq;
			EX_CHECK(rpma_conn_get_cq(conns[c], &cq));
			uint64_t v = (uint64_t)(100 * c + round + 1), got;
			memcpy(out, &v, 8);
			EX_CHECK(rpma_recv(conns[c], mr, (size_t)(in - mem.ptr), 8, NULL));
			EX_CHECK(rpma_send(conns[c], mr, (size_t)(out - mem.ptr), 8, RPMA_F_COMPLETION_ON_ERROR, NULL));
			struct ibv_wc wc;
			ex_wait_wc(cq, &wc);
			EX_ASSERT(wc.opcode == IBV_WC_RECV);
			memcpy(&got, in, 8);
			printf("connection %d: ping %lu -> pong %lu\n", c, (unsigned long)v, (unsigned long)got);
			EX_ASSERT(got == v + 1);
		}
	}
	for (int c = 0; c < CONNS; c++) {
		uint64_t zero = 0;
		struct rpma_cq *cq;
		struct ibv_wc wc;
		memcpy(mem.ptr + 2048 + c * 64, &zero, 8);
		EX_CHECK(rpma_conn_get_cq(conns[c], &cq));
		EX_CHECK(rpma_send(conns[c], mr, 2048 + (size_t)c * 64, 8, RPMA_F_COMPLETION_ALWAYS, NULL));
		ex_wait_wc(cq, &wc);
	}
	for (int c = 0; c < CONNS; c++)
		ex_disconnect(&conns[c]);
	EX_CHECK(rpma_mr_dereg(&mr));
	ex_mem_put(&mem);
	EX_CHECK(rpma_peer_delete(&peer));
	return 0;
}
