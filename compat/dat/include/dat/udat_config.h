/* dat/udat_config.h - build-time facts of this uDAPL implementation.
 * Part of Remora's uDAPL 1.2 compatibility layer (written for Remora). */
#ifndef REMORA_UDAT_CONFIG_H
#define REMORA_UDAT_CONFIG_H

#define DAT_VERSION_MAJOR 1
#define DAT_VERSION_MINOR 2

/* The thread-safety argument dat_ia_open passes to dat_ia_openv. The DAT 1.2
 * reference headers set it to DAT_FALSE, and so do these, so that programs
 * compiled against either pass the same value. This library is thread safe
 * whatever the argument says. */
#ifndef DAT_THREADSAFE
#define DAT_THREADSAFE DAT_FALSE
#endif

/* Remora additions: the library is Remora's libdat.so.1; IA names are
 * ofi-<provider>-<iface>, optionally prefixed with RO_AWARE_. */
#define DAT_REMORA 1
#define DAT_REMORA_RO_AWARE_PREFIX "RO_AWARE_"

#endif /* REMORA_UDAT_CONFIG_H */
