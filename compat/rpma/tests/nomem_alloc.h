/* nomem_alloc.h - the out-of-memory switch of nomem_alloc.cpp (C and C++). */
#ifndef RPMA_TEST_NOMEM_ALLOC_H
#define RPMA_TEST_NOMEM_ALLOC_H

#ifdef __cplusplus
extern "C" {
#endif

/* Let the next `skip` nothrow operator new calls of this thread succeed, then
 * refuse `fail` of them; nomem_arm(0, 0) disarms. Resets the counters. */
void nomem_arm(int skip, int fail);
/* Nothrow allocations refused / seen in this thread since the last arming. */
int nomem_refused(void);
int nomem_seen(void);

#ifdef __cplusplus
}
#endif

#endif
