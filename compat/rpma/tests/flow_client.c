/* flow_client.c - client half of the two-process flow test.
 * usage: flow_client <address> <port> */
#include "common.h"

#define SZ 4096
static char buf[SZ];

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s <address> <port>\n", argv[0]);
		return 2;
	}
	check_loaded_library();
	struct ibv_context *ctx;
	struct rpma_peer *peer;
	struct rpma_mr_local *mr;
	REQUIRE_OK(rpma_utils_get_ibv_context(argv[1], RPMA_UTIL_IBV_CONTEXT_REMOTE, &ctx));
	REQUIRE_OK(rpma_peer_new(ctx, &peer));
	REQUIRE_OK(rpma_mr_reg(peer, buf, SZ, RPMA_MR_USAGE_WRITE_SRC | RPMA_MR_USAGE_READ_DST |
		RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &mr));
	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	REQUIRE_OK(rpma_conn_req_new(peer, argv[1], argv[2], NULL, &req));
	REQUIRE_OK(rpma_conn_req_connect(&req, NULL, &conn));
	enum rpma_conn_event ev;
	REQUIRE_OK(rpma_conn_next_event(conn, &ev));
	if (ev != RPMA_CONN_ESTABLISHED) {
		fprintf(stderr, "event: %s\n", rpma_utils_conn_event_2str(ev));
		return 1;
	}
	struct rpma_conn_private_data pd;
	struct rpma_mr_remote *rmr;
	REQUIRE_OK(rpma_conn_get_private_data(conn, &pd));
	REQUIRE_OK(rpma_mr_remote_from_descriptor(pd.ptr, pd.len, &rmr));
	size_t rsize;
	REQUIRE_OK(rpma_mr_remote_get_size(rmr, &rsize));
	CHECK(rsize == SZ);

	struct rpma_cq *cq;
	struct ibv_wc wc;
	REQUIRE_OK(rpma_conn_get_cq(conn, &cq));
	strcpy(buf, "hello from the client");
	REQUIRE_OK(rpma_write(conn, rmr, 512, mr, 0, strlen(buf) + 1, RPMA_F_COMPLETION_ON_ERROR, NULL));
	char v[8];
	uint64_t x = 0x0102030405060708ull;
	memcpy(v, &x, 8);
	REQUIRE_OK(rpma_atomic_write(conn, rmr, 64, v, RPMA_F_COMPLETION_ON_ERROR, NULL));
	REQUIRE_OK(rpma_flush(conn, rmr, 0, SZ, RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS, (void *)10));
	REQUIRE_OK(wait_wc(cq, &wc));
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 10);
	REQUIRE_OK(rpma_read(conn, mr, 1024, rmr, 512, 22, RPMA_F_COMPLETION_ALWAYS, (void *)11));
	REQUIRE_OK(wait_wc(cq, &wc));
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ && wc.wr_id == 11);
	CHECK(strcmp(buf + 1024, "hello from the client") == 0);

	REQUIRE_OK(rpma_recv(conn, mr, 2048, 64, (void *)12));
	strcpy(buf + 3000, "done");
	REQUIRE_OK(rpma_send(conn, mr, 3000, 5, RPMA_F_COMPLETION_ON_ERROR, NULL));
	REQUIRE_OK(wait_wc(cq, &wc));
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.wr_id == 12);
	CHECK(strcmp(buf + 2048, "bye") == 0);

	REQUIRE_OK(rpma_conn_disconnect(conn));
	REQUIRE_OK(rpma_conn_next_event(conn, &ev));
	CHECK(ev == RPMA_CONN_CLOSED);
	REQUIRE_OK(rpma_conn_delete(&conn));
	REQUIRE_OK(rpma_mr_remote_delete(&rmr));
	REQUIRE_OK(rpma_mr_dereg(&mr));
	REQUIRE_OK(rpma_peer_delete(&peer));
	return finish("flow_client");
}
