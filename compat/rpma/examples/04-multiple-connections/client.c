/* 04-multiple-connections/client.c - open three connections at once, each
 * writing into the slot the server assigned to it. */
#include "example.h"

#define CLIENTS 3
#define SLOT 64

int main(int argc, char **argv)
{
	ex_usage(argc, argv, 3, NULL);
	struct rpma_peer *peer = ex_peer(argv[1], RPMA_UTIL_IBV_CONTEXT_REMOTE);
	struct ex_mem mem = ex_mem_get(NULL, 4096);
	struct rpma_mr_local *src;
	EX_CHECK(rpma_mr_reg(peer, mem.ptr, 4096, RPMA_MR_USAGE_WRITE_SRC, &src));

	struct rpma_conn *conns[CLIENTS];
	for (int i = 0; i < CLIENTS; i++)
		conns[i] = ex_connect(peer, argv[1], argv[2], NULL, NULL, 0);
	for (int i = 0; i < CLIENTS; i++) {
		struct rpma_conn_private_data pd;
		EX_CHECK(rpma_conn_get_private_data(conns[i], &pd));
		int slot = ((unsigned char *)pd.ptr)[pd.len - 1];
		struct rpma_mr_remote *dst = ex_remote(pd.ptr, pd.len - 1);
		char *msg = mem.ptr + i * SLOT;
		snprintf(msg, SLOT, "client connection %d in slot %d", i, slot);
		struct rpma_cq *cq;
		struct ibv_wc wc;
		EX_CHECK(rpma_conn_get_cq(conns[i], &cq));
		EX_CHECK(rpma_write(conns[i], dst, (size_t)slot * SLOT, src, (size_t)i * SLOT, SLOT,
			RPMA_F_COMPLETION_ON_ERROR, NULL));
		EX_CHECK(rpma_flush(conns[i], dst, (size_t)slot * SLOT, SLOT, RPMA_FLUSH_TYPE_VISIBILITY,
			RPMA_F_COMPLETION_ALWAYS, NULL));
		ex_wait_wc(cq, &wc);
		printf("wrote '%s'\n", msg);
		EX_CHECK(rpma_mr_remote_delete(&dst));
	}
	for (int i = 0; i < CLIENTS; i++)
		ex_disconnect(&conns[i]);
	EX_CHECK(rpma_mr_dereg(&src));
	ex_mem_put(&mem);
	EX_CHECK(rpma_peer_delete(&peer));
	return 0;
}
