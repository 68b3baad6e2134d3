/*
 * librpma.h - the librpma 1.2.0 C API, implemented by Remora.
 *
 * Written for Remora (compat/rpma). Source compatible with librpma 1.2.0:
 * the same functions, types, enumerations, flags, constants and error codes,
 * with the same values. The library behind it (librpma.so.0) runs every
 * call on the Remora core, over any libfabric provider (tcp included), so
 * no verbs device is needed. Differences from librpma on RDMA hardware are
 * listed in compat/rpma/README.md.
 *
 * Every function returns 0 (or a non-negative value) on success and one of
 * the negative RPMA_E_* codes on failure; output arguments are left as they
 * were when a call fails.
 */
#ifndef LIBRPMA_H
#define LIBRPMA_H 1

/* Tells Remora's own header from others (the tests check which one they got). */
#define REMORA_LIBRPMA_H 1

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* struct ibv_context, struct ibv_wc and their enums; Remora fills them
 * without any verbs device. */
#include <infiniband/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- error codes ------------------------------------------------------ */

#define RPMA_E_UNKNOWN (-100000)         /* an error with no better code */
#define RPMA_E_NOSUPP (-100001)          /* the operation is not supported */
#define RPMA_E_PROVIDER (-100002)        /* the fabric provider failed */
#define RPMA_E_NOMEM (-100003)           /* memory ran out */
#define RPMA_E_INVAL (-100004)           /* an argument is not valid */
#define RPMA_E_NO_COMPLETION (-100005)   /* no completion is waiting */
#define RPMA_E_NO_EVENT (-100006)        /* no event is waiting */
#define RPMA_E_AGAIN (-100007)           /* temporary failure; try again */
#define RPMA_E_SHARED_CHANNEL (-100008)  /* the completion channel is shared */
#define RPMA_E_NOT_SHARED_CHNL (-100009) /* the completion channel is not shared */

/* rpma_conn_wait() flag */
#define RPMA_W_WAIT_FOR_COMPLETION (1)

/* default connection setup timeout */
#define RPMA_DEFAULT_TIMEOUT_MS 1000

/* ---- device lookup ---------------------------------------------------- */

/* Which side of the connection an address names. */
enum rpma_util_ibv_context_type {
	RPMA_UTIL_IBV_CONTEXT_LOCAL,  /* an address of this host */
	RPMA_UTIL_IBV_CONTEXT_REMOTE  /* a peer's address; pick the local route to it */
};

/* Find the fabric that serves addr. The returned context belongs to the
 * library: one per address, valid until the process ends. */
int rpma_utils_get_ibv_context(const char *addr, enum rpma_util_ibv_context_type type,
		struct ibv_context **ibv_ctx_ptr);

/* Remora never pins memory, so this always reports 1. */
int rpma_utils_ibv_context_is_odp_capable(struct ibv_context *ibv_ctx, int *is_odp_capable);

/* ---- peer configuration ----------------------------------------------- */

struct rpma_peer_cfg;

int rpma_peer_cfg_new(struct rpma_peer_cfg **pcfg_ptr);
int rpma_peer_cfg_delete(struct rpma_peer_cfg **pcfg_ptr);
int rpma_peer_cfg_set_direct_write_to_pmem(struct rpma_peer_cfg *pcfg, bool supported);
int rpma_peer_cfg_get_direct_write_to_pmem(const struct rpma_peer_cfg *pcfg, bool *supported);
/* The descriptor is a byte string to hand to the other side. */
int rpma_peer_cfg_get_descriptor(const struct rpma_peer_cfg *pcfg, void *desc);
int rpma_peer_cfg_get_descriptor_size(const struct rpma_peer_cfg *pcfg, size_t *desc_size);
int rpma_peer_cfg_from_descriptor(const void *desc, size_t desc_size,
		struct rpma_peer_cfg **pcfg_ptr);

/* ---- peer ------------------------------------------------------------- */

struct rpma_peer;

int rpma_peer_new(struct ibv_context *ibv_ctx, struct rpma_peer **peer_ptr);
int rpma_peer_delete(struct rpma_peer **peer_ptr);

/* ---- memory regions --------------------------------------------------- */

struct rpma_mr_local;
struct rpma_mr_remote;

