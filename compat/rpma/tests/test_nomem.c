/* test_nomem.c - RPMA_E_NOMEM ("out of memory") of the functions allocating
 * a handle.
 *
 * nomem_alloc.cpp replaces the nothrow operator new the library allocates
 * its handles with; each case refuses exactly one allocation of the calling
 * thread and checks: RPMA_E_NOMEM, the allocation was the one refused, the
 * outputs are untouched, and the same call succeeds afterwards. Everything
 * is freed (the test also runs under ASan/LSan).
 */
#include <poll.h>
#include "common.h"
#include "nomem_alloc.h"

static char g_sentinel;
#define SENTINEL ((void *)&g_sentinel)

/* `call` with the (skip+1)-th nothrow allocation of this thread refused:
 * RPMA_E_NOMEM, and that allocation was reached. */
#define EXPECT_NOMEM(skip, call)                                                      \
	do {                                                                          \
		nomem_arm((skip), 1);                                                 \
		int rc_ = (call);                                                     \
		int refused_ = nomem_refused();                                       \
		nomem_arm(0, 0);                                                      \
		if (rc_ != RPMA_E_NOMEM || refused_ != 1) {                           \
			fprintf(stderr, "%s:%d: %s (allocation %d refused) returned " \
				"%d (%s), %d refused; want RPMA_E_NOMEM, 1\n",        \
				__FILE__, __LINE__, #call, (skip) + 1, rc_,           \
				rpma_err_2str(rc_), refused_);                        \
			g_failures++;                                                 \
		}                                                                     \
	} while (0)

/* Wait up to 5 s for the next event of a (blocking) connection. */
static int next_event(struct rpma_conn *conn, enum rpma_conn_event *ev)
{
	int fd = -1;
	if (rpma_conn_get_event_fd(conn, &fd))
		return -1;
	struct pollfd pfd = {fd, POLLIN, 0};
	if (poll(&pfd, 1, 5000) != 1) {
		fprintf(stderr, "no connection event within 5 s\n");
		return -1;
	}
	return rpma_conn_next_event(conn, ev);
}

/* Wait up to 5 s for a connection request on a (blocking) endpoint. */
static void wait_request(struct rpma_ep *ep)
{
	int fd = -1;
	REQUIRE_OK(rpma_ep_get_fd(ep, &fd));
	struct pollfd pfd = {fd, POLLIN, 0};
	if (poll(&pfd, 1, 5000) != 1) {
		fprintf(stderr, "no connection request within 5 s\n");
		exit(1);
	}
}

/* A client connection to `port` (connect initiated, no event consumed). */
static struct rpma_conn *client_connect(struct rpma_peer *peer, const char *port)
{
	struct rpma_conn_req *req = NULL;
	struct rpma_conn *conn = NULL;
	REQUIRE_OK(rpma_conn_req_new(peer, "127.0.0.1", port, NULL, &req));
	REQUIRE_OK(rpma_conn_req_connect(&req, NULL, &conn));
	return conn;
}

/* The client of a request the server failed to take: it sees the rejection. */
static void expect_rejected(struct rpma_conn **client)
{
	enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
	EXPECT_OK(next_event(*client, &ev));
	CHECK(ev == RPMA_CONN_REJECTED);
	EXPECT_OK(rpma_conn_delete(client));
}

