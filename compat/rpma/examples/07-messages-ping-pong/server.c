/* 07-messages-ping-pong/server.c - answer each counter with counter + 1
 * until the client says stop (counter 0). */
#include "example.h"

int main(int argc, char **argv)
{
	ex_usage(argc, argv, 3, NULL);
	struct rpma_peer *peer = ex_peer(argv[1], RPMA_UTIL_IBV_CONTEXT_LOCAL);
	struct ex_mem mem = ex_mem_get(NULL, 4096);
	uint64_t *in = (uint64_t *)mem.ptr, *out = (uint64_t *)(mem.ptr + 64);
	struct rpma_mr_local *mr;
	EX_CHECK(rpma_mr_reg(peer, mem.ptr, 4096, RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &mr));
	struct rpma_ep *ep = ex_listen(peer, argv[1], argv[2]);

	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	EX_CHECK(rpma_ep_next_conn_req(ep, NULL, &req));
	EX_CHECK(rpma_conn_req_recv(req, mr, 0, 8, NULL));
	EX_CHECK(rpma_conn_req_connect(&req, NULL, &conn));
	ex_expect_event(conn, RPMA_CONN_ESTABLISHED);
	struct rpma_cq *cq;
	EX_CHECK(rpma_conn_get_cq(conn, &cq));

	int rounds = 0;
	for (;;) {
		struct ibv_wc wc;
		ex_wait_wc(cq, &wc);
		if (wc.opcode != IBV_WC_RECV)
			continue; /* a send completion */
		uint64_t v = *in;
		if (v == 0)
			break;
		EX_CHECK(rpma_recv(conn, mr, 0, 8, NULL)); /* for the next ping */
		*out = v + 1;
		EX_CHECK(rpma_send(conn, mr, 64, 8, RPMA_F_COMPLETION_ALWAYS, NULL));
		rounds++;
	}
	printf("answered %d pings\n", rounds);
	ex_wait_closed(&conn);
	EX_CHECK(rpma_ep_shutdown(&ep));
	EX_CHECK(rpma_mr_dereg(&mr));
	ex_mem_put(&mem);
	EX_CHECK(rpma_peer_delete(&peer));
	return rounds == 10 ? 0 : 1;
}
