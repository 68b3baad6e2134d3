/* 04-multiple-connections/server.c - serve several clients from one thread,
 * driven by epoll over the endpoint's and the connections' descriptors. */
#include <sys/epoll.h>
#include "example.h"

#define CLIENTS 3
#define SLOT 64

static void nonblocking(int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

int main(int argc, char **argv)
{
	ex_usage(argc, argv, 3, NULL);
	struct rpma_peer *peer = ex_peer(argv[1], RPMA_UTIL_IBV_CONTEXT_LOCAL);
	struct ex_mem mem = ex_mem_get(NULL, CLIENTS * SLOT);
	memset(mem.ptr, 0, CLIENTS * SLOT);
	struct rpma_mr_local *mr;
	EX_CHECK(rpma_mr_reg(peer, mem.ptr, CLIENTS * SLOT,
		RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY, &mr));
	unsigned char pdata[255];
	size_t mlen;
	EX_CHECK(rpma_mr_get_descriptor_size(mr, &mlen));
	EX_CHECK(rpma_mr_get_descriptor(mr, pdata));

	struct rpma_ep *ep = ex_listen(peer, argv[1], argv[2]);
	int epfd = epoll_create1(0), fd;
	EX_ASSERT(epfd >= 0);
	EX_CHECK(rpma_ep_get_fd(ep, &fd));
	nonblocking(fd);
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL}; /* NULL: the endpoint */
	EX_ASSERT(epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0);

	struct rpma_conn *conns[CLIENTS] = {0};
	int accepted = 0, closed = 0;
	while (closed < CLIENTS) {
		struct epoll_event got;
		int n = epoll_wait(epfd, &got, 1, 10000);
		EX_ASSERT(n == 1);
		if (got.data.ptr == NULL) { /* connection requests */
			struct rpma_conn_req *req;
			int ret;
			while ((ret = rpma_ep_next_conn_req(ep, NULL, &req)) == 0) {
				EX_ASSERT(accepted < CLIENTS);
				int slot = accepted++;
				pdata[mlen] = (unsigned char)slot; /* which slot is the client's */
				struct rpma_conn_private_data pd = {pdata, (uint8_t)(mlen + 1)};
				EX_CHECK(rpma_conn_req_connect(&req, &pd, &conns[slot]));
				EX_CHECK(rpma_conn_get_event_fd(conns[slot], &fd));
				nonblocking(fd);
				struct epoll_event cev = {.events = EPOLLIN, .data.ptr = &conns[slot]};
				EX_ASSERT(epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &cev) == 0);
			}
			EX_ASSERT(ret == RPMA_E_NO_EVENT);
			continue;
		}
		struct rpma_conn **cp = got.data.ptr;
		int slot = (int)(cp - conns);
		enum rpma_conn_event e;
		int ret;
		while ((ret = rpma_conn_next_event(*cp, &e)) == 0) {
			printf("connection %d: %s\n", slot, rpma_utils_conn_event_2str(e));
			if (e == RPMA_CONN_CLOSED || e == RPMA_CONN_LOST) {
				printf("slot %d holds: %s\n", slot, mem.ptr + slot * SLOT);
				EX_ASSERT(strncmp(mem.ptr + slot * SLOT, "client", 6) == 0);
				EX_CHECK(rpma_conn_get_event_fd(*cp, &fd));
				epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
				EX_CHECK(rpma_conn_delete(cp));
				closed++;
				break;
			}
		}
		EX_ASSERT(ret == 0 || ret == RPMA_E_NO_EVENT);
	}
	close(epfd);
	EX_CHECK(rpma_ep_shutdown(&ep));
	EX_CHECK(rpma_mr_dereg(&mr));
	ex_mem_put(&mem);
	EX_CHECK(rpma_peer_delete(&peer));
	printf("served %d connections\n", CLIENTS);
	return 0;
}
