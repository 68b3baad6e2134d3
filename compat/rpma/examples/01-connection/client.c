/* 01-connection/client.c - connect with private data, read the server's. */
#include "example.h"

int main(int argc, char **argv)
{
	ex_usage(argc, argv, 3, NULL);
	struct rpma_peer *peer = ex_peer(argv[1], RPMA_UTIL_IBV_CONTEXT_REMOTE);
	static char hello[] = "hello server";
	struct rpma_conn *conn = ex_connect(peer, argv[1], argv[2], NULL, hello, sizeof(hello));

	struct rpma_conn_private_data in;
	EX_CHECK(rpma_conn_get_private_data(conn, &in));
	printf("server says: %.*s\n", in.len, (char *)in.ptr);
	EX_ASSERT(in.len > 0 && strncmp(in.ptr, "hello client", in.len) == 0);

	ex_disconnect(&conn);
	EX_CHECK(rpma_peer_delete(&peer));
	printf("done\n");
	return 0;
}
