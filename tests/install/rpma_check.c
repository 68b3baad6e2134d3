/* tests/install/rpma_check.c - a librpma program outside the source tree,
 * built against the installed librpma.h and librpma.so.0 of Remora.
 *
 *   rpma_check server ADDRESS PORT   serve a buffer to one client, print
 *                                    "READY", then check what it wrote
 *   rpma_check client ADDRESS PORT   write a pattern into the server's
 *                                    buffer, flush it (visibility), read it
 *                                    back and compare
 *
 * Exit status 0 only if every call succeeded and the data matched. */
#include <librpma.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef REMORA_LIBRPMA_H
#error "built against another librpma.h than Remora's"
#endif

#define SIZE 4096

static void need(int rc, const char *what)
{
	if (rc != 0) {
		fprintf(stderr, "rpma_check: %s: %s\n", what, rpma_err_2str(rc));
		exit(1);
	}
}

static void fill(unsigned char *buf)
{
	for (size_t i = 0; i < SIZE; i++)
		buf[i] = (unsigned char)(i * 13 + 5);
}

/* Wait for the next completion; it must be `op`, successful, for `ctx`. */
static void complete(struct rpma_cq *cq, enum ibv_wc_opcode op, uintptr_t ctx, const char *what)
{
	struct ibv_wc wc;
	int rc;
	while ((rc = rpma_cq_get_wc(cq, 1, &wc, NULL)) == RPMA_E_NO_COMPLETION)
		need(rpma_cq_wait(cq), what);
	need(rc, what);
	if (wc.status != IBV_WC_SUCCESS || wc.opcode != op || wc.wr_id != (uint64_t)ctx) {
		fprintf(stderr, "rpma_check: %s: status %d, opcode %d, vendor_err %u\n", what, (int)wc.status,
			(int)wc.opcode, (unsigned)wc.vendor_err);
		exit(1);
	}
}

static int server(const char *addr, const char *port)
{
	static unsigned char target[SIZE], expected[SIZE];
	struct ibv_context *ibv;
	struct rpma_peer *peer;
	struct rpma_mr_local *mr;
	struct rpma_ep *ep;
	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	enum rpma_conn_event event;
	unsigned char descriptor[64];
	size_t descriptor_size;

	need(rpma_utils_get_ibv_context(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &ibv), "rpma_utils_get_ibv_context");
	need(rpma_peer_new(ibv, &peer), "rpma_peer_new");
	need(rpma_mr_reg(peer, target, SIZE,
			 RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY, &mr),
	     "rpma_mr_reg");
	need(rpma_mr_get_descriptor_size(mr, &descriptor_size), "rpma_mr_get_descriptor_size");
	if (descriptor_size > sizeof(descriptor)) {
		fprintf(stderr, "rpma_check: descriptor of %zu bytes\n", descriptor_size);
		return 1;
	}
	need(rpma_mr_get_descriptor(mr, descriptor), "rpma_mr_get_descriptor");
	need(rpma_ep_listen(peer, addr, port, &ep), "rpma_ep_listen");
	printf("READY\n");
	fflush(stdout);

	need(rpma_ep_next_conn_req(ep, NULL, &req), "rpma_ep_next_conn_req");
	struct rpma_conn_private_data pdata = {descriptor, (uint8_t)descriptor_size};
	need(rpma_conn_req_connect(&req, &pdata, &conn), "rpma_conn_req_connect");
	need(rpma_conn_next_event(conn, &event), "rpma_conn_next_event");
	if (event != RPMA_CONN_ESTABLISHED) {
		fprintf(stderr, "rpma_check: %s instead of established\n", rpma_utils_conn_event_2str(event));
		return 1;
	}
	need(rpma_conn_next_event(conn, &event), "rpma_conn_next_event");
	if (event != RPMA_CONN_CLOSED) {
		fprintf(stderr, "rpma_check: %s instead of closed\n", rpma_utils_conn_event_2str(event));
		return 1;
	}
	fill(expected);
	if (memcmp(target, expected, SIZE) != 0) {
		fprintf(stderr, "rpma_check: the buffer does not hold what the client wrote\n");
		return 1;
	}
	need(rpma_conn_delete(&conn), "rpma_conn_delete");
	need(rpma_ep_shutdown(&ep), "rpma_ep_shutdown");
	need(rpma_mr_dereg(&mr), "rpma_mr_dereg");
	need(rpma_peer_delete(&peer), "rpma_peer_delete");
	printf("server: the client's %d bytes arrived\n", SIZE);
	return 0;
}

