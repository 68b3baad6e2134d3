/* dat/dat_vendor_specific.h - vendor extensions of the DAT API: Remora
 * has none. Part of Remora's uDAPL 1.2 compatibility layer (written for
 * Remora). */
#ifndef REMORA_DAT_VENDOR_SPECIFIC_H
#define REMORA_DAT_VENDOR_SPECIFIC_H

#endif /* REMORA_DAT_VENDOR_SPECIFIC_H */
