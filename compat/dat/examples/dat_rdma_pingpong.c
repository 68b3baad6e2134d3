/* compat/dat/examples/dat_rdma_pingpong.c - the classic uDAPL client/server
 * flow on Remora's libdat:
 *
 *   1. both sides open the IA, create a PZ, EVDs and an EP, register memory;
 *   2. the client connects to the server's PSP (conn qual = TCP port);
 *   3. each side sends its RMR triplet to the other (send/recv);
 *   4. the client RDMA-writes a pattern into the server's buffer and tells
 *      the server (send); the server syncs and checks it;
 *   5. the client RDMA-reads the server's buffer back and checks it;
 *   6. ping-pong of small messages, with the round-trip time;
 *   7. the client disconnects; both sides free everything.
 *
 *   server: dat_rdma_pingpong -s [-P IA_NAME] [-p PORT] [-n ITERS]
 *   client: dat_rdma_pingpong -h HOST [-P IA_NAME] [-p PORT] [-n ITERS]
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <dat/udat.h>

#define BUF_SIZE (64 * 1024)
#define TIMEOUT (10u * 1000000u) /* microseconds */

enum { MSG_TRIPLET = 1, MSG_WRITTEN = 2, MSG_PING = 3, MSG_PONG = 4 };

typedef struct {
    DAT_UINT32 type;
    DAT_UINT32 seq;
    DAT_RMR_TRIPLET triplet;
} msg_t;

static const char *ia_name = "ofi-tcp-lo";
static DAT_IA_HANDLE ia;
static DAT_EVD_HANDLE async_evd, req_evd, rcv_evd, conn_evd, cr_evd;
static DAT_PZ_HANDLE pz;
static DAT_EP_HANDLE ep;
static DAT_PSP_HANDLE psp;
static char *data, *check;
static msg_t *sendmsg_buf, *recvmsg_buf;
static DAT_LMR_HANDLE data_lmr, check_lmr, msg_lmr;
static DAT_LMR_CONTEXT data_lc, check_lc, msg_lc;
static DAT_RMR_CONTEXT data_rc;
static DAT_RMR_TRIPLET peer;

#define DIE(what, r) die_(what, r, __LINE__)
static void die_(const char *what, DAT_RETURN r, int line) {
    const char *a = "", *b = "";
    dat_strerror(r, &a, &b);
    fprintf(stderr, "dat_rdma_pingpong:%d: %s failed: %s %s\n", line, what, a, b);
    exit(1);
}
#define TRY(call)                                   \
    do {                                            \
        DAT_RETURN _r = (call);                     \
        if (_r != DAT_SUCCESS) DIE(#call, _r);      \
    } while (0)

static DAT_LMR_HANDLE reg(void *p, DAT_VLEN len, DAT_MEM_PRIV_FLAGS priv, DAT_LMR_CONTEXT *lc,
                          DAT_RMR_CONTEXT *rc) {
    DAT_REGION_DESCRIPTION r;
    DAT_LMR_HANDLE h;
    DAT_VLEN sz;
    DAT_VADDR va;
    DAT_RMR_CONTEXT dummy;
    r.for_va = p;
    TRY(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, len, pz, priv, &h, lc, rc ? rc : &dummy, &sz, &va));
    return h;
}

static DAT_LMR_TRIPLET iov(DAT_LMR_CONTEXT lc, const void *p, DAT_VLEN len) {
    DAT_LMR_TRIPLET t;
    t.lmr_context = lc;
    t.pad = 0;
    t.virtual_address = (DAT_VADDR)(uintptr_t)p;
    t.segment_length = len;
    return t;
}