/* What a registered region will be used for (bits of the usage argument). */
#define RPMA_MR_USAGE_READ_SRC (1 << 0)            /* read by the peer */
#define RPMA_MR_USAGE_READ_DST (1 << 1)            /* destination of a local read */
#define RPMA_MR_USAGE_WRITE_SRC (1 << 2)           /* source of a local write */
#define RPMA_MR_USAGE_WRITE_DST (1 << 3)           /* written by the peer */
#define RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY (1 << 4) /* peer may flush to visibility */
#define RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT (1 << 5) /* peer may flush to persistence */
#define RPMA_MR_USAGE_SEND (1 << 6)                /* source of a send */
#define RPMA_MR_USAGE_RECV (1 << 7)                /* destination of a receive */

int rpma_mr_reg(struct rpma_peer *peer, void *ptr, size_t size, int usage,
		struct rpma_mr_local **mr_ptr);
int rpma_mr_dereg(struct rpma_mr_local **mr_ptr);
int rpma_mr_get_descriptor(const struct rpma_mr_local *mr, void *desc);
int rpma_mr_remote_from_descriptor(const void *desc, size_t desc_size,
		struct rpma_mr_remote **mr_ptr);
int rpma_mr_get_descriptor_size(const struct rpma_mr_local *mr, size_t *desc_size);
int rpma_mr_get_ptr(const struct rpma_mr_local *mr, void **ptr);
int rpma_mr_get_size(const struct rpma_mr_local *mr, size_t *size);
int rpma_mr_remote_get_size(const struct rpma_mr_remote *mr, size_t *size);
int rpma_mr_remote_get_flush_type(const struct rpma_mr_remote *mr, int *flush_type);
int rpma_mr_remote_delete(struct rpma_mr_remote **mr_ptr);
/* advice and flags as for ibv_advise_mr(3) */
int rpma_mr_advise(struct rpma_mr_local *mr, size_t offset, size_t len, int advice,
		uint32_t flags);

/* ---- connection configuration ----------------------------------------- */

struct rpma_conn_cfg;

int rpma_conn_cfg_new(struct rpma_conn_cfg **cfg_ptr);
int rpma_conn_cfg_delete(struct rpma_conn_cfg **cfg_ptr);
int rpma_conn_cfg_set_timeout(struct rpma_conn_cfg *cfg, int timeout_ms);
int rpma_conn_cfg_get_timeout(const struct rpma_conn_cfg *cfg, int *timeout_ms);
int rpma_conn_cfg_set_cq_size(struct rpma_conn_cfg *cfg, uint32_t cq_size);
int rpma_conn_cfg_get_compl_channel(const struct rpma_conn_cfg *cfg, bool *shared);
int rpma_conn_cfg_set_compl_channel(struct rpma_conn_cfg *cfg, bool shared);
int rpma_conn_cfg_get_cq_size(const struct rpma_conn_cfg *cfg, uint32_t *cq_size);
int rpma_conn_cfg_set_rcq_size(struct rpma_conn_cfg *cfg, uint32_t rcq_size);
int rpma_conn_cfg_get_rcq_size(const struct rpma_conn_cfg *cfg, uint32_t *rcq_size);
int rpma_conn_cfg_set_sq_size(struct rpma_conn_cfg *cfg, uint32_t sq_size);
int rpma_conn_cfg_get_sq_size(const struct rpma_conn_cfg *cfg, uint32_t *sq_size);
int rpma_conn_cfg_set_rq_size(struct rpma_conn_cfg *cfg, uint32_t rq_size);
int rpma_conn_cfg_get_rq_size(const struct rpma_conn_cfg *cfg, uint32_t *rq_size);

struct rpma_srq;

int rpma_conn_cfg_set_srq(struct rpma_conn_cfg *cfg, struct rpma_srq *srq);
int rpma_conn_cfg_get_srq(const struct rpma_conn_cfg *cfg, struct rpma_srq **srq_ptr);

/* ---- connection ------------------------------------------------------- */

struct rpma_conn;

int rpma_conn_get_event_fd(const struct rpma_conn *conn, int *fd);

/* What happened to a connection. */
enum rpma_conn_event {
	RPMA_CONN_UNDEFINED = -1, /* nothing known */
	RPMA_CONN_ESTABLISHED,    /* the connection is up */
	RPMA_CONN_CLOSED,         /* closed by either side */
	RPMA_CONN_LOST,           /* broken without a goodbye */
	RPMA_CONN_REJECTED,       /* the server refused it */
	RPMA_CONN_UNREACHABLE     /* no server at that address */
};

