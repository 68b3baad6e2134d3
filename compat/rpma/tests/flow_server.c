/* flow_server.c - server half of the two-process flow test.
 * usage: flow_server <address> <port>
 * Serves a region for writes/reads/flushes, receives a message, checks what
 * the client wrote, replies and waits for the client to disconnect. */
#include "common.h"

#define SZ 4096
static char target[SZ], msgs[SZ];

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s <address> <port>\n", argv[0]);
		return 2;
	}
	check_loaded_library();
	alarm(60); /* a test server never outlives its test, whatever the driver does */
	struct ibv_context *ctx;
	struct rpma_peer *peer;
	struct rpma_ep *ep;
	struct rpma_mr_local *tmr, *mmr;
	REQUIRE_OK(rpma_utils_get_ibv_context(argv[1], RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx));
	REQUIRE_OK(rpma_peer_new(ctx, &peer));
	REQUIRE_OK(rpma_mr_reg(peer, target, SZ, RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_READ_SRC |
		RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY, &tmr));
	REQUIRE_OK(rpma_mr_reg(peer, msgs, SZ, RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &mmr));
	REQUIRE_OK(rpma_ep_listen(peer, argv[1], argv[2], &ep));
	printf("READY\n");
	fflush(stdout);

	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	REQUIRE_OK(rpma_ep_next_conn_req(ep, NULL, &req));
	REQUIRE_OK(rpma_conn_req_recv(req, mmr, 0, 64, (void *)1));
	unsigned char desc[256];
	size_t ds;
	REQUIRE_OK(rpma_mr_get_descriptor_size(tmr, &ds));
	REQUIRE_OK(rpma_mr_get_descriptor(tmr, desc));
	struct rpma_conn_private_data pd = {desc, (uint8_t)ds};
	REQUIRE_OK(rpma_conn_req_connect(&req, &pd, &conn));
	enum rpma_conn_event ev;
	REQUIRE_OK(rpma_conn_next_event(conn, &ev));
	CHECK(ev == RPMA_CONN_ESTABLISHED);

	struct rpma_cq *cq;
	struct ibv_wc wc;
	REQUIRE_OK(rpma_conn_get_cq(conn, &cq));
	REQUIRE_OK(wait_wc(cq, &wc));
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.wr_id == 1);
	CHECK(strcmp(msgs, "done") == 0);
	CHECK(strcmp(target + 512, "hello from the client") == 0);
	uint64_t counter;
	memcpy(&counter, target + 64, 8);
	CHECK(counter == 0x0102030405060708ull);

	strcpy(msgs + 1024, "bye");
	REQUIRE_OK(rpma_send(conn, mmr, 1024, 4, RPMA_F_COMPLETION_ALWAYS, (void *)2));
	REQUIRE_OK(wait_wc(cq, &wc));
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND && wc.wr_id == 2);

	REQUIRE_OK(rpma_conn_next_event(conn, &ev));
	CHECK(ev == RPMA_CONN_CLOSED);
	REQUIRE_OK(rpma_conn_delete(&conn));
	REQUIRE_OK(rpma_ep_shutdown(&ep));
	REQUIRE_OK(rpma_mr_dereg(&tmr));
	REQUIRE_OK(rpma_mr_dereg(&mmr));
	REQUIRE_OK(rpma_peer_delete(&peer));
	return finish("flow_server");
}
