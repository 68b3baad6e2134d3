/* 05-shared-completion-channel/server.c - answer one message. */
#include "example.h"

int main(int argc, char **argv)
{
	ex_usage(argc, argv, 3, NULL);
	struct rpma_peer *peer = ex_peer(argv[1], RPMA_UTIL_IBV_CONTEXT_LOCAL);
	struct ex_mem mem = ex_mem_get(NULL, 4096);
	struct rpma_mr_local *mr;
	EX_CHECK(rpma_mr_reg(peer, mem.ptr, 4096, RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &mr));
	struct rpma_ep *ep = ex_listen(peer, argv[1], argv[2]);

	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	EX_CHECK(rpma_ep_next_conn_req(ep, NULL, &req));
	EX_CHECK(rpma_conn_req_recv(req, mr, 0, 64, NULL)); /* ready before the client speaks */
	EX_CHECK(rpma_conn_req_connect(&req, NULL, &conn));
	ex_expect_event(conn, RPMA_CONN_ESTABLISHED);

	struct rpma_cq *cq;
	struct ibv_wc wc;
	EX_CHECK(rpma_conn_get_cq(conn, &cq));
	ex_wait_wc(cq, &wc);
	EX_ASSERT(wc.opcode == IBV_WC_RECV);
	printf("received: %s\n", mem.ptr);
	char question[48];
	snprintf(question, sizeof question, "%s", (const char *)mem.ptr);
	snprintf((char *)mem.ptr + 1024, 64, "answer to '%.48s'", question);
	EX_CHECK(rpma_send(conn, mr, 1024, 64, RPMA_F_COMPLETION_ALWAYS, NULL));
	ex_wait_wc(cq, &wc);
	EX_ASSERT(wc.opcode == IBV_WC_SEND);

	ex_wait_closed(&conn);
	EX_CHECK(rpma_ep_shutdown(&ep));
	EX_CHECK(rpma_mr_dereg(&mr));
	ex_mem_put(&mem);
	EX_CHECK(rpma_peer_delete(&peer));
	return 0;
}