int rpma_conn_next_event(struct rpma_conn *conn, enum rpma_conn_event *event);
const char *rpma_utils_conn_event_2str(enum rpma_conn_event conn_event);

/* Bytes exchanged while connecting. */
struct rpma_conn_private_data {
	void *ptr;
	uint8_t len;
};

int rpma_conn_get_private_data(const struct rpma_conn *conn, struct rpma_conn_private_data *pdata);
int rpma_conn_apply_remote_peer_cfg(struct rpma_conn *conn, const struct rpma_peer_cfg *pcfg);
int rpma_conn_get_qp_num(const struct rpma_conn *conn, uint32_t *qp_num);

struct rpma_cq;

int rpma_conn_get_cq(const struct rpma_conn *conn, struct rpma_cq **cq_ptr);
int rpma_conn_get_rcq(const struct rpma_conn *conn, struct rpma_cq **rcq_ptr);
int rpma_conn_disconnect(struct rpma_conn *conn);
int rpma_conn_delete(struct rpma_conn **conn_ptr);

/* ---- connection requests ---------------------------------------------- */

struct rpma_conn_req;

int rpma_conn_req_new(struct rpma_peer *peer, const char *addr, const char *port,
		const struct rpma_conn_cfg *cfg, struct rpma_conn_req **req_ptr);
int rpma_conn_req_delete(struct rpma_conn_req **req_ptr);
int rpma_conn_req_connect(struct rpma_conn_req **req_ptr,
		const struct rpma_conn_private_data *pdata, struct rpma_conn **conn_ptr);
int rpma_conn_get_compl_fd(const struct rpma_conn *conn, int *fd);
int rpma_conn_wait(struct rpma_conn *conn, int flags, struct rpma_cq **cq, bool *is_rcq);
int rpma_conn_req_recv(struct rpma_conn_req *req, struct rpma_mr_local *dst, size_t offset,
		size_t len, const void *op_context);

/* ---- listening endpoint ----------------------------------------------- */

struct rpma_ep;

int rpma_ep_listen(struct rpma_peer *peer, const char *addr, const char *port,
		struct rpma_ep **ep_ptr);
int rpma_ep_shutdown(struct rpma_ep **ep_ptr);
int rpma_ep_get_fd(const struct rpma_ep *ep, int *fd);
int rpma_ep_next_conn_req(struct rpma_ep *ep, const struct rpma_conn_cfg *cfg,
		struct rpma_conn_req **req_ptr);
int rpma_conn_req_get_private_data(const struct rpma_conn_req *req,
		struct rpma_conn_private_data *pdata);

/* ---- shared receive queue --------------------------------------------- */

struct rpma_srq_cfg;

int rpma_srq_cfg_new(struct rpma_srq_cfg **cfg_ptr);
int rpma_srq_cfg_delete(struct rpma_srq_cfg **cfg_ptr);
int rpma_srq_cfg_set_rq_size(struct rpma_srq_cfg *cfg, uint32_t rq_size);
int rpma_srq_cfg_get_rq_size(const struct rpma_srq_cfg *cfg, uint32_t *rq_size);
int rpma_srq_cfg_set_rcq_size(struct rpma_srq_cfg *cfg, uint32_t rcq_size);
int rpma_srq_cfg_get_rcq_size(const struct rpma_srq_cfg *cfg, uint32_t *rcq_size);

int rpma_srq_new(struct rpma_peer *peer, struct rpma_srq_cfg *cfg, struct rpma_srq **srq_ptr);
int rpma_srq_delete(struct rpma_srq **srq_ptr);
int rpma_srq_recv(struct rpma_srq *srq, struct rpma_mr_local *dst, size_t offset, size_t len,
		const void *op_context);
int rpma_srq_get_rcq(const struct rpma_srq *srq, struct rpma_cq **rcq_ptr);

/* ---- data path -------------------------------------------------------- */

/* completion flags of posted operations */
#define RPMA_F_COMPLETION_ON_ERROR (1 << 0)                            /* only failures complete */
#define RPMA_F_COMPLETION_ALWAYS ((1 << 1) | RPMA_F_COMPLETION_ON_ERROR) /* every operation completes */

