/* 09-send-with-imm/client.c - send a message with 32 bits of immediate data. */
#include "example.h"

int main(int argc, char **argv)
{
	ex_usage(argc, argv, 3, NULL);
	struct rpma_peer *peer = ex_peer(argv[1], RPMA_UTIL_IBV_CONTEXT_REMOTE);
	struct ex_mem mem = ex_mem_get(NULL, 4096);
	struct rpma_mr_local *mr;
	EX_CHECK(rpma_mr_reg(peer, mem.ptr, 4096, RPMA_MR_USAGE_SEND, &mr));
	struct rpma_conn *conn = ex_connect(peer, argv[1], argv[2], NULL, NULL, 0);
	struct rpma_cq *cq;
	struct ibv_wc wc;
	EX_CHECK(rpma_conn_get_cq(conn, &cq));
	strcpy(mem.ptr, "with imm");
	EX_CHECK(rpma_send_with_imm(conn, mr, 0, 9, RPMA_F_COMPLETION_ALWAYS, 0x12345678, NULL));
	ex_wait_wc(cq, &wc);
	EX_ASSERT(wc.opcode == IBV_WC_SEND);
	printf("sent with immediate data 0x12345678\n");
	ex_disconnect(&conn);
	EX_CHECK(rpma_mr_dereg(&mr));
	ex_mem_put(&mem);
	EX_CHECK(rpma_peer_delete(&peer));
	return 0;
}
