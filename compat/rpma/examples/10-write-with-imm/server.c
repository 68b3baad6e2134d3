/* 10-write-with-imm/server.c - learn of a one-sided write through the
 * receive it consumes; the immediate data says where the data went. */
#include <arpa/inet.h>
#include "example.h"

int main(int argc, char **argv)
{
	ex_usage(argc, argv, 3, NULL);
	struct rpma_peer *peer = ex_peer(argv[1], RPMA_UTIL_IBV_CONTEXT_LOCAL);
	struct ex_mem mem = ex_mem_get(NULL, 4096);
	memset(mem.ptr, 0, 4096);
	struct rpma_mr_local *dst, *rmr;
	EX_CHECK(rpma_mr_reg(peer, mem.ptr, 2048, RPMA_MR_USAGE_WRITE_DST, &dst));
	EX_CHECK(rpma_mr_reg(peer, mem.ptr + 2048, 2048, RPMA_MR_USAGE_RECV, &rmr));
	unsigned char desc[255];
	size_t len;
	EX_CHECK(rpma_mr_get_descriptor_size(dst, &len));
	EX_CHECK(rpma_mr_get_descriptor(dst, desc));

	struct rpma_ep *ep = ex_listen(peer, argv[1], argv[2]);
	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	EX_CHECK(rpma_ep_next_conn_req(ep, NULL, &req));
	EX_CHECK(rpma_conn_req_recv(req, rmr, 0, 0, NULL)); /* consumed by the write */
	struct rpma_conn_private_data pd = {desc, (uint8_t)len};
	EX_CHECK(rpma_conn_req_connect(&req, &pd, &conn));
	ex_expect_event(conn, RPMA_CONN_ESTABLISHED);

	struct rpma_cq *cq;
	struct ibv_wc wc;
	EX_CHECK(rpma_conn_get_cq(conn, &cq));
	ex_wait_wc(cq, &wc);
	EX_ASSERT(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && (wc.wc_flags & IBV_WC_WITH_IMM));
	uint32_t offset = ntohl(wc.imm_data);
	printf("write with immediate: data at offset %u: %s\n", offset, mem.ptr + offset);
	EX_ASSERT(offset == 300 && strcmp(mem.ptr + offset, "written with imm") == 0);

	ex_wait_closed(&conn);
	EX_CHECK(rpma_ep_shutdown(&ep));
	EX_CHECK(rpma_mr_dereg(&dst));
	EX_CHECK(rpma_mr_dereg(&rmr));
	ex_mem_put(&mem);
	EX_CHECK(rpma_peer_delete(&peer));
	return 0;
}
