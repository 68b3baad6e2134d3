/* compat/dat/tests/test_lmr_create.c - dat_lmr_create(3DAT), one block per
 * paragraph of the seed page (shared/seeds/004_*.txt). */
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "dat_test.h"

#define SHM_LEN 65536

static char buf[16384], buf2[4096];

static DAT_MEM_TYPE queried_type(DAT_LMR_HANDLE h) {
    DAT_LMR_PARAM p;
    OK(dat_lmr_query(h, DAT_LMR_FIELD_ALL, &p));
    return p.mem_type;
}

static void make_cookie(char *c, unsigned tag, unsigned last) {
    /* A NUL early on: the provider must compare all 40 bytes, not a string. */
    memset(c, 0, DAT_LMR_COOKIE_SIZE);
    snprintf(c, 12, "rd%08x", tag);
    c[DAT_LMR_COOKIE_SIZE - 1] = (char)last;
}

static void *map_shm(const char *name, int create) {
    int fd = shm_open(name, O_RDWR | (create ? O_CREAT : 0), 0600);
    void *p;
    CHECK(fd >= 0);
    if (create) CHECK(ftruncate(fd, SHM_LEN) == 0);
    p = mmap(NULL, SHM_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    close(fd);
    return p;
}

static DAT_RETURN shared_lmr(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, void *p, char *cookie, DAT_LMR_HANDLE *h) {
    DAT_REGION_DESCRIPTION r;
    DAT_LMR_CONTEXT lc;
    DAT_RMR_CONTEXT rc;
    DAT_VLEN sz;
    DAT_VADDR va;
    r.for_shared_memory.virtual_address = p;
    r.for_shared_memory.shared_memory_id = (DAT_LMR_COOKIE)cookie; /* cookie holds DAT_LMR_COOKIE_SIZE bytes */
    return dat_lmr_create(ia, DAT_MEM_TYPE_SHARED_VIRTUAL, r, SHM_LEN, pz, DAT_MEM_PRIV_ALL_FLAG, h, &lc, &rc, &sz,
                          &va);
}

static void cleanup_cookie(const char *c) {
    char path[200] = "/dev/shm/remora-dat-cookie-";
    size_t n = strlen(path);
    int i;
    for (i = 0; i < DAT_LMR_COOKIE_SIZE; ++i) n += (size_t)sprintf(path + n, "%02x", (unsigned char)c[i]);
    unlink(path);
}

/* The second process: maps the same shared objects at its own addresses. */
static int child(const char *shm_a, const char *shm_b, unsigned tag) {
    DAT_EVD_HANDLE async;
    DAT_IA_HANDLE ia = open_ia(IA_NAME, &async);
    DAT_PZ_HANDLE pz;
    DAT_LMR_HANDLE h;
    char ca[DAT_LMR_COOKIE_SIZE], cb[DAT_LMR_COOKIE_SIZE];
    void *a = map_shm(shm_a, 0), *b = map_shm(shm_b, 0);
    make_cookie(ca, tag, 1);
    make_cookie(cb, tag, 2); /* differs from ca only in byte 39 */
    OK(dat_pz_create(ia, &pz));
    /* Same cookie, same object: shared. */
    OK(shared_lmr(ia, pz, a, ca, &h));
    CHECK(memcmp(a, "parent", 7) == 0);
    OK(dat_lmr_free(h));
    /* Same cookie, another object: refused. */
    EXPECT(shared_lmr(ia, pz, b, ca, &h), DAT_INVALID_PARAMETER);
    /* A cookie that differs only after the NUL names another region. */
    OK(shared_lmr(ia, pz, b, cb, &h));
    OK(dat_lmr_free(h));
    OK(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG));
    return 0;
}

