/*
 * common.h - helpers shared by the librpma compatibility tests (C11).
 *
 * The tests are built twice: against compat/rpma/include/librpma.h and
 * against Debian's /usr/include/librpma.h. Both builds link and run against
 * the librpma.so.0 of this build tree; check_loaded_library() proves it.
 */
#ifndef RPMA_TEST_COMMON_H
#define RPMA_TEST_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <dlfcn.h>
#include <librpma.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Each build must see the header it claims to be built against. */
#if defined(RPMA_VARIANT_OURS) && !defined(REMORA_LIBRPMA_H)
#error "built as 'ours' but librpma.h is not Remora's"
#endif
#if defined(RPMA_VARIANT_DEB) && defined(REMORA_LIBRPMA_H)
#error "built as 'deb' but librpma.h is Remora's"
#endif

static int g_failures;

#define CHECK(cond)                                                                   \
	do {                                                                          \
		if (!(cond)) {                                                        \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__,        \
				__LINE__, #cond);                                     \
			g_failures++;                                                 \
		}                                                                     \
	} while (0)

#define EXPECT_RC(call, want)                                                         \
	do {                                                                          \
		int rc_ = (call);                                                     \
		if (rc_ != (want)) {                                                  \
			fprintf(stderr, "%s:%d: %s returned %d (%s), want %d (%s)\n", \
				__FILE__, __LINE__, #call, rc_, rpma_err_2str(rc_),   \
				(int)(want), rpma_err_2str(want));                    \
			g_failures++;                                                 \
		}                                                                     \
	} while (0)

#define EXPECT_OK(call) EXPECT_RC(call, 0)

/* Fatal: the rest of the test cannot run. */
#define REQUIRE_OK(call)                                                              \
	do {                                                                          \
		int rc_ = (call);                                                     \
		if (rc_ != 0) {                                                       \
			fprintf(stderr, "%s:%d: %s returned %d (%s)\n", __FILE__,     \
				__LINE__, #call, rc_, rpma_err_2str(rc_));            \
			exit(1);                                                      \
		}                                                                     \
	} while (0)

/* Fatal: a condition the rest of the test depends on. */
#define REQUIRE(cond)                                                                 \
	do {                                                                          \
		if (!(cond)) {                                                        \
			fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__,      \
				__LINE__, #cond);                                     \
			exit(1);                                                      \
		}                                                                     \
	} while (0)

static inline int finish(const char *name)
{
	if (g_failures) {
		fprintf(stderr, "%s: %d failure(s)\n", name, g_failures);
		return 1;
	}
	printf("%s: ok\n", name);
	return 0;
}

/* The librpma.so.0 in use must be the one of this build tree. */
static inline void check_loaded_library(void)
{
	Dl_info info;
	memset(&info, 0, sizeof(info));
	/* dlsym gives the address as an object pointer, as dladdr wants it */
	void *sym = dlsym(RTLD_DEFAULT, "rpma_peer_new");
	if (sym == NULL || !dladdr(sym, &info) || info.dli_fname == NULL) {
		fprintf(stderr, "dladdr(rpma_peer_new) failed\n");
		exit(1);
	}
	char real[4096];
	if (realpath(info.dli_fname, real) == NULL)
		snprintf(real, sizeof(real), "%s", info.dli_fname);
	if (strstr(real, RPMA_BUILD_LIB_DIR) != real) {
		fprintf(stderr, "librpma loaded from %s, not from %s\n", real, RPMA_BUILD_LIB_DIR);
		exit(1);
	}
}

/* A TCP port that is free right now, as a string. */
static inline void free_port(char out[8])
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t l = sizeof(a);
	if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) || getsockname(s, (struct sockaddr *)&a, &l)) {
		perror("free_port");
		exit(1);
	}
	snprintf(out, 8, "%u", (unsigned)ntohs(a.sin_port));
	close(s);
}

