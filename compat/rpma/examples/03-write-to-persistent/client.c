/* 03-write-to-persistent/client.c - write, then flush to persistence when
 * the server offers it (else to visibility). */
#include "example.h"

#define SIZE 4096

int main(int argc, char **argv)
{
	ex_usage(argc, argv, 3, " [file]");
	struct rpma_peer *peer = ex_peer(argv[1], RPMA_UTIL_IBV_CONTEXT_REMOTE);
	struct ex_mem mem = ex_mem_get(NULL, SIZE);
	strcpy(mem.ptr, "Hello, persistent world!");
	struct rpma_mr_local *src;
	EX_CHECK(rpma_mr_reg(peer, mem.ptr, SIZE, RPMA_MR_USAGE_WRITE_SRC, &src));

	struct rpma_conn *conn = ex_connect(peer, argv[1], argv[2], NULL, NULL, 0);
	struct rpma_conn_private_data pd;
	EX_CHECK(rpma_conn_get_private_data(conn, &pd));
	size_t mlen = pd.len - 1;
	struct rpma_mr_remote *dst = ex_remote(pd.ptr, mlen);
	struct rpma_peer_cfg *pcfg;
	EX_CHECK(rpma_peer_cfg_from_descriptor((char *)pd.ptr + mlen, 1, &pcfg));
	EX_CHECK(rpma_conn_apply_remote_peer_cfg(conn, pcfg));
	bool direct = false;
	int flush_types = 0;
	EX_CHECK(rpma_peer_cfg_get_direct_write_to_pmem(pcfg, &direct));
	EX_CHECK(rpma_mr_remote_get_flush_type(dst, &flush_types));
	enum rpma_flush_type type = direct && (flush_types & RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT) ?
		RPMA_FLUSH_TYPE_PERSISTENT : RPMA_FLUSH_TYPE_VISIBILITY;

	struct rpma_cq *cq;
	struct ibv_wc wc;
	EX_CHECK(rpma_conn_get_cq(conn, &cq));
	size_t len = strlen(mem.ptr) + 1;
	EX_CHECK(rpma_write(conn, dst, 0, src, 0, len, RPMA_F_COMPLETION_ON_ERROR, NULL));
	EX_CHECK(rpma_flush(conn, dst, 0, len, type, RPMA_F_COMPLETION_ALWAYS, (void *)1));
	ex_wait_wc(cq, &wc);
	EX_ASSERT(wc.wr_id == 1);
	printf("written and flushed (%s)\n", type == RPMA_FLUSH_TYPE_PERSISTENT ? "persistent" : "visibility");

	ex_disconnect(&conn);
	EX_CHECK(rpma_peer_cfg_delete(&pcfg));
	EX_CHECK(rpma_mr_remote_delete(&dst));
	EX_CHECK(rpma_mr_dereg(&src));
	ex_mem_put(&mem);
	EX_CHECK(rpma_peer_delete(&peer));
	return 0;
}