static int client(const char *addr, const char *port)
{
	static unsigned char source[SIZE], readback[SIZE];
	struct ibv_context *ibv;
	struct rpma_peer *peer;
	struct rpma_mr_local *src_mr, *dst_mr;
	struct rpma_mr_remote *remote;
	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	struct rpma_conn_private_data pdata;
	struct rpma_cq *cq;
	enum rpma_conn_event event;
	size_t remote_size;

	fill(source);
	need(rpma_utils_get_ibv_context(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE, &ibv), "rpma_utils_get_ibv_context");
	need(rpma_peer_new(ibv, &peer), "rpma_peer_new");
	need(rpma_mr_reg(peer, source, SIZE, RPMA_MR_USAGE_WRITE_SRC, &src_mr), "rpma_mr_reg (source)");
	need(rpma_mr_reg(peer, readback, SIZE, RPMA_MR_USAGE_READ_DST, &dst_mr), "rpma_mr_reg (readback)");
	need(rpma_conn_req_new(peer, addr, port, NULL, &req), "rpma_conn_req_new");
	need(rpma_conn_req_connect(&req, NULL, &conn), "rpma_conn_req_connect");
	need(rpma_conn_next_event(conn, &event), "rpma_conn_next_event");
	if (event != RPMA_CONN_ESTABLISHED) {
		fprintf(stderr, "rpma_check: %s instead of established\n", rpma_utils_conn_event_2str(event));
		return 1;
	}
	need(rpma_conn_get_private_data(conn, &pdata), "rpma_conn_get_private_data");
	need(rpma_mr_remote_from_descriptor(pdata.ptr, pdata.len, &remote), "rpma_mr_remote_from_descriptor");
	need(rpma_mr_remote_get_size(remote, &remote_size), "rpma_mr_remote_get_size");
	if (remote_size < SIZE) {
		fprintf(stderr, "rpma_check: the server's buffer has %zu bytes\n", remote_size);
		return 1;
	}
	need(rpma_conn_get_cq(conn, &cq), "rpma_conn_get_cq");

	need(rpma_write(conn, remote, 0, src_mr, 0, SIZE, RPMA_F_COMPLETION_ALWAYS, (void *)1), "rpma_write");
	complete(cq, IBV_WC_RDMA_WRITE, 1, "write");
	need(rpma_flush(conn, remote, 0, SIZE, RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS, (void *)2),
	     "rpma_flush");
	complete(cq, IBV_WC_RDMA_READ, 2, "flush");
	need(rpma_read(conn, dst_mr, 0, remote, 0, SIZE, RPMA_F_COMPLETION_ALWAYS, (void *)3), "rpma_read");
	complete(cq, IBV_WC_RDMA_READ, 3, "read");
	if (memcmp(source, readback, SIZE) != 0) {
		fprintf(stderr, "rpma_check: read back something else than what was written\n");
		return 1;
	}

	need(rpma_conn_disconnect(conn), "rpma_conn_disconnect");
	need(rpma_conn_next_event(conn, &event), "rpma_conn_next_event");
	need(rpma_conn_delete(&conn), "rpma_conn_delete");
	need(rpma_mr_remote_delete(&remote), "rpma_mr_remote_delete");
	need(rpma_mr_dereg(&src_mr), "rpma_mr_dereg");
	need(rpma_mr_dereg(&dst_mr), "rpma_mr_dereg");
	need(rpma_peer_delete(&peer), "rpma_peer_delete");
	printf("client: wrote, flushed and read back %d bytes\n", SIZE);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "server") == 0)
		return server(argv[2], argv[3]);
	if (argc == 4 && strcmp(argv[1], "client") == 0)
		return client(argv[2], argv[3]);
	fprintf(stderr, "usage: rpma_check server|client ADDRESS PORT\n");
	return 2;
}
