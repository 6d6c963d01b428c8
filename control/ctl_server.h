/* The sluice-controller's server: everything that runs on the controller's
 * one libuv loop around the quorum. It owns the image (control/image.h),
 * the metadata log window (control/mlog.h), the Raft quorum
 * (control/quorum.h) and the decision rules (control/ctl_logic.h), and
 * serves the Kafka-protocol listener (listeners=CONTROLLER://host:port)
 * that brokers and Kafka's admin tools talk to: ApiVersions, broker
 * registration and heartbeats, the metadata log (Fetch and FetchSnapshot
 * of __cluster_metadata), the admin writes brokers forward (CreateTopics,
 * DeleteTopics, CreatePartitions, (Incremental)AlterConfigs,
 * AllocateProducerIds, AlterPartition), DescribeConfigs, DescribeQuorum
 * and DescribeCluster. Write requests are decided against the committed
 * image and proposed one proposal at a time; periodic duties (fencing
 * silent brokers, restoring preferred leaders) run from a timer on the
 * active controller. Nothing here blocks and nothing needs a lock. */
#ifndef SLUICE_CTL_SERVER_H
#define SLUICE_CTL_SERVER_H
#include <stddef.h>
#include <stdint.h>
#include <uv.h>
#include "control/ctl_config.h"

struct sluice_ctl_server;

struct sluice_ctl_metrics;

/* Bind the listener, start the quorum on loop (which loads the log and
 * snapshot of an existing metadata.log.dir) and serve. cfg is copied;
 * metrics (NULL: none) is where the loop publishes what the admin listener
 * reads (control/ctl_metrics.h), and must outlive the server.
 * Returns 0, or -1 with err saying what failed (nothing left running). */
int sluice_ctl_server_start(struct sluice_ctl_server **out, uv_loop_t *loop, const struct sluice_controller_config *cfg,
			    struct sluice_ctl_metrics *metrics, char *err, size_t errlen);
/* An ApiKey's name when this server serves it, else NULL (any thread). */
const char *sluice_ctl_server_api_name(int16_t key);
/* A clean stop: stop taking connections, close every connection, stop the
 * quorum (pending proposals end with NOT_CONTROLLER), close every handle,
 * then call done(arg) on the loop. The loop then has nothing of the
 * server's left and sluice_ctl_server_free may be called. */
void sluice_ctl_server_stop(struct sluice_ctl_server *s, void (*done)(void *arg), void *arg);
void sluice_ctl_server_free(struct sluice_ctl_server *s);

#endif
