/* 06-atomic-write/server.c - a remote log: [8-byte used offset][entries...].
 * Optionally a file: then persistent flushes are offered. */
#include "example.h"

#define SIZE 4096
#define HEADER 64

int main(int argc, char **argv)
{
	ex_usage(argc, argv, 3, " [file]");
	const char *path = argc > 3 ? argv[3] : NULL;
	struct rpma_peer *peer = ex_peer(argv[1], RPMA_UTIL_IBV_CONTEXT_LOCAL);
	struct ex_mem mem = ex_mem_get(path, SIZE);
	memset(mem.ptr, 0, SIZE);
	uint64_t used = HEADER; /* the log starts empty */
	memcpy(mem.ptr, &used, 8);
	int usage = RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_READ_SRC |
		(mem.is_file ? RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT : RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY);
	struct rpma_mr_local *mr;
	EX_CHECK(rpma_mr_reg(peer, mem.ptr, SIZE, usage, &mr));
	struct rpma_peer_cfg *pcfg;
	EX_CHECK(rpma_peer_cfg_new(&pcfg));
	EX_CHECK(rpma_peer_cfg_set_direct_write_to_pmem(pcfg, mem.is_file));
	unsigned char pdata[255];
	size_t mlen;
	EX_CHECK(rpma_mr_get_descriptor_size(mr, &mlen));
	EX_CHECK(rpma_mr_get_descriptor(mr, pdata));
	EX_CHECK(rpma_peer_cfg_get_descriptor(pcfg, pdata + mlen));

	struct rpma_ep *ep = ex_listen(peer, argv[1], argv[2]);
	struct rpma_conn *conn = ex_accept(ep, NULL, pdata, mlen + 1);
	ex_wait_closed(&conn);

	memcpy(&used, mem.ptr, 8);
	printf("log holds %lu bytes:\n", (unsigned long)(used - HEADER));
	int entries = 0;
	for (char *p = mem.ptr + HEADER; p < mem.ptr + used; p += strlen(p) + 1, entries++)
		printf("  %s\n", p);
	EX_ASSERT(entries == 3);

	EX_CHECK(rpma_ep_shutdown(&ep));
	EX_CHECK(rpma_peer_cfg_delete(&pcfg));
	EX_CHECK(rpma_mr_dereg(&mr));
	ex_mem_put(&mem);
	EX_CHECK(rpma_peer_delete(&peer));
	return 0;
}