/* A connected pair inside one process: the Remora agents make progress, so
 * one thread can drive both sides. */
struct pair {
	struct ibv_context *ctx;
	struct rpma_peer *peer;
	struct rpma_ep *ep;
	struct rpma_conn *server;
	struct rpma_conn *client;
	char port[8];
	int owns_peer;
};

typedef void (*before_accept_fn)(struct rpma_conn_req *req, void *arg);

static inline void pair_open_cfg(struct pair *p, struct rpma_peer *peer, const struct rpma_conn_cfg *scfg,
		const struct rpma_conn_cfg *ccfg, const struct rpma_conn_private_data *spd,
		const struct rpma_conn_private_data *cpd, before_accept_fn hook, void *arg)
{
	memset(p, 0, sizeof(*p));
	if (peer) {
		p->peer = peer;
	} else {
		REQUIRE_OK(rpma_utils_get_ibv_context("127.0.0.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &p->ctx));
		REQUIRE_OK(rpma_peer_new(p->ctx, &p->peer));
		p->owns_peer = 1;
	}
	free_port(p->port);
	REQUIRE_OK(rpma_ep_listen(p->peer, "127.0.0.1", p->port, &p->ep));
	struct rpma_conn_req *creq = NULL, *sreq = NULL;
	REQUIRE_OK(rpma_conn_req_new(p->peer, "127.0.0.1", p->port, ccfg, &creq));
	REQUIRE_OK(rpma_conn_req_connect(&creq, cpd, &p->client));
	REQUIRE_OK(rpma_ep_next_conn_req(p->ep, scfg, &sreq));
	if (hook)
		hook(sreq, arg);
	REQUIRE_OK(rpma_conn_req_connect(&sreq, spd, &p->server));
	enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
	REQUIRE_OK(rpma_conn_next_event(p->client, &ev));
	if (ev != RPMA_CONN_ESTABLISHED) {
		fprintf(stderr, "client event %s\n", rpma_utils_conn_event_2str(ev));
		exit(1);
	}
	REQUIRE_OK(rpma_conn_next_event(p->server, &ev));
	if (ev != RPMA_CONN_ESTABLISHED) {
		fprintf(stderr, "server event %s\n", rpma_utils_conn_event_2str(ev));
		exit(1);
	}
}

static inline void pair_open(struct pair *p)
{
	pair_open_cfg(p, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
}

static inline void pair_close(struct pair *p)
{
	enum rpma_conn_event ev;
	if (p->client) {
		(void)rpma_conn_disconnect(p->client);
		(void)rpma_conn_next_event(p->client, &ev);
	}
	if (p->server)
		(void)rpma_conn_next_event(p->server, &ev);
	(void)rpma_conn_delete(&p->client);
	(void)rpma_conn_delete(&p->server);
	(void)rpma_ep_shutdown(&p->ep);
	if (p->owns_peer)
		(void)rpma_peer_delete(&p->peer);
}

/* The remote view of a local region, through its descriptor (what a peer
 * builds from the bytes it was sent). */
static inline struct rpma_mr_remote *remote_of(struct rpma_mr_local *mr)
{
	size_t ds;
	unsigned char desc[256];
	struct rpma_mr_remote *r = NULL;
	REQUIRE_OK(rpma_mr_get_descriptor_size(mr, &ds));
	REQUIRE_OK(rpma_mr_get_descriptor(mr, desc));
	REQUIRE_OK(rpma_mr_remote_from_descriptor(desc, ds, &r));
	return r;
}

/* Wait for one completion on cq (blocking rpma_cq_wait, then get_wc). */
static inline int wait_wc(struct rpma_cq *cq, struct ibv_wc *wc)
{
	for (;;) {
		int rc = rpma_cq_get_wc(cq, 1, wc, NULL);
		if (rc != RPMA_E_NO_COMPLETION)
			return rc;
		rc = rpma_cq_wait(cq);
		if (rc)
			return rc;
	}
}

#endif
