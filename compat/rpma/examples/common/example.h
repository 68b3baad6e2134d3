/*
 * example.h - small helpers shared by the numbered librpma examples.
 *
 * Each example is a server and a client taking <address> <port> (and, where
 * they write to persistent memory, an optional file path). They use only the
 * librpma API; these helpers keep the connection boilerplate out of the way.
 */
#ifndef RPMA_EXAMPLE_H
#define RPMA_EXAMPLE_H

#include <fcntl.h>
#include <librpma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define EX_CHECK(call)                                                                  \
	do {                                                                            \
		int ret_ = (call);                                                      \
		if (ret_) {                                                             \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,   \
				rpma_err_2str(ret_));                                   \
			exit(1);                                                        \
		}                                                                       \
	} while (0)

#define EX_ASSERT(cond)                                                                 \
	do {                                                                            \
		if (!(cond)) {                                                          \
			fprintf(stderr, "%s:%d: %s does not hold\n", __FILE__, __LINE__, #cond); \
			exit(1);                                                        \
		}                                                                       \
	} while (0)

static inline void ex_usage(int argc, char **argv, int min, const char *extra)
{
	if (argc < min) {
		fprintf(stderr, "usage: %s <address> <port>%s\n", argv[0], extra ? extra : "");
		exit(2);
	}
}

/* A peer on the device that serves addr. */
static inline struct rpma_peer *ex_peer(const char *addr, enum rpma_util_ibv_context_type type)
{
	struct ibv_context *dev;
	struct rpma_peer *peer;
	EX_CHECK(rpma_utils_get_ibv_context(addr, type, &dev));
	EX_CHECK(rpma_peer_new(dev, &peer));
	return peer;
}

/* Listen and tell the test driver the server is up. */
static inline struct rpma_ep *ex_listen(struct rpma_peer *peer, const char *addr, const char *port)
{
	struct rpma_ep *ep;
	EX_CHECK(rpma_ep_listen(peer, addr, port, &ep));
	printf("server listening on %s:%s\n", addr, port);
	fflush(stdout);
	return ep;
}

static inline void ex_expect_event(struct rpma_conn *conn, enum rpma_conn_event want)
{
	enum rpma_conn_event ev;
	EX_CHECK(rpma_conn_next_event(conn, &ev));
	if (ev != want) {
		fprintf(stderr, "got '%s' while waiting for '%s'\n", rpma_utils_conn_event_2str(ev),
			rpma_utils_conn_event_2str(want));
		exit(1);
	}
}

/* Accept the next request with pdata; wait until established. */
static inline struct rpma_conn *ex_accept(struct rpma_ep *ep, const struct rpma_conn_cfg *cfg,
		const void *pdata, size_t len)
{
	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	EX_CHECK(rpma_ep_next_conn_req(ep, cfg, &req));
	struct rpma_conn_private_data pd = {(void *)pdata, (uint8_t)len};
	EX_CHECK(rpma_conn_req_connect(&req, len ? &pd : NULL, &conn));
	ex_expect_event(conn, RPMA_CONN_ESTABLISHED);
	return conn;
}

/* Connect to a server; wait until established. */
static inline struct rpma_conn *ex_connect(struct rpma_peer *peer, const char *addr, const char *port,
		const struct rpma_conn_cfg *cfg, const void *pdata, size_t len)
{
	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	EX_CHECK(rpma_conn_req_new(peer, addr, port, cfg, &req));
	struct rpma_conn_private_data pd = {(void *)pdata, (uint8_t)len};
	EX_CHECK(rpma_conn_req_connect(&req, len ? &pd : NULL, &conn));
	ex_expect_event(conn, RPMA_CONN_ESTABLISHED);
	return conn;
}

/* Client side: disconnect, wait for CLOSED, delete. */
static inline void ex_disconnect(struct rpma_conn **conn)
{
	EX_CHECK(rpma_conn_disconnect(*conn));
	ex_expect_event(*conn, RPMA_CONN_CLOSED);
	EX_CHECK(rpma_conn_delete(conn));
}

/* Server side: wait until the client closes, then delete. */
static inline void ex_wait_closed(struct rpma_conn **conn)
{
	ex_expect_event(*conn, RPMA_CONN_CLOSED);
	EX_CHECK(rpma_conn_delete(conn));
}

/* Wait for the next completion on cq; it must have succeeded. */
static inline void ex_wait_wc(struct rpma_cq *cq, struct ibv_wc *wc)
{
	for (;;) {
		int ret = rpma_cq_get_wc(cq, 1, wc, NULL);
		if (ret == RPMA_E_NO_COMPLETION) {
			EX_CHECK(rpma_cq_wait(cq));
			continue;
		}
		EX_CHECK(ret);
		if (wc->status != IBV_WC_SUCCESS) {
			fprintf(stderr, "completion failed: status %d\n", (int)wc->status);
			exit(1);
		}
		return;
	}
}

/* The remote region whose descriptor starts pdata. */
static inline struct rpma_mr_remote *ex_remote(const void *desc, size_t len)
{
	struct rpma_mr_remote *mr;
	EX_CHECK(rpma_mr_remote_from_descriptor(desc, len, &mr));
	return mr;
}

/* Memory to register: a shared mapping of `path` (persistent) when a path is
 * given, else page-aligned volatile memory. */
struct ex_mem {
	char *ptr;
	size_t size;
	int is_file;
};

static inline struct ex_mem ex_mem_get(const char *path, size_t size)
{
	struct ex_mem m = {NULL, size, 0};
	if (path) {
		int fd = open(path, O_RDWR | O_CREAT, 0600);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) != 0 || ((size_t)st.st_size < size && ftruncate(fd, (off_t)size) != 0)) {
			perror(path);
			exit(1);
		}
		m.ptr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
		if (m.ptr == MAP_FAILED) {
			perror("mmap");
			exit(1);
		}
		m.is_file = 1;
	} else {
		m.ptr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		EX_ASSERT(m.ptr != MAP_FAILED);
	}
	return m;
}

static inline void ex_mem_put(struct ex_mem *m)
{
	munmap(m->ptr, m->size);
}

#endif
