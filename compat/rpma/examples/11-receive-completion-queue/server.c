/* 11-receive-completion-queue/server.c - receives complete on a receive CQ
 * of their own, sends on the main CQ; each is waited for separately. */
#include "example.h"

#define MSGS 3

int main(int argc, char **argv)
{
	ex_usage(argc, argv, 3, NULL);
	struct rpma_peer *peer = ex_peer(argv[1], RPMA_UTIL_IBV_CONTEXT_LOCAL);
	struct ex_mem mem = ex_mem_get(NULL, 4096);
	struct rpma_mr_local *mr;
	EX_CHECK(rpma_mr_reg(peer, mem.ptr, 4096, RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &mr));
	struct rpma_conn_cfg *cfg;
	EX_CHECK(rpma_conn_cfg_new(&cfg));
	EX_CHECK(rpma_conn_cfg_set_rcq_size(cfg, MSGS));
	struct rpma_ep *ep = ex_listen(peer, argv[1], argv[2]);
	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	EX_CHECK(rpma_ep_next_conn_req(ep, cfg, &req));
	for (int i = 0; i < MSGS; i++)
		EX_CHECK(rpma_conn_req_recv(req, mr, (size_t)i * 64, 64, (void *)(uintptr_t)(i + 1)));
	EX_CHECK(rpma_conn_req_connect(&req, NULL, &conn));
	ex_expect_event(conn, RPMA_CONN_ESTABLISHED);

	struct rpma_cq *cq, *rcq;
	EX_CHECK(rpma_conn_get_cq(conn, &cq));
	EX_CHECK(rpma_conn_get_rcq(conn, &rcq));
	EX_ASSERT(rcq != NULL && rcq != cq);
	for (int i = 0; i < MSGS; i++) {
		struct ibv_wc wc;
		ex_wait_wc(rcq, &wc);
		EX_ASSERT(wc.opcode == IBV_WC_RECV && wc.wr_id == (uint64_t)(i + 1));
		printf("receive CQ: message %lu '%s'\n", (unsigned long)wc.wr_id, mem.ptr + i * 64);
	}
	/* the main CQ saw none of them */
	struct ibv_wc wc;
	EX_ASSERT(rpma_cq_get_wc(cq, 1, &wc, NULL) == RPMA_E_NO_COMPLETION);
	strcpy(mem.ptr + 1024, "all received");
	EX_CHECK(rpma_send(conn, mr, 1024, 13, RPMA_F_COMPLETION_ALWAYS, NULL));
	ex_wait_wc(cq, &wc);
	EX_ASSERT(wc.opcode == IBV_WC_SEND);

	ex_wait_closed(&conn);
	EX_CHECK(rpma_ep_shutdown(&ep));
	EX_CHECK(rpma_conn_cfg_delete(&cfg));
	EX_CHECK(rpma_mr_dereg(&mr));
	ex_mem_put(&mem);
	EX_CHECK(rpma_peer_delete(&peer));
	return 0;
}
