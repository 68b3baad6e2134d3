/* 08-messages-ping-pong-with-srq/server.c - two connections draw their
 * receives from one shared RQ; its receive CQ tells (by qp_num) which
 * connection each message came from, and the answer goes back there. */
#include "example.h"

#define CONNS 2
#define RECVS 4
#define MSG 8

int main(int argc, char **argv)
{
	ex_usage(argc, argv, 3, NULL);
	struct rpma_peer *peer = ex_peer(argv[1], RPMA_UTIL_IBV_CONTEXT_LOCAL);
	struct ex_mem mem = ex_mem_get(NULL, 4096);
	struct rpma_mr_local *mr;
	EX_CHECK(rpma_mr_reg(peer, mem.ptr, 4096, RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &mr));

	struct rpma_srq_cfg *scfg;
	struct rpma_srq *srq;
	struct rpma_cq *rcq;
	EX_CHECK(rpma_srq_cfg_new(&scfg));
	EX_CHECK(rpma_srq_cfg_set_rq_size(scfg, RECVS));
	EX_CHECK(rpma_srq_new(peer, scfg, &srq));
	EX_CHECK(rpma_srq_get_rcq(srq, &rcq));
	for (int i = 0; i < RECVS; i++) /* slot i of the receive buffers: op_context i */
		EX_CHECK(rpma_srq_recv(srq, mr, (size_t)i * MSG, MSG, (void *)(uintptr_t)i));
	struct rpma_conn_cfg *cfg;
	EX_CHECK(rpma_conn_cfg_new(&cfg));
	EX_CHECK(rpma_conn_cfg_set_srq(cfg, srq));

	struct rpma_ep *ep = ex_listen(peer, argv[1], argv[2]);
	struct rpma_conn *conns[CONNS];
	uint32_t qps[CONNS];
	for (int i = 0; i < CONNS; i++) {
		conns[i] = ex_accept(ep, cfg, NULL, 0);
		EX_CHECK(rpma_conn_get_qp_num(conns[i], &qps[i]));
	}

	int stopped = 0, answered = 0;
	while (stopped < CONNS) {
		struct ibv_wc wc;
		ex_wait_wc(rcq, &wc);
		EX_ASSERT(wc.opcode == IBV_WC_RECV);
		int c = -1;
		for (int i = 0; i < CONNS; i++)
			if (qps[i] == wc.qp_num)
				c = i;
		EX_ASSERT(c >= 0);
		size_t slot = (size_t)wc.wr_id;
		uint64_t v;
		memcpy(&v, mem.ptr + slot * MSG, 8);
		EX_CHECK(rpma_srq_recv(srq, mr, slot * MSG, MSG, (void *)(uintptr_t)slot));
		if (v == 0) {
			stopped++;
			continue;
		}
		v++;
		memcpy(mem.ptr + 1024 + (size_t)c * 64, &v, 8);
		EX_CHECK(rpma_send(conns[c], mr, 1024 + (size_t)c * 64, 8, RPMA_F_COMPLETION_ON_ERROR, NULL));
		answered++;
	}
	printf("answered %d pings on %d connections through one shared RQ\n", answered, CONNS);
	for (int i = 0; i < CONNS; i++)
		ex_wait_closed(&conns[i]);
	EX_CHECK(rpma_ep_shutdown(&ep));
	EX_CHECK(rpma_conn_cfg_delete(&cfg));
	EX_CHECK(rpma_srq_delete(&srq));
	EX_CHECK(rpma_srq_cfg_delete(&scfg));
	EX_CHECK(rpma_mr_dereg(&mr));
	ex_mem_put(&mem);
	EX_CHECK(rpma_peer_delete(&peer));
	return answered == CONNS * 5 ? 0 : 1;
}
