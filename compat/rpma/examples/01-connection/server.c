/* 01-connection/server.c - accept one connection, exchange private data. */
#include "example.h"

int main(int argc, char **argv)
{
	ex_usage(argc, argv, 3, NULL);
	struct rpma_peer *peer = ex_peer(argv[1], RPMA_UTIL_IBV_CONTEXT_LOCAL);
	struct rpma_ep *ep = ex_listen(peer, argv[1], argv[2]);

	struct rpma_conn_req *req;
	EX_CHECK(rpma_ep_next_conn_req(ep, NULL, &req));
	struct rpma_conn_private_data in;
	EX_CHECK(rpma_conn_req_get_private_data(req, &in));
	printf("client says: %.*s\n", in.len, (char *)in.ptr);
	EX_ASSERT(in.len > 0 && strncmp(in.ptr, "hello server", in.len) == 0);

	static char reply[] = "hello client";
	struct rpma_conn_private_data out = {reply, sizeof(reply)};
	struct rpma_conn *conn;
	EX_CHECK(rpma_conn_req_connect(&req, &out, &conn));
	ex_expect_event(conn, RPMA_CONN_ESTABLISHED);
	printf("connection established\n");

	ex_wait_closed(&conn);
	printf("connection closed\n");
	EX_CHECK(rpma_ep_shutdown(&ep));
	EX_CHECK(rpma_peer_delete(&peer));
	return 0;
}
