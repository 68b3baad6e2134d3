/* test_peer_mr.c - rpma_peer_*, rpma_mr_* */
#include <sys/mman.h>
#include "common.h"

int main(void)
{
	check_loaded_library();
	struct ibv_context *ctx;
	struct rpma_peer *peer = NULL;
	REQUIRE_OK(rpma_utils_get_ibv_context("127.0.0.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx));

	/* ---- peer ---- */
	EXPECT_RC(rpma_peer_new(NULL, &peer), RPMA_E_INVAL);
	EXPECT_RC(rpma_peer_new(ctx, NULL), RPMA_E_INVAL);
	struct ibv_context foreign;
	memset(&foreign, 0, sizeof(foreign));
	EXPECT_RC(rpma_peer_new(&foreign, &peer), RPMA_E_PROVIDER);
	CHECK(peer == NULL);
	EXPECT_RC(rpma_peer_delete(NULL), RPMA_E_INVAL);
	REQUIRE_OK(rpma_peer_new(ctx, &peer));

	/* ---- registration ---- */
	size_t size = 2 * 4096;
	char *buf = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(buf != MAP_FAILED);
	struct rpma_mr_local *mr = NULL;
	EXPECT_RC(rpma_mr_reg(NULL, buf, size, RPMA_MR_USAGE_READ_SRC, &mr), RPMA_E_INVAL);
	EXPECT_RC(rpma_mr_reg(peer, NULL, size, RPMA_MR_USAGE_READ_SRC, &mr), RPMA_E_INVAL);
	EXPECT_RC(rpma_mr_reg(peer, buf, 0, RPMA_MR_USAGE_READ_SRC, &mr), RPMA_E_INVAL);
	EXPECT_RC(rpma_mr_reg(peer, buf, size, RPMA_MR_USAGE_READ_SRC, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_mr_reg(peer, buf, size, 0, &mr), RPMA_E_INVAL);
	CHECK(mr == NULL);
	/* ranges ibv_reg_mr refuses: wrapping around, or with a page not mapped */
	EXPECT_RC(rpma_mr_reg(peer, (void *)(UINTPTR_MAX - 4095), 8192, RPMA_MR_USAGE_READ_SRC, &mr),
		RPMA_E_PROVIDER);
	/*
	 * Another thread of the process (the zone's agent, a sanitizer's
	 * allocator) may map a page of its own into the hole before the
	 * registration looks: then the range is mapped, and the attempt is
	 * made again with a new hole (bounded).
	 */
	for (int attempt = 0;; ++attempt) {
		char *holed = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		REQUIRE(holed != MAP_FAILED);
		REQUIRE(munmap(holed + 4096, 4096) == 0);
		int rc = rpma_mr_reg(peer, holed, 3 * 4096, RPMA_MR_USAGE_WRITE_DST, &mr);
		int refilled = msync(holed + 4096, 4096, MS_ASYNC) == 0;
		if (rc == 0)
			REQUIRE(rpma_mr_dereg(&mr) == 0);
		munmap(holed, 4096);
		munmap(holed + 2 * 4096, 4096);
		if (rc == 0 && refilled && attempt < 20)
			continue;
		EXPECT_RC(rc, RPMA_E_PROVIDER);
		CHECK(mr == NULL);
		break;
	}
	REQUIRE_OK(rpma_mr_reg(peer, buf, size,
		RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT, &mr));

	void *p = NULL;
	size_t s = 0;
	EXPECT_RC(rpma_mr_get_ptr(NULL, &p), RPMA_E_INVAL);
	EXPECT_RC(rpma_mr_get_ptr(mr, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_mr_get_ptr(mr, &p));
	CHECK(p == buf);
	EXPECT_RC(rpma_mr_get_size(NULL, &s), RPMA_E_INVAL);
	EXPECT_RC(rpma_mr_get_size(mr, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_mr_get_size(mr, &s));
	CHECK(s == size);

	/* ---- descriptors ---- */
	size_t ds = 0;
	EXPECT_RC(rpma_mr_get_descriptor_size(NULL, &ds), RPMA_E_INVAL);
	EXPECT_RC(rpma_mr_get_descriptor_size(mr, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_mr_get_descriptor_size(mr, &ds));
	CHECK(ds == 21); /* librpma's size: real programs reserve 24 bytes for it and the peer's */
	unsigned char desc[256];
	EXPECT_RC(rpma_mr_get_descriptor(NULL, desc), RPMA_E_INVAL);
	EXPECT_RC(rpma_mr_get_descriptor(mr, NULL), RPMA_E_INVAL);
	memset(desc, 0xa5, sizeof(desc));
	EXPECT_OK(rpma_mr_get_descriptor(mr, desc));
	CHECK(desc[ds] == 0xa5); /* nothing written past the size */
	/* librpma's encoding: address, length, key little-endian, then the usage byte */
	uint64_t le_addr = 0, le_len = 0;
	for (int i = 7; i >= 0; --i) {
		le_addr = (le_addr << 8) | desc[i];
		le_len = (le_len << 8) | desc[8 + i];
	}
	CHECK(le_addr == (uint64_t)(uintptr_t)buf);
	CHECK(le_len == size);
	CHECK(desc[20] == (RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT));
	struct rpma_mr_remote *rmr = NULL;
	EXPECT_RC(rpma_mr_remote_from_descriptor(NULL, ds, &rmr), RPMA_E_INVAL);
	EXPECT_RC(rpma_mr_remote_from_descriptor(desc, ds, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_mr_remote_from_descriptor(desc, ds - 1, &rmr), RPMA_E_INVAL);
	EXPECT_RC(rpma_mr_remote_from_descriptor(desc, 0, &rmr), RPMA_E_INVAL);
	unsigned char bad[256];
	memcpy(bad, desc, ds);
	bad[20] = 0; /* no usage */
	EXPECT_RC(rpma_mr_remote_from_descriptor(bad, ds, &rmr), RPMA_E_INVAL);
	CHECK(rmr == NULL);
	/* as librpma: longer buffers are accepted, the bytes past 21 ignored */
	EXPECT_OK(rpma_mr_remote_from_descriptor(desc, ds + 3, &rmr));
	s = 0;
	EXPECT_OK(rpma_mr_remote_get_size(rmr, &s));
	CHECK(s == size);
	EXPECT_OK(rpma_mr_remote_delete(&rmr));
	/* any non-zero usage is taken as the peer's word, checked by the target on use */
	memcpy(bad, desc, ds);
	bad[20] = RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT;
	EXPECT_OK(rpma_mr_remote_from_descriptor(bad, ds, &rmr));
	int bft = 0;
	EXPECT_OK(rpma_mr_remote_get_flush_type(rmr, &bft));
	CHECK(bft == RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT);
	EXPECT_OK(rpma_mr_remote_delete(&rmr));
	EXPECT_OK(rpma_mr_remote_from_descriptor(desc, ds, &rmr));
	EXPECT_RC(rpma_mr_remote_get_size(NULL, &s), RPMA_E_INVAL);
	EXPECT_RC(rpma_mr_remote_get_size(rmr, NULL), RPMA_E_INVAL);
	s = 0;
	EXPECT_OK(rpma_mr_remote_get_size(rmr, &s));
	CHECK(s == size);
	int ft = -1;
	EXPECT_RC(rpma_mr_remote_get_flush_type(NULL, &ft), RPMA_E_INVAL);
	EXPECT_RC(rpma_mr_remote_get_flush_type(rmr, NULL), RPMA_E_INVAL);
	CHECK(ft == -1);
	EXPECT_OK(rpma_mr_remote_get_flush_type(rmr, &ft));
	CHECK(ft == RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT);
	EXPECT_RC(rpma_mr_remote_delete(NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_mr_remote_delete(&rmr));
	CHECK(rmr == NULL);

	/* a region with no remote usage has a descriptor too */
	struct rpma_mr_local *smr = NULL;
	REQUIRE_OK(rpma_mr_reg(peer, buf, 64, RPMA_MR_USAGE_SEND, &smr));
	EXPECT_OK(rpma_mr_get_descriptor(smr, desc));
	EXPECT_OK(rpma_mr_remote_from_descriptor(desc, ds, &rmr));
	EXPECT_OK(rpma_mr_remote_get_flush_type(rmr, &ft));
	CHECK(ft == 0);
	EXPECT_OK(rpma_mr_remote_delete(&rmr));

	/* ---- advise ---- */
	EXPECT_RC(rpma_mr_advise(NULL, 0, 16, IBV_ADVISE_MR_ADVICE_PREFETCH, 0), RPMA_E_INVAL);
	EXPECT_RC(rpma_mr_advise(mr, size, 1, IBV_ADVISE_MR_ADVICE_PREFETCH, 0), RPMA_E_INVAL);
	EXPECT_RC(rpma_mr_advise(mr, 1, size, IBV_ADVISE_MR_ADVICE_PREFETCH, 0), RPMA_E_INVAL);
	EXPECT_RC(rpma_mr_advise(mr, 0, 16, 77, 0), RPMA_E_INVAL);
	EXPECT_RC(rpma_mr_advise(mr, 0, 16, IBV_ADVISE_MR_ADVICE_PREFETCH, 0x80), RPMA_E_INVAL);
	/* a send source cannot be prefetched for writing */
	EXPECT_RC(rpma_mr_advise(smr, 0, 16, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0), RPMA_E_INVAL);
	int rc = rpma_mr_advise(mr, 0, size, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH);
	CHECK(rc == 0 || rc == RPMA_E_NOSUPP);
	rc = rpma_mr_advise(mr, 100, 200, IBV_ADVISE_MR_ADVICE_PREFETCH, 0);
	CHECK(rc == 0 || rc == RPMA_E_NOSUPP);
	EXPECT_OK(rpma_mr_advise(mr, 0, 16, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0));

	/* ---- deregistration ---- */
	EXPECT_RC(rpma_mr_dereg(NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_mr_dereg(&smr));
	EXPECT_OK(rpma_mr_dereg(&mr));
	CHECK(mr == NULL);
	EXPECT_OK(rpma_peer_delete(&peer));
	CHECK(peer == NULL);
	EXPECT_OK(rpma_peer_delete(&peer));
	munmap(buf, size);
	return finish("test_peer_mr");
}
