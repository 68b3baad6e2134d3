/* 05-shared-completion-channel/client.c - one completion channel shared by
 * the CQ (the send) and the receive CQ (the answer): poll its descriptor,
 * ask rpma_conn_wait() which queue is ready, drain that queue. */
#include <poll.h>
#include "example.h"

int main(int argc, char **argv)
{
	ex_usage(argc, argv, 3, NULL);
	struct rpma_peer *peer = ex_peer(argv[1], RPMA_UTIL_IBV_CONTEXT_REMOTE);
	struct ex_mem mem = ex_mem_get(NULL, 4096);
	struct rpma_mr_local *mr;
	EX_CHECK(rpma_mr_reg(peer, mem.ptr, 4096, RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &mr));

	struct rpma_conn_cfg *cfg;
	EX_CHECK(rpma_conn_cfg_new(&cfg));
	EX_CHECK(rpma_conn_cfg_set_rcq_size(cfg, 4));
	EX_CHECK(rpma_conn_cfg_set_compl_channel(cfg, true));
	struct rpma_conn *conn = ex_connect(peer, argv[1], argv[2], cfg, NULL, 0);

	int fd;
	EX_CHECK(rpma_conn_get_compl_fd(conn, &fd));
	struct rpma_cq *cq, *rcq;
	EX_CHECK(rpma_conn_get_cq(conn, &cq));
	EX_CHECK(rpma_conn_get_rcq(conn, &rcq));
	/* on a shared channel a single CQ cannot be waited for */
	EX_ASSERT(rpma_cq_wait(cq) == RPMA_E_SHARED_CHANNEL);

	EX_CHECK(rpma_recv(conn, mr, 2048, 64, (void *)2));
	strcpy(mem.ptr, "question");
	EX_CHECK(rpma_send(conn, mr, 0, 9, RPMA_F_COMPLETION_ALWAYS, (void *)1));

	int sent = 0, received = 0;
	while (!sent || !received) {
		struct pollfd p = {fd, POLLIN, 0};
		EX_ASSERT(poll(&p, 1, 10000) == 1);
		struct rpma_cq *ready;
		bool is_rcq;
		EX_CHECK(rpma_conn_wait(conn, 0, &ready, &is_rcq));
		struct ibv_wc wc[4];
		int n;
		while (rpma_cq_get_wc(ready, 4, wc, &n) == 0) {
			for (int i = 0; i < n; i++) {
				EX_ASSERT(wc[i].status == IBV_WC_SUCCESS);
				if (wc[i].opcode == IBV_WC_SEND) {
					EX_ASSERT(!is_rcq && ready == cq);
					sent = 1;
					printf("send completed on the CQ\n");
				} else if (wc[i].opcode == IBV_WC_RECV) {
					EX_ASSERT(is_rcq && ready == rcq);
					received = 1;
					printf("receive completed on the receive CQ: %s\n", mem.ptr + 2048);
				}
			}
		}
	}
	EX_ASSERT(strcmp(mem.ptr + 2048, "answer to 'question'") == 0);

	ex_disconnect(&conn);
	EX_CHECK(rpma_conn_cfg_delete(&cfg));
	EX_CHECK(rpma_mr_dereg(&mr));
	ex_mem_put(&mem);
	EX_CHECK(rpma_peer_delete(&peer));
	return 0;
}
