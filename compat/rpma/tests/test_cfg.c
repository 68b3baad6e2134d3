/* test_cfg.c - rpma_peer_cfg_*, rpma_conn_cfg_*, rpma_srq_cfg_* */
#include "common.h"

int main(void)
{
	check_loaded_library();

	/* ---- peer configuration ---- */
	struct rpma_peer_cfg *pc = NULL, *pc2 = NULL;
	bool b = true;
	EXPECT_RC(rpma_peer_cfg_new(NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_peer_cfg_new(&pc));
	EXPECT_OK(rpma_peer_cfg_get_direct_write_to_pmem(pc, &b));
	CHECK(b == false);
	EXPECT_RC(rpma_peer_cfg_set_direct_write_to_pmem(NULL, true), RPMA_E_INVAL);
	EXPECT_RC(rpma_peer_cfg_get_direct_write_to_pmem(NULL, &b), RPMA_E_INVAL);
	EXPECT_RC(rpma_peer_cfg_get_direct_write_to_pmem(pc, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_peer_cfg_set_direct_write_to_pmem(pc, true));
	EXPECT_OK(rpma_peer_cfg_get_direct_write_to_pmem(pc, &b));
	CHECK(b == true);
	size_t ds = 0;
	EXPECT_RC(rpma_peer_cfg_get_descriptor_size(NULL, &ds), RPMA_E_INVAL);
	EXPECT_RC(rpma_peer_cfg_get_descriptor_size(pc, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_peer_cfg_get_descriptor_size(pc, &ds));
	CHECK(ds == 1);
	unsigned char desc[8] = {0xee};
	EXPECT_RC(rpma_peer_cfg_get_descriptor(NULL, desc), RPMA_E_INVAL);
	EXPECT_RC(rpma_peer_cfg_get_descriptor(pc, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_peer_cfg_get_descriptor(pc, desc));
	CHECK(desc[0] == 1);
	EXPECT_RC(rpma_peer_cfg_from_descriptor(NULL, ds, &pc2), RPMA_E_INVAL);
	EXPECT_RC(rpma_peer_cfg_from_descriptor(desc, ds, NULL), RPMA_E_INVAL);
	CHECK(pc2 == NULL);
	EXPECT_OK(rpma_peer_cfg_from_descriptor(desc, ds, &pc2));
	b = false;
	EXPECT_OK(rpma_peer_cfg_get_direct_write_to_pmem(pc2, &b));
	CHECK(b == true);
	EXPECT_RC(rpma_peer_cfg_delete(NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_peer_cfg_delete(&pc2));
	CHECK(pc2 == NULL);
	EXPECT_OK(rpma_peer_cfg_delete(&pc2)); /* deleting NULL is fine */
	EXPECT_OK(rpma_peer_cfg_delete(&pc));

	/* ---- connection configuration ---- */
	struct rpma_conn_cfg *cc = NULL;
	EXPECT_RC(rpma_conn_cfg_new(NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_conn_cfg_new(&cc));
	int t = 0;
	uint32_t v = 99;
	bool shared = true;
	struct rpma_srq *srq = (struct rpma_srq *)&v;
	/* documented defaults */
	EXPECT_OK(rpma_conn_cfg_get_timeout(cc, &t));
	CHECK(t == RPMA_DEFAULT_TIMEOUT_MS);
	EXPECT_OK(rpma_conn_cfg_get_cq_size(cc, &v));
	CHECK(v == 10);
	EXPECT_OK(rpma_conn_cfg_get_rcq_size(cc, &v));
	CHECK(v == 0);
	EXPECT_OK(rpma_conn_cfg_get_sq_size(cc, &v));
	CHECK(v == 10);
	EXPECT_OK(rpma_conn_cfg_get_rq_size(cc, &v));
	CHECK(v == 10);
	EXPECT_OK(rpma_conn_cfg_get_compl_channel(cc, &shared));
	CHECK(shared == false);
	EXPECT_OK(rpma_conn_cfg_get_srq(cc, &srq));
	CHECK(srq == NULL);
	/* RPMA_E_INVAL */
	EXPECT_RC(rpma_conn_cfg_set_timeout(NULL, 5), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_cfg_set_timeout(cc, -1), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_cfg_get_timeout(NULL, &t), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_cfg_get_timeout(cc, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_cfg_set_cq_size(NULL, 5), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_cfg_get_cq_size(NULL, &v), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_cfg_get_cq_size(cc, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_cfg_set_rcq_size(NULL, 5), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_cfg_get_rcq_size(NULL, &v), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_cfg_get_rcq_size(cc, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_cfg_set_sq_size(NULL, 5), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_cfg_get_sq_size(NULL, &v), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_cfg_get_sq_size(cc, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_cfg_set_rq_size(NULL, 5), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_cfg_get_rq_size(NULL, &v), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_cfg_get_rq_size(cc, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_cfg_set_compl_channel(NULL, true), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_cfg_get_compl_channel(NULL, &shared), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_cfg_get_compl_channel(cc, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_cfg_set_srq(NULL, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_cfg_get_srq(NULL, &srq), RPMA_E_INVAL);
	EXPECT_RC(rpma_conn_cfg_get_srq(cc, NULL), RPMA_E_INVAL);
	/* set and get back */
	EXPECT_OK(rpma_conn_cfg_set_timeout(cc, 250));
	EXPECT_OK(rpma_conn_cfg_get_timeout(cc, &t));
	CHECK(t == 250);
	EXPECT_OK(rpma_conn_cfg_set_cq_size(cc, 21));
	EXPECT_OK(rpma_conn_cfg_get_cq_size(cc, &v));
	CHECK(v == 21);
	EXPECT_OK(rpma_conn_cfg_set_rcq_size(cc, 22));
	EXPECT_OK(rpma_conn_cfg_get_rcq_size(cc, &v));
	CHECK(v == 22);
	EXPECT_OK(rpma_conn_cfg_set_sq_size(cc, 23));
	EXPECT_OK(rpma_conn_cfg_get_sq_size(cc, &v));
	CHECK(v == 23);
	EXPECT_OK(rpma_conn_cfg_set_rq_size(cc, 24));
	EXPECT_OK(rpma_conn_cfg_get_rq_size(cc, &v));
	CHECK(v == 24);
	EXPECT_OK(rpma_conn_cfg_set_compl_channel(cc, true));
	EXPECT_OK(rpma_conn_cfg_get_compl_channel(cc, &shared));
	CHECK(shared == true);
	EXPECT_RC(rpma_conn_cfg_delete(NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_conn_cfg_delete(&cc));
	CHECK(cc == NULL);

	/* ---- shared RQ configuration ---- */
	struct rpma_srq_cfg *sc = NULL;
	EXPECT_RC(rpma_srq_cfg_new(NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_srq_cfg_new(&sc));
	EXPECT_OK(rpma_srq_cfg_get_rq_size(sc, &v));
	CHECK(v == 100);
	EXPECT_OK(rpma_srq_cfg_get_rcq_size(sc, &v));
	CHECK(v == 100);
	EXPECT_RC(rpma_srq_cfg_set_rq_size(NULL, 5), RPMA_E_INVAL);
	EXPECT_RC(rpma_srq_cfg_get_rq_size(NULL, &v), RPMA_E_INVAL);
	EXPECT_RC(rpma_srq_cfg_get_rq_size(sc, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_srq_cfg_set_rcq_size(NULL, 5), RPMA_E_INVAL);
	EXPECT_RC(rpma_srq_cfg_get_rcq_size(NULL, &v), RPMA_E_INVAL);
	EXPECT_RC(rpma_srq_cfg_get_rcq_size(sc, NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_srq_cfg_set_rq_size(sc, 7));
	EXPECT_OK(rpma_srq_cfg_get_rq_size(sc, &v));
	CHECK(v == 7);
	EXPECT_OK(rpma_srq_cfg_set_rcq_size(sc, 0));
	EXPECT_OK(rpma_srq_cfg_get_rcq_size(sc, &v));
	CHECK(v == 0);
	EXPECT_RC(rpma_srq_cfg_delete(NULL), RPMA_E_INVAL);
	EXPECT_OK(rpma_srq_cfg_delete(&sc));
	CHECK(sc == NULL);
	return finish("test_cfg");
}
