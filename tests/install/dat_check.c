/* tests/install/dat_check.c - a uDAPL 1.2 program outside the source tree,
 * built against the installed dat/udat.h and libdat.so.1 of Remora: the
 * registry lists Remora's loopback IA and it opens and closes.
 * Exit status 0 on success. */
#include <dat/udat.h>

#include <stdio.h>
#include <string.h>

#define MAX_IAS 16

static int need(DAT_RETURN rc, const char *what)
{
	if (rc != DAT_SUCCESS) {
		const char *major = "?", *minor = "?";
		dat_strerror(rc, &major, &minor);
		fprintf(stderr, "dat_check: %s: %s %s\n", what, major, minor);
		return 0;
	}
	return 1;
}

int main(void)
{
	DAT_PROVIDER_INFO infos[MAX_IAS], *list[MAX_IAS];
	DAT_COUNT n = 0;
	DAT_IA_HANDLE ia = DAT_HANDLE_NULL;
	DAT_EVD_HANDLE async_evd = DAT_HANDLE_NULL;
	char name[] = "ofi-tcp-lo"; /* DAT_NAME_PTR is not const */
	int found = 0;

	for (int i = 0; i < MAX_IAS; i++)
		list[i] = &infos[i];
	if (!need(dat_registry_list_providers(MAX_IAS, &n, list), "dat_registry_list_providers"))
		return 1;
	for (DAT_COUNT i = 0; i < n; i++)
		found |= strcmp(infos[i].ia_name, name) == 0;
	if (!found) {
		fprintf(stderr, "dat_check: %s is not among the %d IAs listed\n", name, (int)n);
		return 1;
	}
	if (!need(dat_ia_open(name, 8, &async_evd, &ia), "dat_ia_open"))
		return 1;
	if (!need(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG), "dat_ia_close"))
		return 1;
	printf("dat: %d IAs listed, %s opened and closed\n", (int)n, name);
	return 0;
}
