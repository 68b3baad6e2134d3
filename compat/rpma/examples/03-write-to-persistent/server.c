/* 03-write-to-persistent/server.c - a region the client writes and flushes
 * to persistence; with a file path it is a shared mapping of that file. */
#include "example.h"

#define SIZE 4096

int main(int argc, char **argv)
{
	ex_usage(argc, argv, 3, " [file]");
	const char *path = argc > 3 ? argv[3] : NULL;
	struct rpma_peer *peer = ex_peer(argv[1], RPMA_UTIL_IBV_CONTEXT_LOCAL);
	struct ex_mem mem = ex_mem_get(path, SIZE);
	memset(mem.ptr, 0, 64);
	int usage = RPMA_MR_USAGE_WRITE_DST |
		(mem.is_file ? RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT : RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY);
	struct rpma_mr_local *mr;
	EX_CHECK(rpma_mr_reg(peer, mem.ptr, SIZE, usage, &mr));

	/* direct write to pmem: only when the memory is a file mapping */
	struct rpma_peer_cfg *pcfg;
	EX_CHECK(rpma_peer_cfg_new(&pcfg));
	EX_CHECK(rpma_peer_cfg_set_direct_write_to_pmem(pcfg, mem.is_file));

	/* private data: [region descriptor][peer cfg descriptor] */
	unsigned char pdata[255];
	size_t mlen, plen;
	EX_CHECK(rpma_mr_get_descriptor_size(mr, &mlen));
	EX_CHECK(rpma_peer_cfg_get_descriptor_size(pcfg, &plen));
	EX_CHECK(rpma_mr_get_descriptor(mr, pdata));
	EX_CHECK(rpma_peer_cfg_get_descriptor(pcfg, pdata + mlen));

	struct rpma_ep *ep = ex_listen(peer, argv[1], argv[2]);
	struct rpma_conn *conn = ex_accept(ep, NULL, pdata, mlen + plen);
	ex_wait_closed(&conn);
	printf("the region holds: %s\n", mem.ptr);
	EX_ASSERT(strcmp(mem.ptr, "Hello, persistent world!") == 0);

	EX_CHECK(rpma_ep_shutdown(&ep));
	EX_CHECK(rpma_peer_cfg_delete(&pcfg));
	EX_CHECK(rpma_mr_dereg(&mr));
	ex_mem_put(&mem);
	EX_CHECK(rpma_peer_delete(&peer));
	return 0;
}
