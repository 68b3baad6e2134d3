/* test_abi.c - our dat/ headers against the DAT 1.2 ABI table (abi_table.h,
 * written from OFED compat-dapl 1.2's consumer headers): every constant's
 * value, size and signedness, every typedef's size and type, every struct's
 * and union's size, alignment and member offsets, sizes and types, every
 * function's prototype. A missing name fails the build; a drifted value,
 * width, layout or type fails the test, one line per difference. */
#include <stdint.h>
#include <stdio.h>
#include <stddef.h>
#include <string.h>
#include <dat/udat.h>
#include <dat/dat_registry.h>

static int checks, failures;

static void check(int ok, const char *what, const char *name, unsigned long long want, unsigned long long got)
{
    ++checks;
    if (!ok) {
        ++failures;
        printf("FAIL %s %s: want 0x%llx, have 0x%llx\n", what, name, want, got);
    }
}

#define SGN(x) ((__typeof__(x))-1 > (__typeof__(x))0 ? 0 : 1)
#define TSGN(T) ((T)-1 > (T)0 ? 0 : 1)
#define COMPAT(a, ...) __builtin_types_compatible_p(a, __VA_ARGS__)
#define STR_(x) #x
#define STR(x) STR_(x)

#define ABI_CONST(n, v, sz, sg)                                                   \
    check((unsigned long long)(n) == (v), "value of", #n, (v), (unsigned long long)(n)); \
    check(sizeof(n) == (sz), "sizeof", #n, (sz), sizeof(n));                      \
    check(SGN(n) == (sg), "signedness of", #n, (sg), SGN(n));
#define ABI_PTR_CONST(n, v, ...)                                                  \
    check((unsigned long long)(uintptr_t)(n) == (v), "value of", #n, (v), (unsigned long long)(uintptr_t)(n)); \
    check(COMPAT(__typeof__(n), __VA_ARGS__), "type of", #n, 1, 0);
#define ABI_STRING(n, s) check(strcmp((n), (s)) == 0, "text of", #n, 0, 1);
#define ABI_FIELD_ALIAS(T, alias, m)                                              \
    check(offsetof(T, alias) == offsetof(T, m) && strcmp(STR(alias), #m) == 0, "alias", #T "." #alias, \
          offsetof(T, m), offsetof(T, alias));
#define ABI_TYPE_INT(T, sz, sg, ...)                                              \
    check(sizeof(T) == (sz), "sizeof", #T, (sz), sizeof(T));                      \
    check(TSGN(T) == (sg), "signedness of", #T, (sg), TSGN(T));                   \
    check(COMPAT(T, __VA_ARGS__), "type of", #T " (" #__VA_ARGS__ ")", 1, 0);
#define ABI_TYPE(T, sz, al, ...)                                                  \
    check(sizeof(T) == (sz), "sizeof", #T, (sz), sizeof(T));                      \
    check(_Alignof(T) == (al), "alignof", #T, (al), _Alignof(T));                 \
    check(COMPAT(T, __VA_ARGS__), "type of", #T " (" #__VA_ARGS__ ")", 1, 0);
#define ABI_TYPE_NAME(T, ...) check(COMPAT(T, __VA_ARGS__), "type of", #T, 1, 0);
#define ABI_RECORD(R, sz, al)                                                     \
    check(sizeof(R) == (sz), "sizeof", #R, (sz), sizeof(R));                      \
    check(_Alignof(R) == (al), "alignof", #R, (al), _Alignof(R));
#define ABI_MEMBER(R, m, off, sz, ...)                                            \
    check(offsetof(R, m) == (off), "offsetof", #R "." #m, (off), offsetof(R, m)); \
    check(sizeof(((R *)0)->m) == (sz), "sizeof", #R "." #m, (sz), sizeof(((R *)0)->m)); \
    check(COMPAT(__typeof__(((R *)0)->m), __VA_ARGS__), "type of", #R "." #m " (" #__VA_ARGS__ ")", 1, 0);
#define ABI_FUNC(f, ...) check(COMPAT(__typeof__(f), __VA_ARGS__), "prototype of", #f " (" #__VA_ARGS__ ")", 1, 0);

int main(void)
{
#include "abi_table.h"

    /* Macros the table can only require to exist: check what they stand for. */
    {
        DAT_OS_WAIT_PROXY_AGENT a = DAT_OS_WAIT_PROXY_AGENT_NULL;
        check(COMPAT(__typeof__(DAT_OS_WAIT_PROXY_AGENT_NULL), DAT_OS_WAIT_PROXY_AGENT), "type of",
              "DAT_OS_WAIT_PROXY_AGENT_NULL", 1, 0);
        check(a.instance_data == NULL && a.proxy_agent_func == NULL, "value of", "DAT_OS_WAIT_PROXY_AGENT_NULL", 0, 1);
    }
    check(COMPAT(DAT_RMR_BIND_COMPLETION_STATUS, DAT_DTO_COMPLETION_STATUS), "type of",
          "DAT_RMR_BIND_COMPLETION_STATUS", 1, 0);
    check(strcmp(STR(DAT_PROVIDER_INIT_FUNC_NAME), "dat_provider_init") == 0, "text of",
          "DAT_PROVIDER_INIT_FUNC_NAME", 0, 1);
    check(strcmp(STR(DAT_PROVIDER_FINI_FUNC_NAME), "dat_provider_fini") == 0, "text of",
          "DAT_PROVIDER_FINI_FUNC_NAME", 0, 1);
    check(strcmp(STR(DAT_IA_FIELD_IA_MAX_DTO_PER_OP), "DAT_IA_FIELD_IA_MAX_DTO_PER_EP_IN") == 0, "text of",
          "DAT_IA_FIELD_IA_MAX_DTO_PER_OP", 0, 1);
    check(UINT64_C(1) << 40 == 0x10000000000ull, "value of", "UINT64_C(1) << 40", 0x10000000000ull,
          UINT64_C(1) << 40);
    check(DAT_GET_TYPE(0xC0061234u) == 0x00060000u && DAT_GET_SUBTYPE(0xC0061234u) == 0x1234u &&
              DAT_IS_WARNING(0x40000000u) != 0 && DAT_IS_WARNING(0x80000000u) == 0,
          "meaning of", "DAT_GET_TYPE/DAT_GET_SUBTYPE/DAT_IS_WARNING", 1, 0);
    check(strcmp(STR(dat_ia_open(n, q, e, i)),
                 "dat_ia_openv((n), (q), (e), (i), 1, 2, DAT_FALSE)") == 0,
          "expansion of", "dat_ia_open", 0, 1);

    printf("%d checks, %d failures\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