int main(int argc, char **argv) {
    DAT_EVD_HANDLE async, async2;
    DAT_IA_HANDLE ia, ia_ro;
    DAT_PZ_HANDLE pz, pz2, pz_ro;
    DAT_REGION_DESCRIPTION r;
    DAT_LMR_HANDLE h, h2;
    DAT_LMR_CONTEXT lc;
    DAT_RMR_CONTEXT rc;
    DAT_VLEN sz;
    DAT_VADDR va;
    DAT_LMR_PARAM q;
    alarm(120);
    if (argc == 5 && strcmp(argv[1], "--child") == 0) return child(argv[2], argv[3], (unsigned)strtoul(argv[4], 0, 16));

    ia = open_ia(IA_NAME, &async);
    OK(dat_pz_create(ia, &pz));
    OK(dat_pz_create(ia, &pz2));

    STEP("DAT_MEM_TYPE_VIRTUAL: a contiguous user virtual range");
    r.for_va = buf;
    OK(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, sizeof buf, pz, DAT_MEM_PRIV_LOCAL_READ_FLAG, &h, &lc, &rc, &sz, &va));
    STEP("... implicitly DAT_MEM_TYPE_SO_VIRTUAL when the IA name has no RO_AWARE_ prefix");
    CHECK(queried_type(h) == DAT_MEM_TYPE_SO_VIRTUAL);
    OK(dat_lmr_free(h));

    STEP("... and kept VIRTUAL on an IA opened as RO_AWARE_" IA_NAME);
    ia_ro = open_ia("RO_AWARE_" IA_NAME, &async2);
    OK(dat_pz_create(ia_ro, &pz_ro));
    OK(dat_lmr_create(ia_ro, DAT_MEM_TYPE_VIRTUAL, r, sizeof buf, pz_ro, DAT_MEM_PRIV_LOCAL_READ_FLAG, &h, &lc, &rc,
                      &sz, &va));
    CHECK(queried_type(h) == DAT_MEM_TYPE_VIRTUAL);
    OK(dat_lmr_free(h));
    OK(dat_pz_free(pz_ro));
    OK(dat_ia_close(ia_ro, DAT_CLOSE_GRACEFUL_FLAG));

    STEP("DAT_MEM_TYPE_SO_VIRTUAL: strong ordering, asked for directly");
    OK(dat_lmr_create(ia, DAT_MEM_TYPE_SO_VIRTUAL, r, sizeof buf, pz, DAT_MEM_PRIV_LOCAL_READ_FLAG, &h, &lc, &rc, &sz,
                      &va));
    CHECK(queried_type(h) == DAT_MEM_TYPE_SO_VIRTUAL);
    OK(dat_lmr_free(h));

    STEP("registered_size / registered_address cover the range asked for");
    r.for_va = buf + 100;
    OK(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, 5000, pz, DAT_MEM_PRIV_LOCAL_READ_FLAG, &h, &lc, &rc, &sz, &va));
    CHECK(va <= (DAT_VADDR)(uintptr_t)(buf + 100));
    CHECK(va + sz >= (DAT_VADDR)(uintptr_t)(buf + 100) + 5000);
    OK(dat_lmr_query(h, DAT_LMR_FIELD_ALL, &q));
    CHECK(q.registered_size == sz && q.registered_address == va && q.lmr_context == lc && q.pz_handle == pz);
    CHECK(q.ia_handle == ia && q.mem_priv == DAT_MEM_PRIV_LOCAL_READ_FLAG && q.length == 5000);

    STEP("DAT_MEM_TYPE_LMR: an LMR over an existing LMR, another PZ and privileges");
    {
        DAT_REGION_DESCRIPTION r2;
        DAT_VLEN sz2;
        DAT_VADDR va2;
        DAT_LMR_CONTEXT lc2;
        DAT_RMR_CONTEXT rc2 = 0;
        r2.for_lmr_handle = h;
        OK(dat_lmr_create(ia, DAT_MEM_TYPE_LMR, r2, 12345 /* ignored */, pz2, DAT_MEM_PRIV_ALL_FLAG, &h2, &lc2, &rc2,
                          &sz2, &va2));
        CHECK(sz2 == sz && va2 == va);
        CHECK(lc2 != lc && rc2 != 0);
        OK(dat_lmr_query(h2, DAT_LMR_FIELD_ALL, &q));
        CHECK(q.mem_type == DAT_MEM_TYPE_LMR && q.pz_handle == pz2 && q.mem_priv == DAT_MEM_PRIV_ALL_FLAG);
        /* The new LMR is usable by an EP of pz2: post a receive into it. */
        {
            DAT_EVD_HANDLE e = mk_evd(ia, DAT_EVD_DTO_FLAG, 8);
            DAT_EP_HANDLE ep;
            DAT_LMR_TRIPLET t;
            lmr_t wrap;
            wrap.lctx = lc2;
            OK(dat_ep_create(ia, pz2, e, e, DAT_HANDLE_NULL, NULL, &ep));
            t = seg(&wrap, buf + 100, 64);
            OK(dat_ep_post_recv(ep, 1, &t, cookie64(1), 0));
            wrap.lctx = lc; /* the original LMR is read-only and in pz */
            t = seg(&wrap, buf + 100, 64);
            EXPECT(dat_ep_post_recv(ep, 1, &t, cookie64(2), 0), DAT_PROTECTION_VIOLATION);
            OK(dat_ep_free(ep));
            OK(dat_evd_free(e));
        }
        OK(dat_lmr_free(h2));
    }
    OK(dat_lmr_free(h));

    STEP("rmr_context only when remote read or write was asked for");
    r.for_va = buf;
    rc = 0xdeadbeef;
    OK(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, sizeof buf, pz,
                      DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_LOCAL_WRITE_FLAG, &h, &lc, &rc, &sz, &va));
    CHECK(rc == 0);
    OK(dat_lmr_query(h, DAT_LMR_FIELD_ALL, &q));
    CHECK(q.rmr_context == 0);
    OK(dat_lmr_free(h));
    OK(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, sizeof buf, pz, DAT_MEM_PRIV_REMOTE_READ_FLAG, &h, &lc, &rc, &sz, &va));
    CHECK(rc != 0);
    OK(dat_lmr_free(h));
    OK(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, sizeof buf, pz, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, &h, &lc, &rc, &sz, &va));
    CHECK(rc != 0);
    OK(dat_lmr_free(h));
    STEP("DAT_MEM_PRIV_NONE_FLAG is the default and registers");
    OK(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, sizeof buf, pz, DAT_MEM_PRIV_NONE_FLAG, &h, &lc, &rc, &sz, &va));
    CHECK(rc == 0);
    OK(dat_lmr_free(h));

    STEP("an advertised rmr_context is invalidated only by dat_lmr_free");
    {
        pair_t p;
        lmr_t ls, lt;
        DAT_LMR_TRIPLET t;
        DAT_RMR_TRIPLET rt;
        DAT_DTO_COMPLETION_EVENT_DATA d;
        pair_open(&p, ia, NULL);
        ls = mk_lmr(ia, p.cpz, buf, sizeof buf, DAT_MEM_PRIV_LOCAL_READ_FLAG);
        lt = mk_lmr(ia, p.spz, buf2, sizeof buf2, DAT_MEM_PRIV_ALL_FLAG);
        t = seg(&ls, buf, 8);
        rt = rseg(&lt, buf2, 8);
        memcpy(buf, "12345678", 8);
        OK(dat_ep_post_rdma_write(p.cep, 1, &t, cookie64(1), &rt, 0));
        d = wait_dto(p.c_req);
        CHECK(d.status == DAT_DTO_SUCCESS && memcmp(buf2, "12345678", 8) == 0);
        OK(dat_lmr_free(lt.h));
        memcpy(buf, "abcdefgh", 8);
        OK(dat_ep_post_rdma_write(p.cep, 1, &t, cookie64(2), &rt, 0));
        d = wait_dto(p.c_req);
        CHECK(d.status == DAT_DTO_ERR_REMOTE_ACCESS);
        CHECK(memcmp(buf2, "12345678", 8) == 0);
        OK(dat_ep_free(p.cep));
        OK(dat_ep_free(p.sep));
        OK(dat_lmr_free(ls.h));
    }

    STEP("DAT_MEM_TYPE_SHARED_VIRTUAL: 40-byte cookie compared in full, shared across processes");
    {
        char name_a[64], name_b[64], tagbuf[16], ca[DAT_LMR_COOKIE_SIZE], cb[DAT_LMR_COOKIE_SIZE];
        unsigned tag = (unsigned)getpid() ^ 0x5eed0000u;
        void *a, *b, *priv;
        DAT_LMR_HANDLE ha, hb;
        pid_t pid;
        int status;
        snprintf(name_a, sizeof name_a, "/remora-dat-test-a-%d", (int)getpid());
        snprintf(name_b, sizeof name_b, "/remora-dat-test-b-%d", (int)getpid());
        snprintf(tagbuf, sizeof tagbuf, "%x", tag);
        a = map_shm(name_a, 1);
        b = map_shm(name_b, 1);
        memcpy(a, "parent", 7);
        make_cookie(ca, tag, 1);
        make_cookie(cb, tag, 2);
        OK(shared_lmr(ia, pz, a, ca, &ha));
        OK(dat_lmr_query(ha, DAT_LMR_FIELD_ALL, &q));
        CHECK(q.mem_type == DAT_MEM_TYPE_SHARED_VIRTUAL);
        CHECK(memcmp(q.region_desc.for_shared_memory.shared_memory_id[0], ca, DAT_LMR_COOKIE_SIZE) == 0);
        /* Same cookie on another object in this process: refused. */
        EXPECT(shared_lmr(ia, pz, b, ca, &hb), DAT_INVALID_PARAMETER);
        /* Another process maps both objects elsewhere and registers them. */
        pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            execl("/proc/self/exe", argv[0], "--child", name_a, name_b, tagbuf, (char *)NULL);
            _exit(127);
        }
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        OK(dat_lmr_free(ha));

        STEP("DAT_INVALID_STATE: the buffer was not created shared by the platform");
        priv = mmap(NULL, SHM_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHECK(priv != MAP_FAILED);
        EXPECT(shared_lmr(ia, pz, priv, cb, &hb), DAT_INVALID_STATE);
        {
            char *heap = malloc(SHM_LEN); /* private heap memory, mapped */
            CHECK(heap != NULL);
            EXPECT(shared_lmr(ia, pz, heap, cb, &hb), DAT_INVALID_STATE);
            free(heap);
        }
        munmap(priv, SHM_LEN);
        munmap(a, SHM_LEN);
        munmap(b, SHM_LEN);
        shm_unlink(name_a);
        shm_unlink(name_b);
        cleanup_cookie(ca);
        cleanup_cookie(cb);
        STEP("DAT_INVALID_PARAMETER: no cookie");
        EXPECT(shared_lmr(ia, pz, buf, NULL, &hb), DAT_INVALID_PARAMETER);
    }

    STEP("DAT_LENGTH_ERROR: zero length, with or without an address");
    EXPECT(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, 0, pz, DAT_MEM_PRIV_ALL_FLAG, &h, &lc, &rc, &sz, &va),
           DAT_LENGTH_ERROR);
    {
        DAT_REGION_DESCRIPTION nr;
        nr.for_va = NULL;
        EXPECT(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, nr, 0, pz, DAT_MEM_PRIV_ALL_FLAG, &h, &lc, &rc, &sz, &va),
               DAT_LENGTH_ERROR);
    }
    STEP("DAT_INVALID_PARAMETER");
    r.for_va = NULL;
    EXPECT(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, 100, pz, DAT_MEM_PRIV_ALL_FLAG, &h, &lc, &rc, &sz, &va),
           DAT_INVALID_PARAMETER);
    r.for_va = buf;
    EXPECT(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, 100, pz, (DAT_MEM_PRIV_FLAGS)0x44, &h, &lc, &rc, &sz, &va),
           DAT_INVALID_PARAMETER);
    EXPECT(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, 100, pz, DAT_MEM_PRIV_ALL_FLAG, NULL, &lc, &rc, &sz, &va),
           DAT_INVALID_PARAMETER);

    STEP("DAT_INVALID_HANDLE");
    EXPECT(dat_lmr_create(DAT_HANDLE_NULL, DAT_MEM_TYPE_VIRTUAL, r, 100, pz, DAT_MEM_PRIV_ALL_FLAG, &h, &lc, &rc, &sz,
                          &va),
           DAT_INVALID_HANDLE);
    EXPECT(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, 100, (DAT_PZ_HANDLE)ia, DAT_MEM_PRIV_ALL_FLAG, &h, &lc, &rc,
                          &sz, &va),
           DAT_INVALID_HANDLE);
    r.for_lmr_handle = (DAT_LMR_HANDLE)buf;
    EXPECT(dat_lmr_create(ia, DAT_MEM_TYPE_LMR, r, 100, pz, DAT_MEM_PRIV_ALL_FLAG, &h, &lc, &rc, &sz, &va),
           DAT_INVALID_HANDLE);

    STEP("DAT_MODEL_NOT_SUPPORTED: a memory type this provider does not support");
    r.for_va = buf;
    EXPECT(dat_lmr_create(ia, (DAT_MEM_TYPE)0x10, r, 100, pz, DAT_MEM_PRIV_ALL_FLAG, &h, &lc, &rc, &sz, &va),
           DAT_MODEL_NOT_SUPPORTED);

    STEP("DAT_INSUFFICIENT_RESOURCES: more LMRs than the IA allows (max_lmrs)");
    {
        DAT_LMR_HANDLE hs[3];
        setenv("REMORA_DAT_MAX_LMRS", "3", 1);
        OK(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, 100, pz, DAT_MEM_PRIV_ALL_FLAG, &hs[0], &lc, &rc, &sz, &va));
        OK(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, 100, pz, DAT_MEM_PRIV_ALL_FLAG, &hs[1], &lc, &rc, &sz, &va));
        OK(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, 100, pz, DAT_MEM_PRIV_ALL_FLAG, &hs[2], &lc, &rc, &sz, &va));
        EXPECT(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, 100, pz, DAT_MEM_PRIV_ALL_FLAG, &h, &lc, &rc, &sz, &va),
               DAT_INSUFFICIENT_RESOURCES);
        OK(dat_lmr_free(hs[2]));
        OK(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, 100, pz, DAT_MEM_PRIV_ALL_FLAG, &hs[2], &lc, &rc, &sz, &va));
        unsetenv("REMORA_DAT_MAX_LMRS");
        OK(dat_lmr_free(hs[0]));
        OK(dat_lmr_free(hs[1]));
        OK(dat_lmr_free(hs[2]));
    }

    STEP("dat_lmr_free of a freed handle is DAT_INVALID_HANDLE");
    EXPECT(dat_lmr_free(h), DAT_INVALID_HANDLE);

    OK(dat_pz_free(pz2));
    OK(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG));
    printf("test_lmr_create: ok\n");
    return 0;
}
