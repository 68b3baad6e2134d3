/* test_lost.c - RPMA_CONN_LOST: the peer process dies (kill -9) while the
 * connection is up. The client is a forked child (forked before any librpma
 * call, so no library thread is duplicated). */
#include <signal.h>
#include <sys/wait.h>
#include "common.h"

int main(void)
{
	check_loaded_library();
	char port[8];
	free_port(port);
	int ready[2];
	if (pipe(ready) != 0)
		return 1;
	pid_t child = fork();
	if (child < 0)
		return 1;
	if (child == 0) {
		close(ready[0]);
		alarm(30); /* never outlive the test */
		struct ibv_context *ctx;
		struct rpma_peer *peer;
		struct rpma_conn_req *req;
		struct rpma_conn *conn;
		enum rpma_conn_event ev;
		/* wait until the parent listens */
		for (int i = 0; i < 200; i++) {
			REQUIRE_OK(rpma_utils_get_ibv_context("127.0.0.1", RPMA_UTIL_IBV_CONTEXT_REMOTE, &ctx));
			REQUIRE_OK(rpma_peer_new(ctx, &peer));
			REQUIRE_OK(rpma_conn_req_new(peer, "127.0.0.1", port, NULL, &req));
			REQUIRE_OK(rpma_conn_req_connect(&req, NULL, &conn));
			REQUIRE_OK(rpma_conn_next_event(conn, &ev));
			if (ev == RPMA_CONN_ESTABLISHED)
				break;
			rpma_conn_delete(&conn);
			rpma_peer_delete(&peer);
			usleep(20000);
		}
		if (write(ready[1], "x", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(ready[1]);
	struct ibv_context *ctx;
	struct rpma_peer *peer;
	struct rpma_ep *ep;
	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	enum rpma_conn_event ev;
	REQUIRE_OK(rpma_utils_get_ibv_context("127.0.0.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx));
	REQUIRE_OK(rpma_peer_new(ctx, &peer));
	REQUIRE_OK(rpma_ep_listen(peer, "127.0.0.1", port, &ep));
	REQUIRE_OK(rpma_ep_next_conn_req(ep, NULL, &req));
	REQUIRE_OK(rpma_conn_req_connect(&req, NULL, &conn));
	REQUIRE_OK(rpma_conn_next_event(conn, &ev));
	CHECK(ev == RPMA_CONN_ESTABLISHED);
	char c;
	CHECK(read(ready[0], &c, 1) == 1);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	REQUIRE_OK(rpma_conn_next_event(conn, &ev));
	printf("after kill -9 of the peer: %s\n", rpma_utils_conn_event_2str(ev));
	CHECK(ev == RPMA_CONN_LOST);
	/* operations on a lost connection complete as flushed */
	static char buf[64];
	struct rpma_mr_local *mr;
	struct rpma_cq *cq;
	struct ibv_wc wc;
	REQUIRE_OK(rpma_mr_reg(peer, buf, sizeof(buf), RPMA_MR_USAGE_SEND, &mr));
	REQUIRE_OK(rpma_conn_get_cq(conn, &cq));
	EXPECT_OK(rpma_send(conn, mr, 0, 8, RPMA_F_COMPLETION_ALWAYS, (void *)5));
	REQUIRE_OK(wait_wc(cq, &wc));
	CHECK(wc.wr_id == 5 && wc.status == IBV_WC_WR_FLUSH_ERR);
	rpma_mr_dereg(&mr);
	EXPECT_OK(rpma_conn_delete(&conn));
	EXPECT_OK(rpma_ep_shutdown(&ep));
	EXPECT_OK(rpma_peer_delete(&peer));
	return finish("test_lost");
}
