/* dat/dat_registry.h - the provider side of the DAT registry: the provider
 * table (dat/udat_redirection.h) and the names of a provider library's
 * init/fini entry points. In Remora libdat.so.1 is registry and provider at
 * once, so no consumer needs this header; it is here for programs that
 * include it. Part of Remora's uDAPL 1.2 compatibility layer (written for
 * Remora). */
#ifndef REMORA_DAT_REGISTRY_H
#define REMORA_DAT_REGISTRY_H

#include <dat/udat.h>
#include <dat/udat_redirection.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DAT_PROVIDER_INIT_FUNC_NAME dat_provider_init
#define DAT_PROVIDER_FINI_FUNC_NAME dat_provider_fini
#define DAT_PROVIDER_INIT_FUNC_STR "dat_provider_init"
#define DAT_PROVIDER_FINI_FUNC_STR "dat_provider_fini"

typedef void (*DAT_PROVIDER_INIT_FUNC)(const DAT_PROVIDER_INFO *info, const char *instance_data);
typedef void (*DAT_PROVIDER_FINI_FUNC)(const DAT_PROVIDER_INFO *info);

#ifdef __cplusplus
}
#endif
#endif /* REMORA_DAT_REGISTRY_H */
