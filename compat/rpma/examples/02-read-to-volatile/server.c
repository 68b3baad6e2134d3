/* 02-read-to-volatile/server.c - expose a region the client reads from. */
#include "example.h"

#define SIZE 4096

int main(int argc, char **argv)
{
	ex_usage(argc, argv, 3, NULL);
	struct rpma_peer *peer = ex_peer(argv[1], RPMA_UTIL_IBV_CONTEXT_LOCAL);
	struct ex_mem mem = ex_mem_get(NULL, SIZE);
	strcpy(mem.ptr, "The server's greeting, read by RDMA.");
	struct rpma_mr_local *mr;
	EX_CHECK(rpma_mr_reg(peer, mem.ptr, SIZE, RPMA_MR_USAGE_READ_SRC, &mr));

	/* the region's descriptor travels as private data */
	unsigned char desc[255];
	size_t len;
	EX_CHECK(rpma_mr_get_descriptor_size(mr, &len));
	EX_CHECK(rpma_mr_get_descriptor(mr, desc));

	struct rpma_ep *ep = ex_listen(peer, argv[1], argv[2]);
	struct rpma_conn *conn = ex_accept(ep, NULL, desc, len);
	ex_wait_closed(&conn);

	EX_CHECK(rpma_ep_shutdown(&ep));
	EX_CHECK(rpma_mr_dereg(&mr));
	ex_mem_put(&mem);
	EX_CHECK(rpma_peer_delete(&peer));
	return 0;
}
