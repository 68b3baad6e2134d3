/* pmem_server.c - target of the persistent-flush test.
 * usage: pmem_server <address> <port> <file>
 * Maps <file> (MAP_SHARED), registers it for writes and persistent flushes,
 * announces direct write to pmem and then serves until it is killed. */
#include <fcntl.h>
#include <sys/mman.h>
#include "common.h"

#define SZ (64 * 1024)

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: %s <address> <port> <file>\n", argv[0]);
		return 2;
	}
	check_loaded_library();
	alarm(60); /* a test server never outlives its test, whatever the driver does */
	int fd = open(argv[3], O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || ftruncate(fd, SZ) != 0) {
		perror(argv[3]);
		return 1;
	}
	char *mem = mmap(NULL, SZ, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (mem == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	struct ibv_context *ctx;
	struct rpma_peer *peer;
	struct rpma_ep *ep;
	struct rpma_mr_local *mr;
	REQUIRE_OK(rpma_utils_get_ibv_context(argv[1], RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx));
	REQUIRE_OK(rpma_peer_new(ctx, &peer));
	REQUIRE_OK(rpma_mr_reg(peer, mem, SZ, RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT, &mr));
	struct rpma_peer_cfg *pcfg;
	REQUIRE_OK(rpma_peer_cfg_new(&pcfg));
	REQUIRE_OK(rpma_peer_cfg_set_direct_write_to_pmem(pcfg, true));
	/*
	 * Private data as real programs lay it out: two size bytes, then both
	 * descriptors in 24 bytes, 26 bytes in all (rdma_connect on a TCP port
	 * space carries at most 28).
	 */
	struct {
		uint8_t mr_size;
		uint8_t pcfg_size;
		unsigned char descs[24];
	} pdata;
	_Static_assert(sizeof(pdata) <= 28, "fits rdma_cm's TCP private data");
	size_t mds, pds;
	REQUIRE_OK(rpma_mr_get_descriptor_size(mr, &mds));
	REQUIRE_OK(rpma_peer_cfg_get_descriptor_size(pcfg, &pds));
	REQUIRE(mds + pds <= sizeof(pdata.descs));
	pdata.mr_size = (uint8_t)mds;
	pdata.pcfg_size = (uint8_t)pds;
	REQUIRE_OK(rpma_mr_get_descriptor(mr, pdata.descs));
	REQUIRE_OK(rpma_peer_cfg_get_descriptor(pcfg, pdata.descs + mds));
	struct rpma_conn_private_data pd = {&pdata, (uint8_t)sizeof(pdata)};
	REQUIRE_OK(rpma_ep_listen(peer, argv[1], argv[2], &ep));
	printf("READY\n");
	fflush(stdout);
	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	REQUIRE_OK(rpma_ep_next_conn_req(ep, NULL, &req));
	REQUIRE_OK(rpma_conn_req_connect(&req, &pd, &conn));
	enum rpma_conn_event ev;
	REQUIRE_OK(rpma_conn_next_event(conn, &ev));
	printf("server: %s\n", rpma_utils_conn_event_2str(ev));
	fflush(stdout);
	/* The agent serves the client; this process makes no more calls. */
	for (;;)
		pause();
}
