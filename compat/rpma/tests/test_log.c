/* test_log.c - rpma_log_set_threshold, rpma_log_get_threshold, rpma_log_set_function */
#include <stdarg.h>
#include "common.h"

static int g_calls;
static enum rpma_log_level g_level;
static char g_msg[512];

static void my_log(enum rpma_log_level level, const char *file_name, const int line_no,
		const char *function_name, const char *message_format, ...)
{
	(void)file_name;
	(void)line_no;
	(void)function_name;
	va_list ap;
	va_start(ap, message_format);
	vsnprintf(g_msg, sizeof(g_msg), message_format, ap);
	va_end(ap);
	g_level = level;
	g_calls++;
}

int main(void)
{
	check_loaded_library();
	enum rpma_log_level l = RPMA_LOG_LEVEL_DEBUG;

	/* documented defaults */
	EXPECT_OK(rpma_log_get_threshold(RPMA_LOG_THRESHOLD, &l));
	CHECK(l == RPMA_LOG_LEVEL_WARNING);
	EXPECT_OK(rpma_log_get_threshold(RPMA_LOG_THRESHOLD_AUX, &l));
	CHECK(l == RPMA_LOG_DISABLED);

	/* RPMA_E_INVAL */
	EXPECT_RC(rpma_log_get_threshold(RPMA_LOG_THRESHOLD_MAX, &l), RPMA_E_INVAL);
	EXPECT_RC(rpma_log_get_threshold((enum rpma_log_threshold)-1, &l), RPMA_E_INVAL);
	EXPECT_RC(rpma_log_get_threshold(RPMA_LOG_THRESHOLD, NULL), RPMA_E_INVAL);
	EXPECT_RC(rpma_log_set_threshold(RPMA_LOG_THRESHOLD_MAX, RPMA_LOG_LEVEL_ERROR), RPMA_E_INVAL);
	EXPECT_RC(rpma_log_set_threshold(RPMA_LOG_THRESHOLD, (enum rpma_log_level)(RPMA_LOG_LEVEL_DEBUG + 1)), RPMA_E_INVAL);
	EXPECT_RC(rpma_log_set_threshold(RPMA_LOG_THRESHOLD, (enum rpma_log_level)(RPMA_LOG_DISABLED - 1)), RPMA_E_INVAL);

	/* set and get back */
	EXPECT_OK(rpma_log_set_threshold(RPMA_LOG_THRESHOLD_AUX, RPMA_LOG_LEVEL_INFO));
	EXPECT_OK(rpma_log_get_threshold(RPMA_LOG_THRESHOLD_AUX, &l));
	CHECK(l == RPMA_LOG_LEVEL_INFO);
	EXPECT_OK(rpma_log_set_threshold(RPMA_LOG_THRESHOLD_AUX, RPMA_LOG_DISABLED));

	/* a user function receives the library's messages up to the threshold */
	EXPECT_OK(rpma_log_set_function(my_log));
	struct ibv_context *ctx;
	EXPECT_RC(rpma_utils_get_ibv_context("192.0.2.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx), RPMA_E_PROVIDER);
	CHECK(g_calls >= 1 && g_level == RPMA_LOG_LEVEL_ERROR && strstr(g_msg, "192.0.2.1") != NULL);
	int before = g_calls;
	EXPECT_OK(rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_DISABLED));
	EXPECT_RC(rpma_utils_get_ibv_context("192.0.2.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx), RPMA_E_PROVIDER);
	CHECK(g_calls == before);
	EXPECT_OK(rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_WARNING));

	/* back to the default function */
	EXPECT_OK(rpma_log_set_function(RPMA_LOG_USE_DEFAULT_FUNCTION));
	before = g_calls;
	EXPECT_RC(rpma_utils_get_ibv_context("192.0.2.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx), RPMA_E_PROVIDER);
	CHECK(g_calls == before);
	return finish("test_log");
}
