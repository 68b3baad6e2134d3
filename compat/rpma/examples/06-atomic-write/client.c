/* 06-atomic-write/client.c - append entries to the remote log: write the
 * entry, flush it, then publish it by atomically writing the new used offset
 * (and flush that too). */
#include "example.h"

#define HEADER 64

int main(int argc, char **argv)
{
	ex_usage(argc, argv, 3, " [file]");
	struct rpma_peer *peer = ex_peer(argv[1], RPMA_UTIL_IBV_CONTEXT_REMOTE);
	struct ex_mem mem = ex_mem_get(NULL, 4096);
	struct rpma_mr_local *mr;
	EX_CHECK(rpma_mr_reg(peer, mem.ptr, 4096, RPMA_MR_USAGE_WRITE_SRC | RPMA_MR_USAGE_READ_DST, &mr));

	struct rpma_conn *conn = ex_connect(peer, argv[1], argv[2], NULL, NULL, 0);
	struct rpma_conn_private_data pd;
	EX_CHECK(rpma_conn_get_private_data(conn, &pd));
	struct rpma_mr_remote *log = ex_remote(pd.ptr, pd.len - 1);
	struct rpma_peer_cfg *pcfg;
	EX_CHECK(rpma_peer_cfg_from_descriptor((char *)pd.ptr + pd.len - 1, 1, &pcfg));
	EX_CHECK(rpma_conn_apply_remote_peer_cfg(conn, pcfg));
	int types;
	bool direct;
	EX_CHECK(rpma_mr_remote_get_flush_type(log, &types));
	EX_CHECK(rpma_peer_cfg_get_direct_write_to_pmem(pcfg, &direct));
	enum rpma_flush_type ft = direct && (types & RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT) ?
		RPMA_FLUSH_TYPE_PERSISTENT : RPMA_FLUSH_TYPE_VISIBILITY;

	struct rpma_cq *cq;
	struct ibv_wc wc;
	EX_CHECK(rpma_conn_get_cq(conn, &cq));
	/* where the log ends now */
	EX_CHECK(rpma_read(conn, mr, 0, log, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL));
	ex_wait_wc(cq, &wc);
	uint64_t used;
	memcpy(&used, mem.ptr, 8);
	EX_ASSERT(used == HEADER);

	const char *entries[] = {"first entry", "second entry", "third entry"};
	for (int i = 0; i < 3; i++) {
		size_t len = strlen(entries[i]) + 1;
		strcpy(mem.ptr + 64, entries[i]);
		EX_CHECK(rpma_write(conn, log, used, mr, 64, len, RPMA_F_COMPLETION_ON_ERROR, NULL));
		EX_CHECK(rpma_flush(conn, log, used, len, ft, RPMA_F_COMPLETION_ON_ERROR, NULL));
		used += len;
		char v[8];
		memcpy(v, &used, 8);
		EX_CHECK(rpma_atomic_write(conn, log, 0, v, RPMA_F_COMPLETION_ON_ERROR, NULL));
		EX_CHECK(rpma_flush(conn, log, 0, 8, ft, RPMA_F_COMPLETION_ALWAYS, NULL));
		ex_wait_wc(cq, &wc);
		printf("appended '%s' (%s), log ends at %lu\n", entries[i],
			ft == RPMA_FLUSH_TYPE_PERSISTENT ? "persistent" : "visible", (unsigned long)used);
	}

	ex_disconnect(&conn);
	EX_CHECK(rpma_peer_cfg_delete(&pcfg));
	EX_CHECK(rpma_mr_remote_delete(&log));
	EX_CHECK(rpma_mr_dereg(&mr));
	ex_mem_put(&mem);
	EX_CHECK(rpma_peer_delete(&peer));
	return 0;
}