int rpma_read(struct rpma_conn *conn,
		struct rpma_mr_local *dst, size_t dst_offset,
		const struct rpma_mr_remote *src, size_t src_offset,
		size_t len, int flags, const void *op_context);
int rpma_write(struct rpma_conn *conn,
		struct rpma_mr_remote *dst, size_t dst_offset,
		const struct rpma_mr_local *src, size_t src_offset,
		size_t len, int flags, const void *op_context);
int rpma_write_with_imm(struct rpma_conn *conn,
		struct rpma_mr_remote *dst, size_t dst_offset,
		const struct rpma_mr_local *src, size_t src_offset,
		size_t len, int flags, uint32_t imm, const void *op_context);

/* the destination offset of an atomic write must be a multiple of this */
#define RPMA_ATOMIC_WRITE_ALIGNMENT 8

int rpma_atomic_write(struct rpma_conn *conn,
		struct rpma_mr_remote *dst, size_t dst_offset,
		const char src[8], int flags, const void *op_context);

/* How far a flush pushes earlier writes. */
enum rpma_flush_type {
	RPMA_FLUSH_TYPE_PERSISTENT, /* durable at the target */
	RPMA_FLUSH_TYPE_VISIBILITY, /* visible to the target's CPU */
};

int rpma_flush(struct rpma_conn *conn,
		struct rpma_mr_remote *dst, size_t dst_offset, size_t len,
		enum rpma_flush_type type, int flags, const void *op_context);
int rpma_send(struct rpma_conn *conn, const struct rpma_mr_local *src, size_t offset, size_t len,
		int flags, const void *op_context);
int rpma_send_with_imm(struct rpma_conn *conn, const struct rpma_mr_local *src, size_t offset,
		size_t len, int flags, uint32_t imm, const void *op_context);
int rpma_recv(struct rpma_conn *conn, struct rpma_mr_local *dst, size_t offset, size_t len,
		const void *op_context);

/* ---- completions ------------------------------------------------------ */

int rpma_cq_get_fd(const struct rpma_cq *cq, int *fd);
int rpma_cq_wait(struct rpma_cq *cq);
int rpma_cq_get_wc(struct rpma_cq *cq, int num_entries, struct ibv_wc *wc, int *num_entries_got);

/* ---- errors ----------------------------------------------------------- */

const char *rpma_err_2str(int ret);

/* ---- logging ---------------------------------------------------------- */

/* Severity of a message; a threshold lets through messages up to its level. */
enum rpma_log_level {
	RPMA_LOG_DISABLED = -1,  /* nothing is logged */
	RPMA_LOG_LEVEL_FATAL,    /* the library cannot continue */
	RPMA_LOG_LEVEL_ERROR,    /* a call failed */
	RPMA_LOG_LEVEL_WARNING,  /* a problem the caller may handle */
	RPMA_LOG_LEVEL_NOTICE,   /* connection set up, torn down, ... */
	RPMA_LOG_LEVEL_INFO,     /* every operation */
	RPMA_LOG_LEVEL_DEBUG,    /* operation details */
};

enum rpma_log_threshold {
	RPMA_LOG_THRESHOLD,     /* what reaches the log function (default: WARNING) */
	RPMA_LOG_THRESHOLD_AUX, /* a second level for the log function's use (default: DISABLED);
	                         * the built-in function copies messages up to it to stderr */
	RPMA_LOG_THRESHOLD_MAX
};

int rpma_log_set_threshold(enum rpma_log_threshold threshold, enum rpma_log_level level);
int rpma_log_get_threshold(enum rpma_log_threshold threshold, enum rpma_log_level *level);

/* A user log function; it must be thread-safe. file_name may be NULL, and
 * then line_no and function_name carry nothing. */
typedef void rpma_log_function(enum rpma_log_level level, const char *file_name,
		const int line_no, const char *function_name, const char *message_format, ...);

/* Pass this to rpma_log_set_function() to go back to the built-in function
 * (syslog, plus stderr up to the auxiliary threshold). */
#define RPMA_LOG_USE_DEFAULT_FUNCTION (NULL)

int rpma_log_set_function(rpma_log_function *log_function);

#ifdef __cplusplus
}
#endif

#endif /* LIBRPMA_H */