int main(void)
{
	check_loaded_library();

	/* ---- the switch reaches the library: the configuration objects ---- */
	struct rpma_conn_cfg *ccfg = SENTINEL;
	nomem_arm(0, 1);
	int rc = rpma_conn_cfg_new(&ccfg);
	nomem_arm(0, 0);
	if (rc != RPMA_E_NOMEM) {
		fprintf(stderr, "the nothrow operator new of the test is not the one librpma.so.0 uses "
			"(rpma_conn_cfg_new returned %d)\n", rc);
		return 1;
	}
	CHECK(ccfg == SENTINEL);
	EXPECT_OK(rpma_conn_cfg_new(&ccfg));
	CHECK(ccfg != SENTINEL && ccfg != NULL);
	EXPECT_OK(rpma_conn_cfg_delete(&ccfg));

	struct rpma_peer_cfg *pcfg = SENTINEL;
	EXPECT_NOMEM(0, rpma_peer_cfg_new(&pcfg));
	CHECK(pcfg == SENTINEL);
	EXPECT_OK(rpma_peer_cfg_new(&pcfg));
	CHECK(pcfg != SENTINEL && pcfg != NULL);
	EXPECT_OK(rpma_peer_cfg_delete(&pcfg));

	struct rpma_srq_cfg *scfg = SENTINEL;
	EXPECT_NOMEM(0, rpma_srq_cfg_new(&scfg));
	CHECK(scfg == SENTINEL);
	EXPECT_OK(rpma_srq_cfg_new(&scfg));
	CHECK(scfg != SENTINEL && scfg != NULL);
	EXPECT_OK(rpma_srq_cfg_delete(&scfg));

	unsigned char pdesc = 1;
	pcfg = SENTINEL;
	EXPECT_NOMEM(0, rpma_peer_cfg_from_descriptor(&pdesc, 1, &pcfg));
	CHECK(pcfg == SENTINEL);
	EXPECT_OK(rpma_peer_cfg_from_descriptor(&pdesc, 1, &pcfg));
	CHECK(pcfg != SENTINEL && pcfg != NULL);
	bool direct = false;
	EXPECT_OK(rpma_peer_cfg_get_direct_write_to_pmem(pcfg, &direct));
	CHECK(direct);
	EXPECT_OK(rpma_peer_cfg_delete(&pcfg));

	/* ---- device context (the first lookup of an address opens a fabric) ---- */
	struct ibv_context *ctx = SENTINEL;
	EXPECT_NOMEM(0, rpma_utils_get_ibv_context("127.0.0.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx));
	CHECK(ctx == SENTINEL);
	REQUIRE_OK(rpma_utils_get_ibv_context("127.0.0.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx));

	/* ---- rpma_peer_new ---- */
	struct rpma_peer *peer = SENTINEL;
	EXPECT_NOMEM(0, rpma_peer_new(ctx, &peer));
	CHECK(peer == SENTINEL);
	REQUIRE_OK(rpma_peer_new(ctx, &peer));

	/* ---- rpma_mr_reg, rpma_mr_remote_from_descriptor ---- */
	static char buf[4096];
	struct rpma_mr_local *mr = SENTINEL;
	EXPECT_NOMEM(0, rpma_mr_reg(peer, buf, sizeof(buf), RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_WRITE_DST, &mr));
	CHECK(mr == SENTINEL);
	REQUIRE_OK(rpma_mr_reg(peer, buf, sizeof(buf), RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_WRITE_DST, &mr));
	size_t dsize = 0;
	REQUIRE_OK(rpma_mr_get_descriptor_size(mr, &dsize));
	unsigned char mdesc[256];
	CHECK(dsize <= sizeof(mdesc));
	REQUIRE_OK(rpma_mr_get_descriptor(mr, mdesc));
	struct rpma_mr_remote *rmr = SENTINEL;
	EXPECT_NOMEM(0, rpma_mr_remote_from_descriptor(mdesc, dsize, &rmr));
	CHECK(rmr == SENTINEL);
	EXPECT_OK(rpma_mr_remote_from_descriptor(mdesc, dsize, &rmr));
	size_t rsize = 0;
	EXPECT_OK(rpma_mr_remote_get_size(rmr, &rsize));
	CHECK(rsize == sizeof(buf));
	EXPECT_OK(rpma_mr_remote_delete(&rmr));
	EXPECT_OK(rpma_mr_dereg(&mr));

	/* ---- rpma_srq_new: the queue, then its receive CQ (rcq_size 100) ---- */
	struct rpma_srq *srq = SENTINEL;
	EXPECT_NOMEM(0, rpma_srq_new(peer, NULL, &srq));
	CHECK(srq == SENTINEL);
	EXPECT_NOMEM(1, rpma_srq_new(peer, NULL, &srq));
	CHECK(srq == SENTINEL);
	REQUIRE_OK(rpma_srq_new(peer, NULL, &srq));
	struct rpma_cq *srcq = NULL;
	EXPECT_OK(rpma_srq_get_rcq(srq, &srcq));
	CHECK(srcq != NULL);
	EXPECT_OK(rpma_srq_delete(&srq));

	/* ---- rpma_ep_listen ---- */
	char port[8];
	free_port(port);
	struct rpma_ep *ep = SENTINEL;
	EXPECT_NOMEM(0, rpma_ep_listen(peer, "127.0.0.1", port, &ep));
	CHECK(ep == SENTINEL);
	REQUIRE_OK(rpma_ep_listen(peer, "127.0.0.1", port, &ep)); /* the port was not taken */

	/* ---- rpma_conn_req_new: the request, its CQ, its receive CQ ---- */
	REQUIRE_OK(rpma_conn_cfg_new(&ccfg));
	REQUIRE_OK(rpma_conn_cfg_set_rcq_size(ccfg, 10));
	struct rpma_conn_req *req = SENTINEL;
	EXPECT_NOMEM(0, rpma_conn_req_new(peer, "127.0.0.1", port, ccfg, &req));
	CHECK(req == SENTINEL);
	EXPECT_NOMEM(1, rpma_conn_req_new(peer, "127.0.0.1", port, ccfg, &req));
	CHECK(req == SENTINEL);
	EXPECT_NOMEM(2, rpma_conn_req_new(peer, "127.0.0.1", port, ccfg, &req));
	CHECK(req == SENTINEL);
	REQUIRE_OK(rpma_conn_req_new(peer, "127.0.0.1", port, ccfg, &req));

	/* ---- rpma_conn_req_connect, active side: the request is consumed,
	 * nothing reaches the listener ---- */
	struct rpma_conn *client = SENTINEL;
	EXPECT_NOMEM(0, rpma_conn_req_connect(&req, NULL, &client));
	CHECK(req == NULL && client == SENTINEL);
	struct rpma_conn_req *sreq = SENTINEL;
	int epfd = -1;
	REQUIRE_OK(rpma_ep_get_fd(ep, &epfd));
	struct pollfd pfd = {epfd, POLLIN, 0};
	CHECK(poll(&pfd, 1, 200) == 0); /* no request arrived */

	/* ---- rpma_ep_next_conn_req: the request object, then its CQ, then its
	 * receive CQ; each time the client's request is rejected ---- */
	for (int skip = 0; skip < 3; skip++) {
		client = client_connect(peer, port);
		wait_request(ep);
		sreq = SENTINEL;
		EXPECT_NOMEM(skip, rpma_ep_next_conn_req(ep, ccfg, &sreq));
		CHECK(sreq == SENTINEL);
		expect_rejected(&client);
	}

	/* ---- rpma_conn_req_connect, passive side: the request is consumed
	 * (rejected) ---- */
	client = client_connect(peer, port);
	wait_request(ep);
	REQUIRE_OK(rpma_ep_next_conn_req(ep, ccfg, &sreq));
	struct rpma_conn *server = SENTINEL;
	EXPECT_NOMEM(0, rpma_conn_req_connect(&sreq, NULL, &server));
	CHECK(sreq == NULL && server == SENTINEL);
	expect_rejected(&client);

	/* ---- and with allocations working again: a connection ---- */
	REQUIRE_OK(rpma_conn_req_new(peer, "127.0.0.1", port, ccfg, &req));
	client = SENTINEL;
	REQUIRE_OK(rpma_conn_req_connect(&req, NULL, &client));
	CHECK(client != SENTINEL && client != NULL);
	wait_request(ep);
	sreq = SENTINEL;
	REQUIRE_OK(rpma_ep_next_conn_req(ep, ccfg, &sreq));
	CHECK(sreq != SENTINEL && sreq != NULL);
	server = SENTINEL;
	REQUIRE_OK(rpma_conn_req_connect(&sreq, NULL, &server));
	CHECK(server != SENTINEL && server != NULL);
	enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
	EXPECT_OK(next_event(client, &ev));
	CHECK(ev == RPMA_CONN_ESTABLISHED);
	ev = RPMA_CONN_UNDEFINED;
	EXPECT_OK(next_event(server, &ev));
	CHECK(ev == RPMA_CONN_ESTABLISHED);
	EXPECT_OK(rpma_conn_disconnect(client));
	EXPECT_OK(next_event(client, &ev));
	CHECK(ev == RPMA_CONN_CLOSED);
	EXPECT_OK(next_event(server, &ev));
	CHECK(ev == RPMA_CONN_CLOSED);
	EXPECT_OK(rpma_conn_delete(&client));
	EXPECT_OK(rpma_conn_delete(&server));

	EXPECT_OK(rpma_conn_cfg_delete(&ccfg));
	EXPECT_OK(rpma_ep_shutdown(&ep));
	EXPECT_OK(rpma_peer_delete(&peer));
	return finish("test_nomem");
}
