/* dat/udat_config.h - build-time facts of this uDAPL implementation.
 * Part of Remora's uDAPL 1.2 compatibility layer (written for Remora). */
#ifndef REMORA_UDAT_CONFIG_H
#define REMORA_UDAT_CONFIG_H

#define DAT_VERSION_MAJOR 1
#define DAT_VERSION_MINOR 2

/* The library is Remora's libdat.so.1; IA names are ofi-<provider>-<iface>. */
#define DAT_REMORA 1
#define DAT_REMORA_RO_AWARE_PREFIX "RO_AWARE_"

#endif /* REMORA_UDAT_CONFIG_H */
