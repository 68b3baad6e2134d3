/* compat/dat/tests/test_api.c - the rest of the consumer API: naming and the
 * registry, IA, PZ, EVD, CNO, EP life cycle, PSP/RSP/CR, send/recv, RDMA
 * read, RMR, SRQ, consumer contexts, dat_strerror. */
#include <pthread.h>

#include "dat_test.h"

static char sbuf[4096], rbuf[4096], tbuf[4096];

static void *post_later(void *arg) {
    DAT_EVENT ev;
    usleep(100000);
    memset(&ev, 0, sizeof ev);
    ev.event_number = DAT_SOFTWARE_EVENT;
    ev.event_data.software_event_data.pointer = (void *)0x77;
    OK(dat_evd_post_se((DAT_EVD_HANDLE)arg, &ev));
    return NULL;
}

static void *unwait_later(void *arg) {
    usleep(100000);
    OK(dat_evd_set_unwaitable((DAT_EVD_HANDLE)arg));
    return NULL;
}

int main(void) {
    DAT_EVD_HANDLE async = DAT_HANDLE_NULL, evd, cr_evd;
    DAT_IA_HANDLE ia, ia2;
    DAT_PZ_HANDLE pz;
    DAT_EVENT ev;
    DAT_COUNT n, nmore;
    pair_t p;
    alarm(120);

    STEP("dat_registry_list_providers lists ofi-tcp-lo");
    {
        DAT_PROVIDER_INFO infos[16], *ptrs[16];
        int i, found = 0;
        for (i = 0; i < 16; ++i) ptrs[i] = &infos[i];
        OK(dat_registry_list_providers(0, &n, ptrs));
        CHECK(n >= 1);
        OK(dat_registry_list_providers(16, &n, ptrs));
        for (i = 0; i < n; ++i) {
            found |= strcmp(infos[i].ia_name, "ofi-tcp-lo") == 0;
            CHECK(infos[i].dapl_version_major == 1 && infos[i].dapl_version_minor == 2);
        }
        CHECK(found);
        EXPECT(dat_registry_list_providers(-1, &n, ptrs), DAT_INVALID_PARAMETER);
    }

    STEP("every listed name opens (ofi-tcp: the default route's interface)");
    {
        DAT_PROVIDER_INFO infos[16], *ptrs[16];
        DAT_IA_ATTR a;
        int i;
        for (i = 0; i < 16; ++i) ptrs[i] = &infos[i];
        OK(dat_registry_list_providers(16, &n, ptrs));
        for (i = 0; i < n; ++i) {
            DAT_RETURN rr;
            async = DAT_HANDLE_NULL;
            rr = dat_ia_open(infos[i].ia_name, 8, &async, &ia);
            if (rr != DAT_SUCCESS && strcmp(infos[i].ia_name, "ofi-tcp-lo") != 0) {
                /* an interface libfabric cannot use on this machine */
                fprintf(stderr, "   %s: %s (not required)\n", infos[i].ia_name, dt_name(rr));
                continue;
            }
            OK(rr);
            OK(dat_ia_query(ia, NULL, DAT_IA_FIELD_ALL, &a, 0, NULL));
            fprintf(stderr, "   %s -> %s\n", infos[i].ia_name,
                    inet_ntoa(((struct sockaddr_in *)a.ia_address_ptr)->sin_addr));
            OK(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG));
        }
    }

    STEP("dat_ia_open: unknown names, wrong versions");
    EXPECT(dat_ia_open("no-such-ia", 8, &async, &ia), DAT_PROVIDER_NOT_FOUND);
    async = DAT_HANDLE_NULL;
    EXPECT(dat_ia_openv("ofi-tcp-lo", 8, &async, &ia, 2, 0, DAT_TRUE), DAT_PROVIDER_NOT_FOUND);
    EXPECT(dat_ia_open("ofi-tcp-nosuchif0", 8, &async, &ia), DAT_PROVIDER_NOT_FOUND);

    STEP("DAT_OVERRIDE: a dat.conf file adds names");
    {
        char path[] = "/tmp/remora-dat-conf-XXXXXX";
        int fd = mkstemp(path);
        FILE *f;
        CHECK(fd >= 0);
        f = fdopen(fd, "w");
        fprintf(f, "# dat.conf for the test\n");
        fprintf(f, "myloop u1.2 threadsafe default libdat.so.1 ri.1.2 \"tcp lo\" \"\"\n");
        fprintf(f, "alias-lo u1.2 nonthreadsafe default libdat.so.1 ri.1.2 \"ofi-tcp-lo\" \"\"\n");
        fprintf(f, "kernel-one k1.2 threadsafe default libdat.so.1 ri.1.2 \"tcp lo\" \"\"\n");
        fclose(f);
        setenv("DAT_OVERRIDE", path, 1);
        async = DAT_HANDLE_NULL;
        OK(dat_ia_open("myloop", 8, &async, &ia));
        OK(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG));
        async = DAT_HANDLE_NULL;
        OK(dat_ia_open("alias-lo", 8, &async, &ia));
        OK(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG));
        async = DAT_HANDLE_NULL;
        EXPECT(dat_ia_open("kernel-one", 8, &async, &ia), DAT_PROVIDER_NOT_FOUND);
        unsetenv("DAT_OVERRIDE");
        unlink(path);
    }

    ia = open_ia(IA_NAME, &async);
    CHECK(async != DAT_HANDLE_NULL);

    STEP("dat_ia_query");
    {
        DAT_IA_ATTR a;
        DAT_PROVIDER_ATTR pa;
        DAT_EVD_HANDLE ae;
        OK(dat_ia_query(ia, &ae, DAT_IA_FIELD_ALL, &a, DAT_PROVIDER_FIELD_ALL, &pa));
        CHECK(ae == async);
        CHECK(a.ia_address_ptr && a.ia_address_ptr->sa_family == AF_INET);
        CHECK(((struct sockaddr_in *)a.ia_address_ptr)->sin_addr.s_addr == htonl(INADDR_LOOPBACK));
        CHECK(a.max_iov_segments_per_dto >= 1 && pa.dapl_version_major == 1 && pa.dapl_version_minor == 2);
        CHECK(pa.max_private_data_size >= 200);
        EXPECT(dat_ia_query(DAT_HANDLE_NULL, &ae, 0, &a, 0, &pa), DAT_INVALID_HANDLE);
    }

    STEP("handle types and consumer contexts");
    {
        DAT_HANDLE_TYPE t;
        DAT_CONTEXT c, g;
        OK(dat_pz_create(ia, &pz));
        OK(dat_get_handle_type(pz, &t));
        CHECK(t == DAT_HANDLE_TYPE_PZ);
        OK(dat_get_handle_type(ia, &t));
        CHECK(t == DAT_HANDLE_TYPE_IA);
        c.as_64 = 0xfeedULL;
        OK(dat_set_consumer_context(pz, c));
        OK(dat_get_consumer_context(pz, &g));
        CHECK(g.as_64 == 0xfeedULL);
        EXPECT(dat_get_handle_type((DAT_HANDLE)&t, &t), DAT_INVALID_HANDLE);
    }

    STEP("dat_strerror");
    {
        const char *ma, *mi;
        OK(dat_strerror(DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP), &ma, &mi));
        CHECK(strcmp(ma, "DAT_INVALID_HANDLE") == 0 && strcmp(mi, "DAT_INVALID_HANDLE_EP") == 0);
        OK(dat_strerror(DAT_SUCCESS, &ma, &mi));
        CHECK(strcmp(ma, "DAT_SUCCESS") == 0);
    }

    STEP("EVD: software events, dequeue, threshold, microsecond timeout, resize");
    {
        pthread_t th;
        DAT_EVD_PARAM ep;
        struct timespec t0, t1;
        long us;
        evd = mk_evd(ia, DAT_EVD_SOFTWARE_FLAG | DAT_EVD_DTO_FLAG, 4);
        /* an EVD with a completion queue (DTO here) reports the bare
         * DAT_QUEUE_EMPTY, one without it the error class form, as
         * compat-dapl 1.2 does */
        CHECK(dat_evd_dequeue(evd, &ev) == DAT_QUEUE_EMPTY);
        {
            DAT_EVD_HANDLE sw = mk_evd(ia, DAT_EVD_SOFTWARE_FLAG, 2);
            CHECK(dat_evd_dequeue(sw, &ev) == DAT_ERROR(DAT_QUEUE_EMPTY, 0));
            OK(dat_evd_free(sw));
        }
        clock_gettime(CLOCK_MONOTONIC, &t0);
        EXPECT(dat_evd_wait(evd, 150000, 1, &ev, &nmore), DAT_TIMEOUT_EXPIRED);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        us = (t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000;
        CHECK(us >= 140000 && us < 2000000);
        EXPECT(dat_evd_wait(evd, 0, 1, &ev, &nmore), DAT_TIMEOUT_EXPIRED);
        memset(&ev, 0, sizeof ev);
        ev.event_number = DAT_SOFTWARE_EVENT;
        ev.event_data.software_event_data.pointer = (void *)0x11;
        OK(dat_evd_post_se(evd, &ev));
        ev.event_data.software_event_data.pointer = (void *)0x22;
        OK(dat_evd_post_se(evd, &ev));
        /* threshold 3 is not met by 2 events */
        EXPECT(dat_evd_wait(evd, 100000, 3, &ev, &nmore), DAT_TIMEOUT_EXPIRED);
        CHECK(nmore == 2);
        OK(dat_evd_wait(evd, 100000, 2, &ev, &nmore));
        CHECK(ev.event_number == DAT_SOFTWARE_EVENT && ev.evd_handle == evd);
        CHECK(ev.event_data.software_event_data.pointer == (void *)0x11 && nmore == 1);
        OK(dat_evd_dequeue(evd, &ev));
        CHECK(ev.event_data.software_event_data.pointer == (void *)0x22);
        EXPECT(dat_evd_wait(evd, 1000, 5, &ev, &nmore), DAT_INVALID_PARAMETER); /* > qlen */
        EXPECT(dat_evd_wait(evd, 1000, 0, &ev, &nmore), DAT_INVALID_PARAMETER);
        /* a waiter is woken by an event posted from another thread */
        pthread_create(&th, NULL, post_later, evd);
        OK(dat_evd_wait(evd, 5 * SEC, 1, &ev, &nmore));
        CHECK(ev.event_data.software_event_data.pointer == (void *)0x77);
        pthread_join(th, NULL);
        /* queue full */
        ev.event_number = DAT_SOFTWARE_EVENT;
        for (n = 0; n < 4; ++n) OK(dat_evd_post_se(evd, &ev));
        EXPECT(dat_evd_post_se(evd, &ev), DAT_QUEUE_FULL);
        EXPECT(dat_evd_resize(evd, 2), DAT_INVALID_STATE);
        OK(dat_evd_resize(evd, 8));
        OK(dat_evd_post_se(evd, &ev));
        OK(dat_evd_query(evd, DAT_EVD_FIELD_ALL, &ep));
        CHECK(ep.evd_qlen == 8 && ep.ia_handle == ia && ep.evd_state == (DAT_EVD_STATE_ENABLED | DAT_EVD_STATE_WAITABLE));
        for (n = 0; n < 5; ++n) OK(dat_evd_dequeue(evd, &ev));
        ev.event_number = DAT_DTO_COMPLETION_EVENT;
        EXPECT(dat_evd_post_se(evd, &ev), DAT_INVALID_PARAMETER);
    }

    STEP("EVD: unwaitable wakes the waiter; enable/disable; free");
    {
        pthread_t th;
        DAT_EVD_PARAM ep;
        pthread_create(&th, NULL, unwait_later, evd);
        EXPECT(dat_evd_wait(evd, 5 * SEC, 1, &ev, &nmore), DAT_INVALID_STATE);
        pthread_join(th, NULL);
        EXPECT(dat_evd_wait(evd, 1000, 1, &ev, &nmore), DAT_INVALID_STATE);
        OK(dat_evd_clear_unwaitable(evd));
        EXPECT(dat_evd_wait(evd, 1000, 1, &ev, &nmore), DAT_TIMEOUT_EXPIRED);
        OK(dat_evd_disable(evd));
        OK(dat_evd_query(evd, DAT_EVD_FIELD_ALL, &ep));
        CHECK(ep.evd_state == (DAT_EVD_STATE_DISABLED | DAT_EVD_STATE_WAITABLE));
        OK(dat_evd_enable(evd));
    }

    STEP("CNO: an event on an attached EVD triggers dat_cno_wait");
    {
        DAT_CNO_HANDLE cno;
        DAT_EVD_HANDLE got;
        DAT_CNO_PARAM cp;
        OK(dat_cno_create(ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &cno));
        OK(dat_evd_modify_cno(evd, cno));
        got = evd;
        /* timeout: DAT_QUEUE_EMPTY (DAT 1.2; bare, as compat-dapl), NULL EVD */
        CHECK(dat_cno_wait(cno, 50000, &got) == DAT_QUEUE_EMPTY && got == DAT_HANDLE_NULL);
        memset(&ev, 0, sizeof ev);
        ev.event_number = DAT_SOFTWARE_EVENT;
        OK(dat_evd_post_se(evd, &ev));
        OK(dat_cno_wait(cno, SEC, &got));
        CHECK(got == evd);
        OK(dat_evd_dequeue(evd, &ev));
        OK(dat_cno_query(cno, DAT_CNO_FIELD_ALL, &cp));
        CHECK(cp.ia_handle == ia);
        EXPECT(dat_cno_free(cno), DAT_INVALID_STATE); /* still attached */
        OK(dat_evd_modify_cno(evd, DAT_HANDLE_NULL));
        OK(dat_cno_free(cno));
    }

    STEP("CNO: dat_cno_wait names the EVD that triggered, not one that merely holds events");
    {
        DAT_CNO_HANDLE cno;
        DAT_EVD_HANDLE a, b, got;
        pthread_t th;
        OK(dat_cno_create(ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &cno));
        OK(dat_evd_create(ia, 8, cno, DAT_EVD_SOFTWARE_FLAG, &a));
        OK(dat_evd_create(ia, 8, cno, DAT_EVD_SOFTWARE_FLAG, &b));
        memset(&ev, 0, sizeof ev);
        ev.event_number = DAT_SOFTWARE_EVENT;
        /* b, the later EVD, triggers; a's event arrives while the CNO is
         * triggered and is dropped (as in compat-dapl) */
        OK(dat_evd_post_se(b, &ev));
        OK(dat_evd_post_se(a, &ev));
        OK(dat_cno_wait(cno, SEC, &got));
        CHECK(got == b);
        OK(dat_evd_dequeue(b, &ev));
        /* a still holds its event, seen before: it does not trigger again */
        got = a;
        CHECK(dat_cno_wait(cno, 20000, &got) == DAT_QUEUE_EMPTY && got == DAT_HANDLE_NULL);
        /* a new event on b triggers; a still holds one: the answer is b */
        ev.event_number = DAT_SOFTWARE_EVENT;
        OK(dat_evd_post_se(b, &ev));
        OK(dat_cno_wait(cno, SEC, &got));
        CHECK(got == b);
        OK(dat_evd_dequeue(b, &ev));
        /* the same from another thread while dat_cno_wait sleeps */
        pthread_create(&th, NULL, post_later, b);
        OK(dat_cno_wait(cno, 5 * SEC, &got));
        CHECK(got == b);
        pthread_join(th, NULL);
        OK(dat_evd_dequeue(b, &ev));
        CHECK(ev.event_data.software_event_data.pointer == (void *)0x77);
        /* a disabled EVD does not trigger, and enabling it does not trigger
         * for what arrived meanwhile */
        OK(dat_evd_disable(b));
        ev.event_number = DAT_SOFTWARE_EVENT;
        OK(dat_evd_post_se(b, &ev));
        CHECK(dat_cno_wait(cno, 20000, &got) == DAT_QUEUE_EMPTY);
        OK(dat_evd_enable(b));
        CHECK(dat_cno_wait(cno, 20000, &got) == DAT_QUEUE_EMPTY);
        OK(dat_evd_post_se(b, &ev));
        OK(dat_cno_wait(cno, SEC, &got));
        CHECK(got == b);
        while (dat_evd_dequeue(b, &ev) == DAT_SUCCESS) {
        }
        /* a thread waiting on the EVD itself preempts the CNO, whatever its
         * threshold */
        pthread_create(&th, NULL, post_later, b);
        OK(dat_evd_wait(b, 5 * SEC, 1, &ev, &nmore));
        pthread_join(th, NULL);
        CHECK(dat_cno_wait(cno, 20000, &got) == DAT_QUEUE_EMPTY);
        /* an unwaitable EVD still triggers */
        OK(dat_evd_set_unwaitable(b));
        ev.event_number = DAT_SOFTWARE_EVENT;
        OK(dat_evd_post_se(b, &ev));
        OK(dat_cno_wait(cno, SEC, &got));
        CHECK(got == b);
        OK(dat_evd_clear_unwaitable(b));
        OK(dat_evd_dequeue(b, &ev));
        OK(dat_evd_modify_cno(a, DAT_HANDLE_NULL));
        OK(dat_evd_dequeue(a, &ev));
        OK(dat_evd_free(a));
        OK(dat_evd_free(b));
        OK(dat_cno_free(cno));
    }

    STEP("connection: private data both ways, send/recv, RDMA read, graceful disconnect");
    {
        struct sockaddr_in sa = loopback();
        DAT_CR_PARAM crp;
        DAT_EP_PARAM epp;
        lmr_t ls, lr, lt;
        DAT_LMR_TRIPLET t;
        DAT_RMR_TRIPLET r;
        DAT_DTO_COMPLETION_EVENT_DATA d;
        char hello[] = "client-hello", reply[] = "server-reply";
        pair_objects(&p, ia, NULL);
        OK(dat_ep_connect(p.cep, (DAT_IA_ADDRESS_PTR)&sa, p.port, 5 * SEC, sizeof hello, hello, DAT_QOS_BEST_EFFORT,
                          DAT_CONNECT_DEFAULT_FLAG));
        CHECK(ep_state_of(p.cep) == DAT_EP_STATE_ACTIVE_CONNECTION_PENDING);
        ev = wait_event(p.s_cr, DAT_CONNECTION_REQUEST_EVENT);
        CHECK(ev.event_data.cr_arrival_event_data.sp_handle.psp_handle == p.psp);
        CHECK(ev.event_data.cr_arrival_event_data.conn_qual == p.port);
        OK(dat_cr_query(ev.event_data.cr_arrival_event_data.cr_handle, DAT_CR_FIELD_ALL, &crp));
        CHECK(crp.private_data_size == (DAT_COUNT)sizeof hello && memcmp(crp.private_data, hello, sizeof hello) == 0);
        CHECK(crp.remote_ia_address_ptr && crp.remote_ia_address_ptr->sa_family == AF_INET);
        CHECK(((struct sockaddr_in *)crp.remote_ia_address_ptr)->sin_addr.s_addr == htonl(INADDR_LOOPBACK));
        /* post a receive before the connection is up */
        lr = mk_lmr(ia, p.spz, rbuf, sizeof rbuf, DAT_MEM_PRIV_LOCAL_WRITE_FLAG);
        t = seg(&lr, rbuf, 100);
        OK(dat_ep_post_recv(p.sep, 1, &t, cookie64(500), 0));
        OK(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, p.sep, sizeof reply, reply));
        EXPECT(dat_cr_reject(ev.event_data.cr_arrival_event_data.cr_handle), DAT_INVALID_HANDLE); /* consumed */
        ev = wait_event(p.c_conn, DAT_CONNECTION_EVENT_ESTABLISHED);
        CHECK(ev.event_data.connect_event_data.ep_handle == p.cep);
        CHECK(ev.event_data.connect_event_data.private_data_size == (DAT_COUNT)sizeof reply);
        CHECK(memcmp(ev.event_data.connect_event_data.private_data, reply, sizeof reply) == 0);
        wait_event(p.s_conn, DAT_CONNECTION_EVENT_ESTABLISHED);
        CHECK(ep_state_of(p.cep) == DAT_EP_STATE_CONNECTED && ep_state_of(p.sep) == DAT_EP_STATE_CONNECTED);
        OK(dat_ep_query(p.cep, DAT_EP_FIELD_ALL, &epp));
        CHECK(epp.pz_handle == p.cpz && epp.request_evd_handle == p.c_req && epp.remote_port_qual == p.port);

        ls = mk_lmr(ia, p.cpz, sbuf, sizeof sbuf, DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_LOCAL_WRITE_FLAG);
        strcpy(sbuf, "a message");
        t = seg(&ls, sbuf, 10);
        OK(dat_ep_post_send(p.cep, 1, &t, cookie64(501), 0));
        d = wait_dto(p.s_rcv);
        CHECK(d.user_cookie.as_64 == 500 && d.status == DAT_DTO_SUCCESS && d.transfered_length == 10);
        CHECK(strcmp(rbuf, "a message") == 0);
        d = wait_dto(p.c_req);
        CHECK(d.user_cookie.as_64 == 501 && d.status == DAT_DTO_SUCCESS);

        /* RDMA read of a server region */
        lt = mk_lmr(ia, p.spz, tbuf, sizeof tbuf, DAT_MEM_PRIV_LOCAL_WRITE_FLAG | DAT_MEM_PRIV_REMOTE_READ_FLAG);
        strcpy(tbuf, "remote bytes");
        t = seg(&ls, sbuf + 1000, 13);
        r = rseg(&lt, tbuf, 13);
        OK(dat_ep_post_rdma_read(p.cep, 1, &t, cookie64(502), &r, 0));
        d = wait_dto(p.c_req);
        CHECK(d.status == DAT_DTO_SUCCESS && d.transfered_length == 13 && strcmp(sbuf + 1000, "remote bytes") == 0);
        /* read: local vector too small for the remote buffer */
        t = seg(&ls, sbuf, 5);
        EXPECT(dat_ep_post_rdma_read(p.cep, 1, &t, cookie64(0), &r, 0), DAT_LENGTH_ERROR);
        /* read into a buffer without local write */
        {
            lmr_t ro = mk_lmr(ia, p.cpz, sbuf, sizeof sbuf, DAT_MEM_PRIV_LOCAL_READ_FLAG);
            t = seg(&ro, sbuf, 13);
            EXPECT(dat_ep_post_rdma_read(p.cep, 1, &t, cookie64(0), &r, 0), DAT_PRIVILEGES_VIOLATION);
            OK(dat_lmr_free(ro.h));
        }
        /* a receive too small for the message: local length error */
        t = seg(&lr, rbuf, 4);
        OK(dat_ep_post_recv(p.sep, 1, &t, cookie64(503), 0));
        t = seg(&ls, sbuf, 10);
        OK(dat_ep_post_send(p.cep, 1, &t, cookie64(504), 0));
        d = wait_dto(p.s_rcv);
        CHECK(d.user_cookie.as_64 == 503 && d.status == DAT_DTO_ERR_LOCAL_LENGTH);
        while (dat_evd_wait(p.c_req, 200000, 1, &ev, &nmore) == DAT_SUCCESS) {
        }
        while (dat_evd_wait(p.c_conn, 200000, 1, &ev, &nmore) == DAT_SUCCESS) {
        }
        while (dat_evd_wait(p.s_conn, 200000, 1, &ev, &nmore) == DAT_SUCCESS) {
        }

        STEP("graceful dat_ep_disconnect lets posted requests complete");
        if (ep_state_of(p.cep) == DAT_EP_STATE_CONNECTED) {
            DAT_RMR_TRIPLET wr;
            lmr_t lw = mk_lmr(ia, p.spz, tbuf, sizeof tbuf, DAT_MEM_PRIV_ALL_FLAG);
            int k;
            t = seg(&ls, sbuf, 4096);
            for (k = 0; k < 8; ++k) {
                wr = rseg(&lw, tbuf, 4096);
                OK(dat_ep_post_rdma_write(p.cep, 1, &t, cookie64(800 + k), &wr, 0));
            }
            OK(dat_ep_disconnect(p.cep, DAT_CLOSE_GRACEFUL_FLAG));
            for (k = 0; k < 8; ++k) {
                d = wait_dto(p.c_req);
                CHECK(d.user_cookie.as_64 == (DAT_UINT64)(800 + k) && d.status == DAT_DTO_SUCCESS);
            }
            wait_event(p.c_conn, DAT_CONNECTION_EVENT_DISCONNECTED);
            OK(dat_lmr_free(lw.h));
            fprintf(stderr, "   8 writes completed before the disconnect\n");
        }
        STEP("dat_ep_reset returns a disconnected EP to UNCONNECTED; reconnect");
        CHECK(ep_state_of(p.cep) == DAT_EP_STATE_DISCONNECTED);
        EXPECT(dat_ep_connect(p.cep, (DAT_IA_ADDRESS_PTR)&sa, p.port, SEC, 0, NULL, 0, 0), DAT_INVALID_STATE);
        OK(dat_ep_reset(p.cep));
        CHECK(ep_state_of(p.cep) == DAT_EP_STATE_UNCONNECTED);
        OK(dat_ep_free(p.sep));
        {
            DAT_EP_ATTR a = default_ep_attr();
            OK(dat_ep_create(ia, p.spz, p.s_rcv, p.s_req, p.s_conn, &a, &p.sep));
        }
        pair_connect(&p);
        OK(dat_lmr_free(ls.h));
        OK(dat_lmr_free(lr.h));
        OK(dat_lmr_free(lt.h));
    }

    STEP("RMR: bind a window over part of an LMR, write through it, unbind");
    {
        DAT_RMR_HANDLE rmr;
        DAT_RMR_CONTEXT rctx;
        DAT_RMR_PARAM rp;
        DAT_RMR_COOKIE rc;
        lmr_t ls, lt;
        DAT_LMR_TRIPLET t, w;
        DAT_RMR_TRIPLET r;
        DAT_DTO_COMPLETION_EVENT_DATA d;
        ls = mk_lmr(ia, p.cpz, sbuf, sizeof sbuf, DAT_MEM_PRIV_LOCAL_READ_FLAG);
        lt = mk_lmr(ia, p.spz, tbuf, sizeof tbuf, DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_LOCAL_WRITE_FLAG);
        CHECK(lt.rctx == 0);
        OK(dat_rmr_create(p.spz, &rmr));
        w = seg(&lt, tbuf + 1024, 512);
        rc.as_64 = 99;
        EXPECT(dat_rmr_bind(rmr, &w, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, p.cep, rc, 0, &rctx), DAT_PROTECTION_VIOLATION);
        OK(dat_rmr_bind(rmr, &w, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, p.sep, rc, 0, &rctx));
        CHECK(rctx != 0);
        ev = wait_event(p.s_req, DAT_RMR_BIND_COMPLETION_EVENT);
        CHECK(ev.event_data.rmr_completion_event_data.rmr_handle == rmr);
        CHECK(ev.event_data.rmr_completion_event_data.user_cookie.as_64 == 99);
        CHECK(ev.event_data.rmr_completion_event_data.status == DAT_DTO_SUCCESS);
        EXPECT(dat_lmr_free(lt.h), DAT_INVALID_STATE); /* a window is bound to it */
        OK(dat_rmr_query(rmr, DAT_RMR_FIELD_ALL, &rp));
        CHECK(rp.rmr_context == rctx && rp.pz_handle == p.spz && rp.lmr_triplet.segment_length == 512);
        strcpy(sbuf, "through the window");
        t = seg(&ls, sbuf, 19);
        r.rmr_context = rctx;
        r.pad = 0;
        r.target_address = (DAT_VADDR)(uintptr_t)(tbuf + 1024);
        r.segment_length = 512;
        OK(dat_ep_post_rdma_write(p.cep, 1, &t, cookie64(600), &r, 0));
        d = wait_dto(p.c_req);
        CHECK(d.status == DAT_DTO_SUCCESS && strcmp(tbuf + 1024, "through the window") == 0);
        /* unbind: a zero-length triplet */
        w.segment_length = 0;
        OK(dat_rmr_bind(rmr, &w, DAT_MEM_PRIV_NONE_FLAG, p.sep, rc, DAT_COMPLETION_SUPPRESS_FLAG, &rctx));
        OK(dat_rmr_free(rmr));
        OK(dat_lmr_free(lt.h));
        OK(dat_lmr_free(ls.h));
    }

    STEP("PSP: DAT_CONN_QUAL_IN_USE, query, reject, handoff");
    {
        DAT_PSP_HANDLE psp2, psp3;
        DAT_PSP_PARAM pp;
        DAT_CONN_QUAL q3;
        DAT_EP_HANDLE c2;
        struct sockaddr_in sa = loopback();
        cr_evd = mk_evd(ia, DAT_EVD_CR_FLAG, 8);
        EXPECT(dat_psp_create(ia, p.port, cr_evd, DAT_PSP_CONSUMER_FLAG, &psp2), DAT_CONN_QUAL_IN_USE);
        EXPECT(dat_psp_create(ia, 5555, p.c_req, DAT_PSP_CONSUMER_FLAG, &psp2), DAT_INVALID_HANDLE);
        OK(dat_psp_query(p.psp, DAT_PSP_FIELD_ALL, &pp));
        CHECK(pp.conn_qual == p.port && pp.evd_handle == p.s_cr && pp.ia_handle == ia);
        OK(dat_psp_create_any(ia, &q3, cr_evd, DAT_PSP_CONSUMER_FLAG, &psp3));
        OK(dat_ep_create(ia, p.cpz, p.c_rcv, p.c_req, p.c_conn, NULL, &c2));
        /* reject */
        OK(dat_ep_connect(c2, (DAT_IA_ADDRESS_PTR)&sa, p.port, 5 * SEC, 0, NULL, 0, 0));
        ev = wait_event(p.s_cr, DAT_CONNECTION_REQUEST_EVENT);
        OK(dat_cr_reject(ev.event_data.cr_arrival_event_data.cr_handle));
        ev = wait_event(p.c_conn, DAT_CONNECTION_EVENT_PEER_REJECTED);
        CHECK(ev.event_data.connect_event_data.ep_handle == c2);
        CHECK(ep_state_of(c2) == DAT_EP_STATE_DISCONNECTED);
        OK(dat_ep_reset(c2));
        /* handoff to the PSP on q3 */
        OK(dat_ep_connect(c2, (DAT_IA_ADDRESS_PTR)&sa, p.port, 5 * SEC, 3, "hi", 0, 0));
        ev = wait_event(p.s_cr, DAT_CONNECTION_REQUEST_EVENT);
        EXPECT(dat_cr_handoff(ev.event_data.cr_arrival_event_data.cr_handle, 1), DAT_INVALID_PARAMETER);
        OK(dat_cr_handoff(ev.event_data.cr_arrival_event_data.cr_handle, q3));
        ev = wait_event(cr_evd, DAT_CONNECTION_REQUEST_EVENT);
        CHECK(ev.event_data.cr_arrival_event_data.sp_handle.psp_handle == psp3);
        {
            DAT_EP_HANDLE s2;
            DAT_CR_PARAM crp;
            OK(dat_cr_query(ev.event_data.cr_arrival_event_data.cr_handle, DAT_CR_FIELD_ALL, &crp));
            CHECK(crp.private_data_size == 3 && strcmp(crp.private_data, "hi") == 0);
            OK(dat_ep_create(ia, p.spz, p.s_rcv, p.s_req, p.s_conn, NULL, &s2));
            OK(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, s2, 0, NULL));
            wait_event(p.c_conn, DAT_CONNECTION_EVENT_ESTABLISHED);
            wait_event(p.s_conn, DAT_CONNECTION_EVENT_ESTABLISHED);
            STEP("dat_ep_disconnect abrupt: both sides see DISCONNECTED");
            OK(dat_ep_disconnect(s2, DAT_CLOSE_ABRUPT_FLAG));
            ev = wait_event(p.s_conn, DAT_CONNECTION_EVENT_DISCONNECTED);
            CHECK(ev.event_data.connect_event_data.ep_handle == s2);
            ev = wait_event(p.c_conn, DAT_CONNECTION_EVENT_DISCONNECTED);
            CHECK(ev.event_data.connect_event_data.ep_handle == c2);
            OK(dat_ep_free(s2));
        }
        OK(dat_ep_free(c2));
        EXPECT(dat_evd_free(cr_evd), DAT_INVALID_STATE); /* psp3 uses it */
        OK(dat_psp_free(psp3));
        OK(dat_evd_free(cr_evd));
    }

    STEP("dat_ep_dup_connect: same remote as a connected EP");
    {
        DAT_EP_HANDLE c3;
        OK(dat_ep_create(ia, p.cpz, p.c_rcv, p.c_req, p.c_conn, NULL, &c3));
        OK(dat_ep_dup_connect(c3, p.cep, 5 * SEC, 0, NULL, 0));
        ev = wait_event(p.s_cr, DAT_CONNECTION_REQUEST_EVENT);
        OK(dat_cr_reject(ev.event_data.cr_arrival_event_data.cr_handle));
        wait_event(p.c_conn, DAT_CONNECTION_EVENT_PEER_REJECTED);
        OK(dat_ep_free(c3));
    }

    STEP("one EVD serves EPs of two protection zones");
    {
        DAT_EP_HANDLE x, y;
        DAT_EVD_HANDLE shared = mk_evd(ia, DAT_EVD_DTO_FLAG | DAT_EVD_CONNECTION_FLAG, 16);
        struct sockaddr_in sa = loopback();
        lmr_t lx, ly;
        DAT_LMR_TRIPLET t;
        DAT_RMR_TRIPLET r;
        int k, seen_x = 0, seen_y = 0;
        OK(dat_ep_create(ia, p.cpz, shared, shared, shared, NULL, &x));
        OK(dat_ep_create(ia, p.spz, shared, shared, shared, NULL, &y));
        lx = mk_lmr(ia, p.cpz, sbuf, 64, DAT_MEM_PRIV_LOCAL_READ_FLAG);
        ly = mk_lmr(ia, p.spz, rbuf, 64, DAT_MEM_PRIV_LOCAL_READ_FLAG);
        for (k = 0; k < 2; ++k) {
            OK(dat_ep_connect(k ? y : x, (DAT_IA_ADDRESS_PTR)&sa, p.port, 5 * SEC, 0, NULL, 0, 0));
            ev = wait_event(p.s_cr, DAT_CONNECTION_REQUEST_EVENT);
            OK(dat_cr_reject(ev.event_data.cr_arrival_event_data.cr_handle));
            wait_event(shared, DAT_CONNECTION_EVENT_PEER_REJECTED);
        }
        r.rmr_context = 1;
        r.pad = 0;
        r.target_address = 4096;
        r.segment_length = 64;
        t = seg(&lx, sbuf, 64);
        OK(dat_ep_post_rdma_write(x, 1, &t, cookie64(901), &r, 0));
        t = seg(&ly, rbuf, 64);
        OK(dat_ep_post_rdma_write(y, 1, &t, cookie64(902), &r, 0));
        for (k = 0; k < 2; ++k) {
            DAT_DTO_COMPLETION_EVENT_DATA d = wait_dto(shared);
            CHECK(d.status == DAT_DTO_ERR_FLUSHED);
            if (d.ep_handle == x && d.user_cookie.as_64 == 901) seen_x = 1;
            if (d.ep_handle == y && d.user_cookie.as_64 == 902) seen_y = 1;
        }
        CHECK(seen_x && seen_y);
        OK(dat_ep_free(x));
        OK(dat_ep_free(y));
        OK(dat_lmr_free(lx.h));
        OK(dat_lmr_free(ly.h));
        OK(dat_evd_free(shared));
    }

    STEP("DAT_LENGTH_ERROR: a send above max_message_size, an RDMA above max_rdma_size");
    {
        lmr_t l = mk_lmr(ia, p.cpz, sbuf, sizeof sbuf, DAT_MEM_PRIV_LOCAL_READ_FLAG);
        DAT_EP_HANDLE e;
        DAT_EP_ATTR a = default_ep_attr();
        DAT_LMR_TRIPLET t = seg(&l, sbuf, 2048);
        DAT_RMR_TRIPLET r;
        struct sockaddr_in sa = loopback();
        a.max_message_size = 1024;
        a.max_rdma_size = 1024;
        OK(dat_ep_create(ia, p.cpz, p.c_rcv, p.c_req, p.c_conn, &a, &e));
        OK(dat_ep_connect(e, (DAT_IA_ADDRESS_PTR)&sa, p.port, 5 * SEC, 0, NULL, 0, 0));
        ev = wait_event(p.s_cr, DAT_CONNECTION_REQUEST_EVENT);
        OK(dat_cr_reject(ev.event_data.cr_arrival_event_data.cr_handle));
        wait_event(p.c_conn, DAT_CONNECTION_EVENT_PEER_REJECTED);
        r.rmr_context = 1;
        r.pad = 0;
        r.target_address = 4096;
        r.segment_length = 4096;
        EXPECT(dat_ep_post_send(e, 1, &t, cookie64(0), 0), DAT_LENGTH_ERROR);
        EXPECT(dat_ep_post_rdma_write(e, 1, &t, cookie64(0), &r, 0), DAT_LENGTH_ERROR);
        OK(dat_ep_free(e));
        OK(dat_lmr_free(l.h));
    }

    STEP("connect timeout: DAT_CONNECTION_EVENT_TIMED_OUT");
    {
        DAT_EP_HANDLE c4;
        struct sockaddr_in sa = loopback();
        OK(dat_ep_create(ia, p.cpz, p.c_rcv, p.c_req, p.c_conn, NULL, &c4));
        OK(dat_ep_connect(c4, (DAT_IA_ADDRESS_PTR)&sa, p.port, 200000, 0, NULL, 0, 0));
        ev = wait_event(p.s_cr, DAT_CONNECTION_REQUEST_EVENT); /* left pending */
        ev = wait_event(p.c_conn, DAT_CONNECTION_EVENT_TIMED_OUT);
        CHECK(ev.event_data.connect_event_data.ep_handle == c4);
        CHECK(ep_state_of(c4) == DAT_EP_STATE_DISCONNECTED);
        OK(dat_ep_free(c4));
    }

    STEP("RSP: reserved EP, one request");
    {
        DAT_EP_HANDLE rep, c5;
        DAT_RSP_HANDLE rsp;
        DAT_RSP_PARAM rp;
        DAT_CR_PARAM crp;
        struct sockaddr_in sa = loopback();
        DAT_CONN_QUAL q = (DAT_CONN_QUAL)(20000 + getpid() % 20000);
        cr_evd = mk_evd(ia, DAT_EVD_CR_FLAG, 8);
        OK(dat_ep_create(ia, p.spz, p.s_rcv, p.s_req, p.s_conn, NULL, &rep));
        OK(dat_rsp_create(ia, q, rep, cr_evd, &rsp));
        CHECK(ep_state_of(rep) == DAT_EP_STATE_RESERVED);
        OK(dat_rsp_query(rsp, DAT_RSP_FIELD_ALL, &rp));
        CHECK(rp.ep_handle == rep && rp.conn_qual == q);
        OK(dat_ep_create(ia, p.cpz, p.c_rcv, p.c_req, p.c_conn, NULL, &c5));
        OK(dat_ep_connect(c5, (DAT_IA_ADDRESS_PTR)&sa, q, 5 * SEC, 0, NULL, 0, 0));
        ev = wait_event(cr_evd, DAT_CONNECTION_REQUEST_EVENT);
        CHECK(ev.event_data.cr_arrival_event_data.sp_handle.rsp_handle == rsp);
        CHECK(ep_state_of(rep) == DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING);
        OK(dat_cr_query(ev.event_data.cr_arrival_event_data.cr_handle, DAT_CR_FIELD_ALL, &crp));
        CHECK(crp.local_ep_handle == rep);
        OK(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, DAT_HANDLE_NULL, 0, NULL));
        wait_event(p.c_conn, DAT_CONNECTION_EVENT_ESTABLISHED);
        wait_event(p.s_conn, DAT_CONNECTION_EVENT_ESTABLISHED);
        CHECK(ep_state_of(rep) == DAT_EP_STATE_CONNECTED);
        OK(dat_rsp_free(rsp));
        OK(dat_ep_free(c5));
        OK(dat_ep_free(rep));
        OK(dat_evd_free(cr_evd));
    }

    STEP("SRQ: two EPs draw from one shared receive queue");
    {
        DAT_SRQ_HANDLE srq;
        DAT_SRQ_ATTR sa;
        DAT_SRQ_PARAM sp;
        DAT_EP_HANDLE se;
        DAT_EVD_HANDLE srecv = mk_evd(ia, DAT_EVD_DTO_FLAG, 16);
        DAT_DTO_COMPLETION_EVENT_DATA d;
        lmr_t lr, ls;
        DAT_LMR_TRIPLET t;
        DAT_COUNT nb, span;
        int i;
        pair_t q;
        sa.max_recv_dtos = 4;
        sa.max_recv_iov = 1;
        sa.low_watermark = 0;
        pair_objects(&q, ia, NULL);
        OK(dat_srq_create(ia, q.spz, &sa, &srq));
        OK(dat_ep_free(q.sep));
        OK(dat_ep_create_with_srq(ia, q.spz, srecv, q.s_req, q.s_conn, srq, NULL, &se));
        q.sep = se;
        pair_connect(&q);
        lr = mk_lmr(ia, q.spz, rbuf, sizeof rbuf, DAT_MEM_PRIV_LOCAL_WRITE_FLAG);
        ls = mk_lmr(ia, q.cpz, sbuf, sizeof sbuf, DAT_MEM_PRIV_LOCAL_READ_FLAG);
        for (i = 0; i < 4; ++i) {
            t = seg(&lr, rbuf + 64 * i, 64);
            OK(dat_srq_post_recv(srq, 1, &t, cookie64(700 + i)));
        }
        t = seg(&lr, rbuf, 64);
        EXPECT(dat_srq_post_recv(srq, 1, &t, cookie64(0)), DAT_INSUFFICIENT_RESOURCES);
        EXPECT(dat_ep_post_recv(se, 1, &t, cookie64(0), 0), DAT_INVALID_STATE);
        OK(dat_srq_query(srq, DAT_SRQ_FIELD_ALL, &sp));
        CHECK(sp.max_recv_dtos == 4 && sp.available_dto_count == 4 && sp.pz_handle == q.spz);
        strcpy(sbuf, "srq message");
        t = seg(&ls, sbuf, 12);
        OK(dat_ep_post_send(q.cep, 1, &t, cookie64(710), 0));
        d = wait_dto(srecv);
        CHECK(d.user_cookie.as_64 == 700 && d.ep_handle == se && d.transfered_length == 12);
        CHECK(strcmp(rbuf, "srq message") == 0);
        OK(dat_ep_recv_query(se, &nb, &span));
        CHECK(nb == 3);
        OK(dat_srq_resize(srq, 8));
        OK(dat_srq_set_lw(srq, 2));
        EXPECT(dat_srq_set_lw(srq, 9), DAT_INVALID_PARAMETER);
        EXPECT(dat_srq_free(srq), DAT_INVALID_STATE);
        OK(dat_ep_set_watermark(se, 2, 4));
        OK(dat_ep_free(q.cep));
        OK(dat_ep_free(se));
        OK(dat_srq_free(srq));
        OK(dat_lmr_free(lr.h));
        OK(dat_lmr_free(ls.h));
    }

    STEP("dat_ep_modify in UNCONNECTED; DAT_INVALID_STATE when connected");
    {
        DAT_EP_HANDLE e;
        DAT_EP_PARAM pp;
        OK(dat_ep_create(ia, DAT_HANDLE_NULL, DAT_HANDLE_NULL, DAT_HANDLE_NULL, DAT_HANDLE_NULL, NULL, &e));
        CHECK(ep_state_of(e) == DAT_EP_STATE_UNCONFIGURED_UNCONNECTED);
        memset(&pp, 0, sizeof pp);
        pp.pz_handle = p.cpz;
        pp.request_evd_handle = p.c_req;
        pp.recv_evd_handle = p.c_rcv;
        pp.connect_evd_handle = p.c_conn;
        pp.ep_attr.max_request_dtos = 32;
        OK(dat_ep_modify(e, DAT_EP_FIELD_PZ_HANDLE | DAT_EP_FIELD_REQUEST_EVD_HANDLE | DAT_EP_FIELD_RECV_EVD_HANDLE |
                                DAT_EP_FIELD_CONNECT_EVD_HANDLE | DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS,
                         &pp));
        CHECK(ep_state_of(e) == DAT_EP_STATE_UNCONNECTED);
        OK(dat_ep_query(e, DAT_EP_FIELD_ALL, &pp));
        CHECK(pp.pz_handle == p.cpz && pp.ep_attr.max_request_dtos == 32);
        EXPECT(dat_ep_modify(e, DAT_EP_FIELD_EP_STATE, &pp), DAT_INVALID_PARAMETER);
        EXPECT(dat_ep_modify(p.cep, DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS, &pp), DAT_INVALID_STATE);
        EXPECT(dat_pz_free(p.cpz), DAT_INVALID_STATE); /* in use */
        OK(dat_ep_free(e));
    }

    STEP("dat_ia_close: graceful refuses while objects exist; abrupt frees them");
    EXPECT(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG), DAT_INVALID_STATE);
    OK(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG));
    EXPECT(dat_pz_free(p.cpz), DAT_INVALID_HANDLE);
    EXPECT(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_INVALID_HANDLE);

    STEP("an abrupt dat_ia_close also frees EVDs created on the IA");
    {
        DAT_EVD_HANDLE mine;
        ia2 = open_ia(IA_NAME, &async);
        mine = mk_evd(ia2, DAT_EVD_ASYNC_FLAG, 4);
        OK(dat_ia_close(ia2, DAT_CLOSE_ABRUPT_FLAG));
        (void)mine;
    }
    printf("test_api: ok\n");
    return 0;
}