static DAT_EVENT wait_for(DAT_EVD_HANDLE evd, DAT_EVENT_NUMBER n, const char *what) {
    DAT_EVENT ev;
    DAT_COUNT nmore;
    DAT_RETURN r = dat_evd_wait(evd, TIMEOUT, 1, &ev, &nmore);
    if (r != DAT_SUCCESS) DIE(what, r);
    if (ev.event_number != n) {
        fprintf(stderr, "dat_rdma_pingpong: %s: event 0x%x, expected 0x%x\n", what, (unsigned)ev.event_number,
                (unsigned)n);
        exit(1);
    }
    if (n == DAT_DTO_COMPLETION_EVENT && ev.event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS) {
        fprintf(stderr, "dat_rdma_pingpong: %s: DTO status %d\n", what,
                (int)ev.event_data.dto_completion_event_data.status);
        exit(1);
    }
    return ev;
}

static void post_recv(void) {
    DAT_LMR_TRIPLET t = iov(msg_lc, recvmsg_buf, sizeof *recvmsg_buf);
    DAT_DTO_COOKIE c;
    c.as_64 = 1;
    TRY(dat_ep_post_recv(ep, 1, &t, c, DAT_COMPLETION_DEFAULT_FLAG));
}

static void send_msg(DAT_UINT32 type, DAT_UINT32 seq) {
    DAT_LMR_TRIPLET t = iov(msg_lc, sendmsg_buf, sizeof *sendmsg_buf);
    DAT_DTO_COOKIE c;
    sendmsg_buf->type = type;
    sendmsg_buf->seq = seq;
    c.as_64 = 2;
    TRY(dat_ep_post_send(ep, 1, &t, c, DAT_COMPLETION_DEFAULT_FLAG));
    wait_for(req_evd, DAT_DTO_COMPLETION_EVENT, "send completion");
}

static msg_t recv_msg(DAT_UINT32 type) {
    msg_t m;
    wait_for(rcv_evd, DAT_DTO_COMPLETION_EVENT, "receive");
    m = *recvmsg_buf;
    if (m.type != type) {
        fprintf(stderr, "dat_rdma_pingpong: message type %u, expected %u\n", m.type, type);
        exit(1);
    }
    return m;
}

static void setup(void) {
    DAT_EP_ATTR a;
    async_evd = DAT_HANDLE_NULL;
    TRY(dat_ia_open((const DAT_NAME_PTR)ia_name, 8, &async_evd, &ia));
    TRY(dat_pz_create(ia, &pz));
    TRY(dat_evd_create(ia, 16, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &req_evd));
    TRY(dat_evd_create(ia, 16, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &rcv_evd));
    TRY(dat_evd_create(ia, 4, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &conn_evd));
    memset(&a, 0, sizeof a);
    a.service_type = DAT_SERVICE_TYPE_RC;
    a.max_message_size = 4096;
    a.max_rdma_size = BUF_SIZE;
    a.max_recv_dtos = 8;
    a.max_request_dtos = 8;
    a.max_recv_iov = 1;
    a.max_request_iov = 1;
    a.max_rdma_read_iov = 1;
    a.max_rdma_write_iov = 1;
    TRY(dat_ep_create(ia, pz, rcv_evd, req_evd, conn_evd, &a, &ep));
    data = calloc(1, BUF_SIZE);
    check = calloc(1, BUF_SIZE);
    sendmsg_buf = calloc(2, sizeof(msg_t));
    recvmsg_buf = sendmsg_buf + 1;
    data_lmr = reg(data, BUF_SIZE, DAT_MEM_PRIV_ALL_FLAG, &data_lc, &data_rc);
    check_lmr = reg(check, BUF_SIZE, DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_LOCAL_WRITE_FLAG, &check_lc, NULL);
    msg_lmr = reg(sendmsg_buf, 2 * sizeof(msg_t), DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_LOCAL_WRITE_FLAG,
                  &msg_lc, NULL);
}

static void exchange_triplets(void) {
    sendmsg_buf->triplet.rmr_context = data_rc;
    sendmsg_buf->triplet.pad = 0;
    sendmsg_buf->triplet.target_address = (DAT_VADDR)(uintptr_t)data;
    sendmsg_buf->triplet.segment_length = BUF_SIZE;
    send_msg(MSG_TRIPLET, 0);
    peer = recv_msg(MSG_TRIPLET).triplet;
    post_recv();
    printf("peer RMR: context 0x%08x address 0x%llx length %llu\n", peer.rmr_context,
           (unsigned long long)peer.target_address, (unsigned long long)peer.segment_length);
}

