/* dat/udat_vendor_specific.h - vendor extensions of the UDAT API: Remora
 * has none. Part of Remora's uDAPL 1.2 compatibility layer (written for
 * Remora). */
#ifndef REMORA_UDAT_VENDOR_SPECIFIC_H
#define REMORA_UDAT_VENDOR_SPECIFIC_H
#include <dat/dat_vendor_specific.h>
#endif /* REMORA_UDAT_VENDOR_SPECIFIC_H */
