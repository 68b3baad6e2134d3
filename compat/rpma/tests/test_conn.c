/* test_conn.c - rpma_ep_*, rpma_conn_req_*, rpma_conn_* (control path) */
#include <fcntl.h>
#include <poll.h>
#include "common.h"

static void set_nonblocking(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

int main(void)
{
	check_loaded_library();
	struct ibv_context *ctx;
	struct rpma_peer *peer;
	REQUIRE_OK(rpma_utils_get_ibv_context("127.0.0.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx));
	REQUIRE_OK(rpma_peer_new(ctx, &peer));
	char port[8];
	free_port(port);

	/* ---- rpma_ep_listen ---- */
	struct rpma_ep *ep = NULL, *ep2 = NULL;
	EXPECT_RC(rpma_ep_listen(NULL, "127.0.0.1", port, &ep), RPMA_E_INVAL);
	EXPECT_RC(rpma_ep_listen(peer, NULL, port, &ep), RPMA_E_INVAL);
	EXPECT_RC(rpma_ep_listen(peer, "127.0.0.1", NULL, &ep), RPMA_E_INVAL);
	EXPECT_RC(rpma_ep_listen(peer, "127.0.0.1", port, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_ep_listen(peer, "127.0.0.1", "not-a-port", &ep), RPMA_E_PROVIDER);
	EXPECT_RC(rpma_ep_listen(peer, "no-such-host.invalid", port, &ep), RPMA_E_PROVIDER);
	CHECK(ep == NULL);
	REQUIRE_OK(rpma_ep_listen(peer, "127.0.0.1", port, &ep));
	EXPECT_RC(rpma_ep_listen(peer, "127.0.0.1", port, &ep2), RPMA_E_PROVIDER); /* in use */
	CHECK(ep2 == NULL);

	/* ---- rpma_ep_get_fd, non-blocking rpma_ep_next_conn_req ---- */
	int fd = -1;
	EXPECT_RC(rpma_ep_get_fd(NULL, &fd), RPMA_E_INVAL);
	EXPECT_RC(rpma_ep_get_fd(ep, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_ep_get_fd(ep, &fd));
	CHECK(fd >= 0);
	struct rpma_conn_req *sreq = NULL, *creq = NULL;
	EXPECT_RC(rpma_ep_next_conn_req(NULL, NULL, &sreq), RPMA_E_INVAL);
	EXPECT_RC(rpma_ep_next_conn_req(ep, NULL, NULL), RPMA_E_INVAL);
	set_nonblocking(fd);
	EXPECT_RC(rpma_ep_next_conn_req(ep, NULL, &sreq), RPMA_E_NO_EVENT);
	CHECK(sreq == NULL);

	/* ---- rpma_conn_req_new ---- */
	EXPECT_RC(rpma_conn_req_new(NULL, "127.0.0.1", port, NULL, &creq), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_req_new(peer, NULL, port, NULL, &creq), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_req_new(peer, "127.0.0.1", NULL, NULL, &creq), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_req_new(peer, "127.0.0.1", port, NULL, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_req_new(peer, "no-such-host.invalid", port, NULL, &creq), RPMA_E_PROVIDER);
	EXPECT_RC(rpma_conn_req_new(peer, "127.0.0.1", "99999", NULL, &creq), RPMA_E_PROVIDER);
	CHECK(creq == NULL);
	EXPECT_RC(rpma_conn_req_delete(NULL), RPMA_E_INVAL);

	/* ---- rpma_conn_req_connect argument errors consume the request ---- */
	struct rpma_conn *conn = NULL;
	char hello[] = "client hello";
	struct rpma_conn_private_data pd = {hello, sizeof(hello)};
	struct rpma_conn_private_data empty = {hello, 0};
	EXPECT_RC(rpma_conn_req_connect(NULL, NULL, &conn), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_req_connect(&creq, NULL, &conn), RPMA_E_INVAL); /* *req_ptr NULL */
	REQUIRE_OK(rpma_conn_req_new(peer, "127.0.0.1", port, NULL, &creq));
	EXPECT_RC(rpma_conn_req_connect(&creq, NULL, NULL), RPMA_E_INVAL);
	CHECK(creq == NULL);
	REQUIRE_OK(rpma_conn_req_new(peer, "127.0.0.1", port, NULL, &creq));
	EXPECT_RC(rpma_conn_req_connect(&creq, &empty, &conn), RPMA_E_INVAL);
	CHECK(creq == NULL && conn == NULL);

	/* ---- rpma_conn_req_recv: RPMA_E_PROVIDER once the receive queue is full ---- */
	static char rbuf[256];
	struct rpma_mr_local *rmr;
	struct rpma_conn_cfg *rq1;
	REQUIRE_OK(rpma_mr_reg(peer, rbuf, sizeof(rbuf), RPMA_MR_USAGE_RECV, &rmr));
	REQUIRE_OK(rpma_conn_cfg_new(&rq1));
	REQUIRE_OK(rpma_conn_cfg_set_rq_size(rq1, 1));
	REQUIRE_OK(rpma_conn_req_new(peer, "127.0.0.1", port, rq1, &creq));
	EXPECT_OK(rpma_conn_req_recv(creq, rmr, 0, 64, (void *)1));
	EXPECT_RC(rpma_conn_req_recv(creq, rmr, 64, 64, (void *)2), RPMA_E_PROVIDER);
	EXPECT_RC(rpma_conn_req_recv(creq, rmr, 250, 64, (void *)2), RPMA_E_INVAL); /* outside the region */
	EXPECT_OK(rpma_conn_req_delete(&creq));
	CHECK(creq == NULL);
	rpma_conn_cfg_delete(&rq1);
	/* ---- rpma_srq_recv: RPMA_E_PROVIDER once the shared RQ is full ---- */
	struct rpma_srq_cfg *scfg;
	struct rpma_srq *srq;
	REQUIRE_OK(rpma_srq_cfg_new(&scfg));
	REQUIRE_OK(rpma_srq_cfg_set_rq_size(scfg, 1));
	REQUIRE_OK(rpma_srq_cfg_set_rcq_size(scfg, 0));
	REQUIRE_OK(rpma_srq_new(peer, scfg, &srq));
	struct rpma_cq *no_rcq = (struct rpma_cq *)rbuf;
	EXPECT_OK(rpma_srq_get_rcq(srq, &no_rcq));
	CHECK(no_rcq == NULL);
	EXPECT_OK(rpma_srq_recv(srq, rmr, 0, 64, NULL));
	EXPECT_RC(rpma_srq_recv(srq, rmr, 64, 64, NULL), RPMA_E_PROVIDER);
	EXPECT_OK(rpma_srq_delete(&srq));

	/* ---- rpma_srq_delete: refused (RPMA_E_PROVIDER, nothing freed) while a
	 * connection request made with it exists, as ibv_destroy_srq is (EBUSY) ---- */
	REQUIRE_OK(rpma_srq_cfg_set_rcq_size(scfg, 4));
	REQUIRE_OK(rpma_srq_new(peer, scfg, &srq));
	struct rpma_conn_cfg *srq_ccfg;
	REQUIRE_OK(rpma_conn_cfg_new(&srq_ccfg));
	REQUIRE_OK(rpma_conn_cfg_set_srq(srq_ccfg, srq));
	struct rpma_conn_req *sreq_busy = NULL;
	REQUIRE_OK(rpma_conn_req_new(peer, "127.0.0.1", port, srq_ccfg, &sreq_busy));
	EXPECT_RC(rpma_srq_delete(&srq), RPMA_E_PROVIDER);
	CHECK(srq != NULL);
	struct rpma_cq *srq_rcq = NULL;
	EXPECT_OK(rpma_srq_get_rcq(srq, &srq_rcq)); /* still there, still usable */
	CHECK(srq_rcq != NULL);
	EXPECT_OK(rpma_srq_recv(srq, rmr, 0, 64, NULL));
	EXPECT_OK(rpma_conn_req_delete(&sreq_busy));
	EXPECT_OK(rpma_srq_delete(&srq));
	CHECK(srq == NULL);
	rpma_conn_cfg_delete(&srq_ccfg);
	rpma_srq_cfg_delete(&scfg);
	rpma_mr_dereg(&rmr);

	/* ---- rejection: the server deletes the request ---- */
	enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
	REQUIRE_OK(rpma_conn_req_new(peer, "127.0.0.1", port, NULL, &creq));
	REQUIRE_OK(rpma_conn_req_connect(&creq, &pd, &conn));
	struct pollfd pfd = {fd, POLLIN, 0};
	CHECK(poll(&pfd, 1, 5000) == 1); /* the ep fd reports the request */
	REQUIRE_OK(rpma_ep_next_conn_req(ep, NULL, &sreq));
	struct rpma_conn_private_data got = {NULL, 0};
	EXPECT_RC(rpma_conn_req_get_private_data(NULL, &got), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_req_get_private_data(sreq, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_conn_req_get_private_data(sreq, &got));
	CHECK(got.len == sizeof(hello) && memcmp(got.ptr, hello, sizeof(hello)) == 0);
	EXPECT_OK(rpma_conn_req_delete(&sreq));
	CHECK(sreq == NULL);
	EXPECT_OK(rpma_conn_next_event(conn, &ev));
	CHECK(ev == RPMA_CONN_REJECTED);
	EXPECT_OK(rpma_conn_delete(&conn));

	/* ---- unreachable: nothing listens ---- */
	char closed_port[8];
	free_port(closed_port);
	REQUIRE_OK(rpma_conn_req_new(peer, "127.0.0.1", closed_port, NULL, &creq));
	int rc = rpma_conn_req_connect(&creq, NULL, &conn);
	CHECK(creq == NULL);
	if (rc == 0) {
		EXPECT_OK(rpma_conn_next_event(conn, &ev));
		CHECK(ev == RPMA_CONN_UNREACHABLE || ev == RPMA_CONN_REJECTED);
		EXPECT_OK(rpma_conn_delete(&conn));
	} else {
		CHECK(rc == RPMA_E_PROVIDER);
	}

	/* ---- a connection with private data both ways, shared channel on the client ---- */
	struct rpma_conn_cfg *ccfg;
	REQUIRE_OK(rpma_conn_cfg_new(&ccfg));
	REQUIRE_OK(rpma_conn_cfg_set_compl_channel(ccfg, true));
	REQUIRE_OK(rpma_conn_cfg_set_rcq_size(ccfg, 5));
	REQUIRE_OK(rpma_conn_req_new(peer, "127.0.0.1", port, ccfg, &creq));
	struct rpma_conn *client = NULL, *server = NULL;
	REQUIRE_OK(rpma_conn_req_connect(&creq, &pd, &client));
	CHECK(poll(&pfd, 1, 5000) == 1);
	REQUIRE_OK(rpma_ep_next_conn_req(ep, NULL, &sreq));
	char reply[] = "server reply!";
	struct rpma_conn_private_data spd = {reply, sizeof(reply)};
	REQUIRE_OK(rpma_conn_req_connect(&sreq, &spd, &server));
	CHECK(sreq == NULL);

	int efd = -1;
	EXPECT_RC(rpma_conn_get_event_fd(NULL, &efd), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_get_event_fd(client, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_conn_get_event_fd(client, &efd));
	CHECK(efd >= 0);
	struct pollfd epfd = {efd, POLLIN, 0};
	CHECK(poll(&epfd, 1, 5000) == 1);
	EXPECT_RC(rpma_conn_next_event(NULL, &ev), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_next_event(client, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_conn_next_event(client, &ev));
	CHECK(ev == RPMA_CONN_ESTABLISHED);
	EXPECT_OK(rpma_conn_next_event(server, &ev));
	CHECK(ev == RPMA_CONN_ESTABLISHED);
	/* non-blocking: nothing more */
	set_nonblocking(efd);
	EXPECT_RC(rpma_conn_next_event(client, &ev), RPMA_E_NO_EVENT);

	EXPECT_RC(rpma_conn_get_private_data(NULL, &got), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_get_private_data(client, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_conn_get_private_data(client, &got));
	CHECK(got.len == sizeof(reply) && memcmp(got.ptr, reply, sizeof(reply)) == 0);
	EXPECT_OK(rpma_conn_get_private_data(server, &got));
	CHECK(got.len == sizeof(hello) && memcmp(got.ptr, hello, sizeof(hello)) == 0);

	struct rpma_peer_cfg *pcfg;
	REQUIRE_OK(rpma_peer_cfg_new(&pcfg));
	EXPECT_RC(rpma_conn_apply_remote_peer_cfg(NULL, pcfg), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_apply_remote_peer_cfg(client, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_conn_apply_remote_peer_cfg(client, pcfg));
	rpma_peer_cfg_delete(&pcfg);

	uint32_t qpn = 0, qpn2 = 0;
	EXPECT_RC(rpma_conn_get_qp_num(NULL, &qpn), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_get_qp_num(client, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_conn_get_qp_num(client, &qpn));
	EXPECT_OK(rpma_conn_get_qp_num(server, &qpn2));
	CHECK(qpn != qpn2);

	struct rpma_cq *cq = NULL, *rcq = NULL;
	EXPECT_RC(rpma_conn_get_cq(NULL, &cq), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_get_cq(client, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_conn_get_cq(client, &cq));
	CHECK(cq != NULL);
	EXPECT_RC(rpma_conn_get_rcq(NULL, &rcq), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_get_rcq(client, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_conn_get_rcq(client, &rcq));
	CHECK(rcq != NULL && rcq != cq);
	EXPECT_OK(rpma_conn_get_rcq(server, &rcq));
	CHECK(rcq == NULL); /* default: no receive CQ */

	/* shared completion channel: only the client has it */
	int cfd = -1;
	EXPECT_RC(rpma_conn_get_compl_fd(NULL, &cfd), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_get_compl_fd(client, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_get_compl_fd(server, &cfd), RPMA_E_NOT_SHARED_CHNL);
	CHECK(cfd == -1);
	EXPECT_OK(rpma_conn_get_compl_fd(client, &cfd));
	CHECK(cfd >= 0);
	EXPECT_RC(rpma_cq_wait(cq), RPMA_E_SHARED_CHANNEL);
	struct rpma_cq *wcq = NULL;
	bool is_rcq = true;
	EXPECT_RC(rpma_conn_wait(NULL, 0, &wcq, &is_rcq), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_wait(client, 0, NULL, &is_rcq), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_wait(server, 0, &wcq, &is_rcq), RPMA_E_NOT_SHARED_CHNL);
	/* Blocking, with nothing posted that could complete: the wait would
	 * never end, so it says there is no completion (the alarm turns a hang
	 * into a failure). */
	alarm(30);
	EXPECT_RC(rpma_conn_wait(client, 0, &wcq, &is_rcq), RPMA_E_NO_COMPLETION);
	alarm(0);
	set_nonblocking(cfd);
	EXPECT_RC(rpma_conn_wait(client, 0, &wcq, &is_rcq), RPMA_E_NO_COMPLETION);

	/* ---- disconnect: both sides see CLOSED ---- */
	EXPECT_RC(rpma_conn_disconnect(NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_conn_disconnect(client));
	int fl = fcntl(efd, F_GETFL);
	fcntl(efd, F_SETFL, fl & ~O_NONBLOCK);
	EXPECT_OK(rpma_conn_next_event(client, &ev));
	CHECK(ev == RPMA_CONN_CLOSED);
	EXPECT_OK(rpma_conn_next_event(server, &ev));
	CHECK(ev == RPMA_CONN_CLOSED);
	EXPECT_RC(rpma_conn_delete(NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_conn_delete(&client));
	CHECK(client == NULL);
	EXPECT_OK(rpma_conn_delete(&server));
	EXPECT_OK(rpma_conn_delete(&server)); /* NULL: nothing to do */
	rpma_conn_cfg_delete(&ccfg);

	/* ---- rpma_ep_shutdown ---- */
	EXPECT_RC(rpma_ep_shutdown(NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_ep_shutdown(&ep));
	CHECK(ep == NULL);
	EXPECT_OK(rpma_peer_delete(&peer));
	return finish("test_conn");
}
