/* test_utils.c - rpma_utils_*, rpma_err_2str, rpma_utils_conn_event_2str */
#include "common.h"

int main(void)
{
	check_loaded_library();
	struct ibv_context *ctx = NULL, *ctx2 = NULL;

	/* rpma_utils_get_ibv_context: RPMA_E_INVAL */
	EXPECT_RC(rpma_utils_get_ibv_context(NULL, RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx), RPMA_E_INVAL);
	EXPECT_RC(rpma_utils_get_ibv_context("127.0.0.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_utils_get_ibv_context("127.0.0.1", (enum rpma_util_ibv_context_type)7, &ctx), RPMA_E_INVAL);
	CHECK(ctx == NULL);
	/* RPMA_E_PROVIDER: unresolvable, or not an address of this host */
	EXPECT_RC(rpma_utils_get_ibv_context("no-such-host.invalid", RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx), RPMA_E_PROVIDER);
	EXPECT_RC(rpma_utils_get_ibv_context("192.0.2.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx), RPMA_E_PROVIDER);
	CHECK(ctx == NULL);
	/* success, one context per address */
	EXPECT_OK(rpma_utils_get_ibv_context("127.0.0.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx));
	EXPECT_OK(rpma_utils_get_ibv_context("127.0.0.1", RPMA_UTIL_IBV_CONTEXT_REMOTE, &ctx2));
	CHECK(ctx != NULL && ctx == ctx2);
	EXPECT_OK(rpma_utils_get_ibv_context("localhost", RPMA_UTIL_IBV_CONTEXT_REMOTE, &ctx2));
	CHECK(ctx2 != NULL);

	/* rpma_utils_ibv_context_is_odp_capable */
	int odp = -1;
	EXPECT_RC(rpma_utils_ibv_context_is_odp_capable(NULL, &odp), RPMA_E_INVAL);
	EXPECT_RC(rpma_utils_ibv_context_is_odp_capable(ctx, NULL), RPMA_E_INVAL);
	struct ibv_context foreign;
	memset(&foreign, 0, sizeof(foreign));
	EXPECT_RC(rpma_utils_ibv_context_is_odp_capable(&foreign, &odp), RPMA_E_PROVIDER);
	CHECK(odp == -1);
	EXPECT_OK(rpma_utils_ibv_context_is_odp_capable(ctx, &odp));
	CHECK(odp == 1);

	/* strings */
	CHECK(strcmp(rpma_utils_conn_event_2str(RPMA_CONN_ESTABLISHED), "Connection established") == 0);
	CHECK(strcmp(rpma_utils_conn_event_2str(RPMA_CONN_CLOSED), "Connection closed") == 0);
	CHECK(strcmp(rpma_utils_conn_event_2str(RPMA_CONN_LOST), "Connection lost") == 0);
	CHECK(strcmp(rpma_utils_conn_event_2str(RPMA_CONN_REJECTED), "Connection rejected") == 0);
	CHECK(strcmp(rpma_utils_conn_event_2str(RPMA_CONN_UNREACHABLE), "Connection unreachable") == 0);
	CHECK(rpma_utils_conn_event_2str(RPMA_CONN_UNDEFINED) != NULL);
	CHECK(rpma_utils_conn_event_2str((enum rpma_conn_event)42) != NULL);
	int codes[] = {RPMA_E_UNKNOWN, RPMA_E_NOSUPP, RPMA_E_PROVIDER, RPMA_E_NOMEM, RPMA_E_INVAL,
		RPMA_E_NO_COMPLETION, RPMA_E_NO_EVENT, RPMA_E_AGAIN, RPMA_E_SHARED_CHANNEL, RPMA_E_NOT_SHARED_CHNL};
	for (unsigned i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		CHECK(codes[i] == -100000 - (int)i);
		const char *s = rpma_err_2str(codes[i]);
		CHECK(s != NULL && *s != '\0');
		for (unsigned j = 0; j < i; j++)
			CHECK(strcmp(s, rpma_err_2str(codes[j])) != 0);
	}
	CHECK(rpma_err_2str(12345) != NULL);
	/* the constants of the API */
	CHECK(RPMA_F_COMPLETION_ON_ERROR == 1 && RPMA_F_COMPLETION_ALWAYS == 3);
	CHECK(RPMA_DEFAULT_TIMEOUT_MS == 1000 && RPMA_ATOMIC_WRITE_ALIGNMENT == 8);
	CHECK(RPMA_MR_USAGE_READ_SRC == 1 && RPMA_MR_USAGE_RECV == 128);
	CHECK(RPMA_FLUSH_TYPE_PERSISTENT == 0 && RPMA_FLUSH_TYPE_VISIBILITY == 1);
	CHECK(RPMA_CONN_UNDEFINED == -1 && RPMA_CONN_UNREACHABLE == 4);
	CHECK(RPMA_LOG_DISABLED == -1 && RPMA_LOG_LEVEL_DEBUG == 5 && RPMA_LOG_THRESHOLD_MAX == 2);
	CHECK(sizeof(struct rpma_conn_private_data) == sizeof(void *) * 2);
	return finish("test_utils");
}