static void teardown(void) {
    TRY(dat_lmr_free(msg_lmr));
    TRY(dat_lmr_free(check_lmr));
    TRY(dat_lmr_free(data_lmr));
    TRY(dat_ep_free(ep));
    if (psp) TRY(dat_psp_free(psp));
    TRY(dat_evd_free(conn_evd));
    TRY(dat_evd_free(rcv_evd));
    TRY(dat_evd_free(req_evd));
    if (cr_evd) TRY(dat_evd_free(cr_evd));
    TRY(dat_pz_free(pz));
    TRY(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG));
    free(data);
    free(check);
    free(sendmsg_buf);
}

static int server(DAT_CONN_QUAL port, int iters) {
    DAT_EVENT ev;
    DAT_LMR_TRIPLET sync_seg;
    int i;
    setup();
    TRY(dat_evd_create(ia, 4, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &cr_evd));
    TRY(dat_psp_create(ia, port, cr_evd, DAT_PSP_CONSUMER_FLAG, &psp));
    printf("server: listening on %s, conn qual %llu\n", ia_name, (unsigned long long)port);
    fflush(stdout);
    post_recv();
    {
        DAT_COUNT nmore;
        DAT_RETURN r = dat_evd_wait(cr_evd, 60u * 1000000u, 1, &ev, &nmore);
        if (r != DAT_SUCCESS) DIE("waiting for a connection request", r);
    }
    TRY(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, ep, 0, NULL));
    wait_for(conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, "established");
    printf("server: connected\n");
    exchange_triplets();

    /* The client wrote into data[] and says so. */
    (void)recv_msg(MSG_WRITTEN);
    post_recv();
    sync_seg = iov(data_lc, data, BUF_SIZE);
    TRY(dat_lmr_sync_rdma_write(ia, &sync_seg, 1));
    for (i = 0; i < BUF_SIZE; ++i)
        if (data[i] != (char)(i * 7 + 3)) {
            fprintf(stderr, "server: byte %d wrong after RDMA write\n", i);
            return 1;
        }
    printf("server: RDMA write of %d bytes verified\n", BUF_SIZE);

    for (i = 0; i < iters; ++i) {
        msg_t m = recv_msg(MSG_PING);
        post_recv();
        send_msg(MSG_PONG, m.seq);
    }
    wait_for(conn_evd, DAT_CONNECTION_EVENT_DISCONNECTED, "disconnect");
    /* flushed receive */
    while (dat_evd_dequeue(rcv_evd, &ev) == DAT_SUCCESS) {
    }
    printf("server: done\n");
    teardown();
    return 0;
}

