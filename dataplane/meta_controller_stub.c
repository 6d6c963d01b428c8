/* TEMPORARY, until control/meta_controller.c (the controller-client
 * metadata backend, helper "client", branch h-client) is merged: the
 * functions control/meta.h declares for it, failing, so that sluice-broker
 * links and runs in single-node mode while cluster mode says plainly that
 * this build cannot do it. dataplane/meson.build compiles this file only
 * while control/meta_controller.c does not exist; delete it then. */
#include "control/meta.h"
#include <stdio.h>

int sluice_meta_controller_open(struct sluice_meta *m, const struct sluice_config *cfg, const char *dir, char *err,
				size_t errlen)
{
	(void)m;
	(void)cfg;
	(void)dir;
	snprintf(err, errlen, "this sluice-broker was built without the controller client (control/meta_controller.c); "
		 "remove controller.quorum.voters to run it as a single node");
	return -1;
}

int sluice_meta_controller_wait_ready(struct sluice_meta *m, unsigned timeout_ms, char *err, size_t errlen)
{
	(void)m;
	(void)timeout_ms;
	snprintf(err, errlen, "no controller client in this build");
	return -1;
}

int sluice_meta_controller_shutdown(struct sluice_meta *m, unsigned timeout_ms)
{
	(void)m;
	(void)timeout_ms;
	return -1;
}

void sluice_meta_controller_close(struct sluice_meta *m) { (void)m; }

bool sluice_meta_is_controller(const struct sluice_meta *m)
{
	(void)m;
	return false;
}
