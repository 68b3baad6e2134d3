/* dat/dat_platform_specific.h - basic types of the DAT 1.2 API on Linux
 * (LP64 and ILP32 alike: fixed-width integers, int counts).
 * Part of Remora's uDAPL 1.2 compatibility layer (written for Remora). */
#ifndef REMORA_DAT_PLATFORM_SPECIFIC_H
#define REMORA_DAT_PLATFORM_SPECIFIC_H

#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <netinet/in.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Buffers aligned to this many bytes perform best. */
#ifndef DAT_OPTIMAL_ALIGNMENT
#define DAT_OPTIMAL_ALIGNMENT 256
#endif

typedef uint32_t DAT_UINT32;            /* unsigned, 32 bits */
typedef uint64_t DAT_UINT64;            /* unsigned, 64 bits */
typedef unsigned long long DAT_UVERYLONG;
typedef void *DAT_PVOID;
typedef int DAT_COUNT;
typedef DAT_UINT64 DAT_PADDR;

#ifndef UINT64_C
#define UINT64_C(c) c ## ULL
#endif

typedef struct sockaddr DAT_SOCK_ADDR;
typedef struct sockaddr_in6 DAT_SOCK_ADDR6;

#define DAT_AF_INET  AF_INET
#define DAT_AF_INET6 AF_INET6

/* Remora additions: an OS file descriptor, and the export markers used by
 * this library's declarations. */
typedef int DAT_FD;
#define DAT_API
#define DAT_EXPORT extern

/* Parameter direction markers, empty. */
#ifndef IN
#define IN
#endif
#ifndef OUT
#define OUT
#endif
#ifndef INOUT
#define INOUT
#endif

#ifdef __cplusplus
}
#endif
#endif /* REMORA_DAT_PLATFORM_SPECIFIC_H */