static int client(const char *host, DAT_CONN_QUAL port, int iters) {
    struct addrinfo hints, *res;
    struct sockaddr_in sa;
    DAT_LMR_TRIPLET t;
    DAT_DTO_COOKIE c;
    DAT_EVENT ev;
    struct timespec t0, t1;
    int i, attempt;
    setup();
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    if (getaddrinfo(host, NULL, &hints, &res) != 0) {
        fprintf(stderr, "client: cannot resolve %s\n", host);
        return 1;
    }
    memcpy(&sa, res->ai_addr, sizeof sa);
    freeaddrinfo(res);
    post_recv();
    for (attempt = 0;; ++attempt) { /* the server may still be starting */
        TRY(dat_ep_connect(ep, (DAT_IA_ADDRESS_PTR)&sa, port, TIMEOUT, 0, NULL, DAT_QOS_BEST_EFFORT,
                           DAT_CONNECT_DEFAULT_FLAG));
        {
            DAT_COUNT nmore;
            TRY(dat_evd_wait(conn_evd, TIMEOUT, 1, &ev, &nmore));
        }
        if (ev.event_number == DAT_CONNECTION_EVENT_ESTABLISHED) break;
        if (attempt >= 50) {
            fprintf(stderr, "client: connection failed (event 0x%x)\n", (unsigned)ev.event_number);
            return 1;
        }
        while (dat_evd_dequeue(rcv_evd, &ev) == DAT_SUCCESS) {
        }
        TRY(dat_ep_reset(ep));
        post_recv();
        usleep(100000);
    }
    printf("client: connected to %s:%llu\n", host, (unsigned long long)port);
    exchange_triplets();

    /* RDMA write a pattern into the server's buffer. */
    for (i = 0; i < BUF_SIZE; ++i) data[i] = (char)(i * 7 + 3);
    t = iov(data_lc, data, BUF_SIZE);
    c.as_64 = 10;
    TRY(dat_ep_post_rdma_write(ep, 1, &t, c, &peer, DAT_COMPLETION_DEFAULT_FLAG));
    ev = wait_for(req_evd, DAT_DTO_COMPLETION_EVENT, "RDMA write");
    if (ev.event_data.dto_completion_event_data.user_cookie.as_64 != 10) return 1;
    send_msg(MSG_WRITTEN, 0);
    printf("client: RDMA write of %d bytes done\n", BUF_SIZE);

    /* RDMA read it back. */
    t = iov(check_lc, check, BUF_SIZE);
    c.as_64 = 11;
    TRY(dat_ep_post_rdma_read(ep, 1, &t, c, &peer, DAT_COMPLETION_DEFAULT_FLAG));
    wait_for(req_evd, DAT_DTO_COMPLETION_EVENT, "RDMA read");
    t = iov(check_lc, check, BUF_SIZE);
    TRY(dat_lmr_sync_rdma_read(ia, &t, 1));
    if (memcmp(check, data, BUF_SIZE) != 0) {
        fprintf(stderr, "client: RDMA read returned other bytes\n");
        return 1;
    }
    printf("client: RDMA read of %d bytes verified\n", BUF_SIZE);

    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (i = 0; i < iters; ++i) {
        msg_t m;
        send_msg(MSG_PING, (DAT_UINT32)i);
        m = recv_msg(MSG_PONG);
        post_recv();
        if (m.seq != (DAT_UINT32)i) {
            fprintf(stderr, "client: pong %u for ping %d\n", m.seq, i);
            return 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (iters > 0)
        printf("client: %d ping-pongs, %.1f us round trip\n", iters,
               ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3 / iters);
    TRY(dat_ep_disconnect(ep, DAT_CLOSE_GRACEFUL_FLAG));
    wait_for(conn_evd, DAT_CONNECTION_EVENT_DISCONNECTED, "disconnect");
    while (dat_evd_dequeue(rcv_evd, &ev) == DAT_SUCCESS) {
    }
    printf("client: done\n");
    teardown();
    return 0;
}

int main(int argc, char **argv) {
    int opt, is_server = 0, iters = 100;
    const char *host = NULL;
    DAT_CONN_QUAL port = 18515;
    while ((opt = getopt(argc, argv, "sh:P:p:n:")) != -1) {
        switch (opt) {
            case 's': is_server = 1; break;
            case 'h': host = optarg; break;
            case 'P': ia_name = optarg; break;
            case 'p': port = strtoull(optarg, NULL, 10); break;
            case 'n': iters = atoi(optarg); break;
            default:
                fprintf(stderr, "usage: %s -s | -h HOST  [-P IA_NAME] [-p PORT] [-n ITERATIONS]\n", argv[0]);
                return 2;
        }
    }
    if (is_server == (host != NULL)) {
        fprintf(stderr, "usage: %s -s | -h HOST  [-P IA_NAME] [-p PORT] [-n ITERATIONS]\n", argv[0]);
        return 2;
    }
    return is_server ? server(port, iters) : client(host, port, iters);
}
