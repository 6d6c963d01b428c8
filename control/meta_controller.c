/* The broker's controller-client metadata backend (cluster mode, see
 * meta.h): the same sluice_meta_ops as the local file-backed authority, but
 * the authority is the active sluice-controller. Three threads with
 * blocking sockets, each with its own connection, since none of this is on
 * the data path: the heartbeat thread registers this broker
 * (BrokerRegistration) and heartbeats (BrokerHeartbeat, also the
 * controlled shutdown); the metadata thread long-polls the metadata log
 * (Fetch of __cluster_metadata), applies its records to its own image
 * (control/image.h; a FetchSnapshot load when the controller no longer
 * holds the offset it needs) and publishes an immutable sluice_meta_snapshot
 * after each applied response, laid out and reference-counted exactly as
 * the local backend's, with this broker's dynamic configuration rebuilt
 * when a BROKER config record of the cluster-wide default or of this node
 * applied (control/broker_config.h); the admin thread sends the changes of
 * submitted batches to the active controller (CreateTopics, DeleteTopics,
 * CreatePartitions, IncrementalAlterConfigs, AllocateProducerIds), the
 * requests relayed through forward() and the leaders' ISR changes (every
 * change waiting goes in one AlterPartition, as Kafka batches them), and completes a batch (or answers a
 * relayed config change) only once the image has reached the metadata
 * offset the controller named in its answer (tag 1000,
 * SluiceMetadataOffset), so that the snapshot the submitter reads next
 * shows the change.
 *
 * The active controller is found by trying the voters in turn: a
 * connection error, an answer that does not parse or NOT_CONTROLLER moves
 * a thread on to the next voter, with a backoff of 100 ms doubling to 1 s.
 * Every wait is bounded and every size from the wire is checked before use:
 * a broken or hostile controller costs a reconnect, never a crash. */
#include "control/meta_controller.h"
#include "common/kafka/batch.h"
#include "common/kafka/codec.h"
#include "common/kafka/errors.h"
#include "common/log.h"
#include "control/assignment.h"
#include "control/image.h"
#include "control/mlog.h"
#include "control/mrec.h"
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- limits ------------------------------------------------------------------ */

#define MC_VOTERS_MAX 16
#define MC_HOST_MAX 255
#define MC_RESPONSE_BYTES_MAX (64u << 20) /* a frame from a controller */
#define MC_REQUEST_BYTES_MAX (32u << 20)  /* a frame to it (its own maximum is 100 MiB) */
#define MC_CONNECT_TIMEOUT_MS 3000
/* An admin request is answered once its change committed in the quorum. */
#define MC_REQUEST_TIMEOUT_MS 30000
#define MC_FETCH_WAIT_MS 500 /* the metadata long poll */
#define MC_FETCH_TIMEOUT_MS (MC_FETCH_WAIT_MS + 10000)
#define MC_FETCH_BYTES_MAX (8 << 20)
#define MC_SNAPSHOT_PAGE_BYTES (8 << 20)
#define MC_SNAPSHOT_BYTES_MAX ((int64_t)4 << 30)
/* A submitted batch: its requests, then the wait for the image to show them. */
#define MC_BATCH_TIMEOUT_MS 60000
#define MC_CATCHUP_TIMEOUT_MS 30000
#define MC_BACKOFF_MIN_MS 100
#define MC_BACKOFF_MAX_MS 1000
/* Heartbeats while a controlled shutdown waits for ShouldShutDown. */
#define MC_SHUTDOWN_HEARTBEAT_MS 200
/* Changes of one kind sent as one request (the controller's frame maximum
 * bounds it): a SET_TOPIC_CONFIGS can become a set and a delete per config. */
#define MC_GROUP_CHANGES_MAX 1000
#define MC_CHANGE_BYTES_MAX                                                                                      \
	(64 + SLUICE_TOPIC_NAME_MAX +                                                                             \
	 2 * SLUICE_TOPIC_CONFIGS_MAX * (SLUICE_TOPIC_CONFIG_KEY_MAX + SLUICE_TOPIC_CONFIG_VALUE_MAX + 8))
_Static_assert((uint64_t)MC_GROUP_CHANGES_MAX * MC_CHANGE_BYTES_MAX + 4096 <= MC_REQUEST_BYTES_MAX,
	       "a group's request fits a frame");
_Static_assert(MC_FETCH_BYTES_MAX + 4096 <= MC_RESPONSE_BYTES_MAX &&
		       MC_SNAPSHOT_PAGE_BYTES + 4096 <= MC_RESPONSE_BYTES_MAX,
	       "an answer to what we ask fits a frame");
_Static_assert(MC_BACKOFF_MIN_MS <= MC_BACKOFF_MAX_MS && MC_FETCH_WAIT_MS < MC_FETCH_TIMEOUT_MS, "ordered bounds");
/* A manual assignment's list in a request: PartitionIndex, the array's
 * length (a uvarint) and its tags; its brokers are 4 bytes each. */
#define MC_ASSIGNMENT_LIST_BYTES_MAX (4 + 5 + 1)
_Static_assert((uint64_t)SLUICE_ASSIGNMENT_LISTS_MAX * (MC_ASSIGNMENT_LIST_BYTES_MAX + 4 * SLUICE_REPLICAS_MAX) +
			       MC_CHANGE_BYTES_MAX + 4096 <= MC_REQUEST_BYTES_MAX,
	       "a topic with the largest assignment fits a request");
#define MC_FORWARDS_MAX 256 /* forward() requests queued */
#define MC_ISR_QUEUED_MAX 4096 /* alter_partition() changes waiting for the next AlterPartition */
/* A partition of an AlterPartition v2 request at most: PartitionIndex,
 * LeaderEpoch, NewIsr (its length and ids), LeaderRecoveryState,
 * PartitionEpoch, tags; and its own Topics entry (TopicId, lengths, tags). */
#define MC_ISR_CHANGE_BYTES_MAX (4 + 4 + 5 + 4 * SLUICE_REPLICAS_MAX + 1 + 4 + 1 + 16 + 5 + 1)
_Static_assert(SLUICE_META_CONTROLLER_ALTER_PARTITIONS_MAX <= MC_ISR_QUEUED_MAX &&
		       SLUICE_META_CONTROLLER_ALTER_PARTITIONS_MAX <= SLUICE_TOPICS_MAX,
	       "a request's changes fit the queue and the controller's entries per request");
_Static_assert((uint64_t)SLUICE_META_CONTROLLER_ALTER_PARTITIONS_MAX * MC_ISR_CHANGE_BYTES_MAX + 64 <=
		       SLUICE_META_FORWARD_BYTES_MAX,
	       "a full AlterPartition fits a relayed body");
_Static_assert(SLUICE_META_FORWARD_BYTES_MAX + 1024 <= MC_REQUEST_BYTES_MAX, "a relayed body and its header fit a frame");
/* Topics named by the records of one response, past which the whole
 * snapshot is rebuilt instead of only these. */
#define MC_DIRTY_MAX 1024
#define MC_TAG_SLUICE 1000 /* SluiceMetadataOffset (responses), SluiceTopicId (CreateTopics) */
/* The metadata.version range this broker announces (KRaft's feature). */
#define MC_METADATA_VERSION_MIN 1
#define MC_METADATA_VERSION_MAX 27
#define MC_METADATA_TOPIC "__cluster_metadata"
#define MC_EPOCH_FILE "sluice-broker-epoch"

enum {
	API_FETCH = 1,
	API_API_VERSIONS = 18,
	API_CREATE_TOPICS = 19,
	API_DELETE_TOPICS = 20,
	API_ALTER_CONFIGS = 33,
	API_CREATE_PARTITIONS = 37,
	API_INCREMENTAL_ALTER_CONFIGS = 44,
	API_ALTER_PARTITION_REASSIGNMENTS = 45,
	API_LIST_PARTITION_REASSIGNMENTS = 46,
	API_ALTER_PARTITION = 56,
	API_FETCH_SNAPSHOT = 59,
	API_BROKER_REGISTRATION = 62,
	API_BROKER_HEARTBEAT = 63,
	API_ALLOCATE_PRODUCER_IDS = 67,
};

/* ---- state ----------------------------------------------------------------------- */

struct mc_voter {
	int32_t id; /* -1: a bootstrap server, id unknown */
	char host[MC_HOST_MAX + 1];
	uint16_t port;
};

/* One blocking connection to a controller, owned by one thread. */
struct mc_conn {
	const char *who; /* for the log */
	int fd;          /* -1: none */
	int voter;       /* the voter it is connected to */
	int32_t correlation_id;
	unsigned backoff_ms; /* before the next connect: 0 after a success */
	struct kwr out;      /* the request frame */
	uint8_t *in;         /* the response frame */
	size_t in_cap;
};

/* The brokers of a snapshot, shared by the snapshots published while they
 * do not change; freed with the last. */
struct mc_brokers {
	int refs; /* atomic */
	uint32_t n;
	struct sluice_meta_broker v[];
};

/* A request relayed by forward(). */
struct mc_forward {
	int16_t api_key, api_version;
	uint8_t *body;
	size_t len;
	void (*done)(void *arg, int16_t error, const uint8_t *resp, size_t resp_len);
	void *arg;
	struct mc_forward *next;
};

/* Changes staged between batch_begin and batch_commit, with copies of
 * what their inputs point to. */
struct mc_stage_aux {
	char name[SLUICE_TOPIC_NAME_MAX + 1];
	uint8_t id[16];
	bool has_id, has_replica_node;
	int32_t replica_node;
	struct sluice_topic_config *configs;
};

struct mc {
	struct sluice_meta_controller_config cfg;
	struct mc_voter voters[MC_VOTERS_MAX];
	int voter_n;
	char listener_name[SLUICE_MREC_NAME_MAX + 1]; /* whose endpoints snapshots list */
	char client_id[64];
	char dir[1024];
	uint8_t incarnation_id[16];
	int stop_fd; /* eventfd, readable once closing: wakes every blocked socket wait */

	pthread_mutex_t lock; /* everything down to `changed`; never held across I/O */
	pthread_cond_t changed;
	bool stopping;
	int leader;              /* index of the voter believed active */
	int32_t controller_id;   /* the active controller's id, -1 unknown */
	int64_t previous_epoch;  /* from the epoch file, for the first registration */
	int64_t broker_epoch;    /* -1: not registered */
	bool fenced;
	bool caught_up;          /* the last fetch reached the controller's high watermark */
	int64_t applied_offset;  /* the offset the published snapshot shows */
	uint64_t fetch_sent, fetch_done; /* metadata fetch rounds sent and applied */
	int64_t fetch_hwm;       /* high watermark of round fetch_done */
	bool want_shutdown, should_shutdown, hb_kick;
	_Atomic int64_t lease_until_ms; /* monotonic; 0: none (lease_valid) */
	char last_error[256];    /* why the heartbeat thread is not registered */
	struct sluice_meta_controller_stats stats;

	pthread_mutex_t pub_lock; /* readers: held only to take a reference */
	/* sluice_meta_controller_on_publish's hook, called under hook_lock. */
	pthread_mutex_t hook_lock;
	void (*hook)(void *arg);
	void *hook_arg;
	struct sluice_meta_snapshot *current;

	/* The metadata thread's own. */
	struct sluice_image *img;
	bool need_snapshot;
	unsigned out_of_range_streak; /* OFFSET_OUT_OF_RANGE answers since the log was last followed */
	char (*dirty)[SLUICE_TOPIC_NAME_MAX + 1];
	uint32_t dirty_n;
	bool all_dirty, brokers_dirty;
	bool broker_config_dirty; /* a BROKER config record of "" or this node */
	struct sluice_config *base; /* the static configuration dynamic configs apply over */
	char node_name[16];         /* this node's id as a BROKER resource name */

	/* Submitted batches and forwards, for the admin thread (under q_lock). */
	pthread_mutex_t q_lock;
	pthread_cond_t q_cond, q_space;
	struct sluice_meta_batch *q_head, *q_tail;
	uint32_t q_changes;
	struct mc_forward *f_head, *f_tail;
	uint32_t f_n;
	/* ISR changes waiting for the next AlterPartition: a ring, oldest at isr_head. */
	struct sluice_meta_isr_change *isr_q[MC_ISR_QUEUED_MAX];
	uint32_t isr_head, isr_n;
	bool q_stopping;
	int64_t pid_next, pid_end; /* the producer id block being handed out (admin thread) */

	/* batch_begin .. batch_commit */
	pthread_mutex_t stage_lock;
	pthread_t stage_owner; /* read atomically */
	struct sluice_meta_change *stage;
	struct mc_stage_aux *stage_aux;
	uint32_t stage_n, stage_cap;

	pthread_t hb_thread, fetch_thread, admin_thread;
	bool hb_started, fetch_started, admin_started;
};
_Static_assert(SLUICE_META_QUEUE_CHANGES_MAX <= UINT32_MAX / 2, "q_changes holds the queue and one batch more");

static const struct sluice_meta_ops controller_ops;

/* ---- time and waits ------------------------------------------------------------- */

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void cond_init_monotonic(pthread_cond_t *c)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(c, &a);
	pthread_condattr_destroy(&a);
}

/* Waits on c until signalled or deadline (monotonic ms) passed. */
static void cond_wait_until(pthread_cond_t *c, pthread_mutex_t *mu, int64_t deadline)
{
	struct timespec ts = {.tv_sec = deadline / 1000, .tv_nsec = (deadline % 1000) * 1000000};
	(void)pthread_cond_timedwait(c, mu, &ts);
}

static bool is_stopping(struct mc *m)
{
	return __atomic_load_n(&m->stopping, __ATOMIC_ACQUIRE);
}

/* Sleeps ms unless closing: returns false when closing. */
static bool pause_ms(struct mc *m, unsigned ms)
{
	struct pollfd p = {.fd = m->stop_fd, .events = POLLIN};
	if (ms)
		(void)poll(&p, 1, (int)ms);
	return !is_stopping(m);
}

/* ---- snapshots: immutable, reference-counted, as the local backend's ------------- */

static size_t topic_size(int32_t config_n)
{
	return offsetof(struct sluice_topic, configs) + (size_t)config_n * sizeof(struct sluice_topic_config);
}

static void topic_unref(struct sluice_topic *t)
{
	int refs = __atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL);
	assert(refs >= 0); /* one release per reference */
	if (refs == 0)
		free(t);
}

static struct mc_brokers *brokers_of(const struct sluice_meta_broker *v)
{
	return (struct mc_brokers *)(void *)((char *)(uintptr_t)v - offsetof(struct mc_brokers, v));
}

static void brokers_unref(const struct sluice_meta_broker *v)
{
	if (!v)
		return;
	struct mc_brokers *bs = brokers_of(v);
	int refs = __atomic_sub_fetch(&bs->refs, 1, __ATOMIC_ACQ_REL);
	assert(refs >= 0);
	if (refs == 0)
		free(bs);
}

static void snap_free(struct sluice_meta_snapshot *s)
{
	for (uint32_t i = 0; i < s->topic_n; i++)
		topic_unref(s->topics[i]);
	brokers_unref(s->brokers);
	sluice_broker_config_unref(s->broker_config);
	free(s->topics);
	free(s);
}

static bool mc_is_current(void *self, const struct sluice_meta_snapshot *snap)
{
	struct mc *m = self;
	return __atomic_load_n(&m->current, __ATOMIC_ACQUIRE) == snap;
}

static struct sluice_meta_snapshot *mc_acquire(void *self)
{
	struct mc *m = self;
	pthread_mutex_lock(&m->pub_lock);
	struct sluice_meta_snapshot *s = m->current;
	int refs = __atomic_add_fetch(&s->refs, 1, __ATOMIC_ACQ_REL);
	assert(refs >= 2); /* current's own reference and this one */
	pthread_mutex_unlock(&m->pub_lock);
	return s;
}

static void mc_release(void *self, struct sluice_meta_snapshot *s)
{
	(void)self;
	if (!s)
		return;
	int refs = __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL);
	assert(refs >= 0); /* one release per acquire */
	if (refs == 0)
		snap_free(s);
}

/* A copy for a change's topic_out: the partition states stay the
 * backend's, so the copy carries none (sluice_topic_partition says NULL). */
static void topic_copy_out(struct sluice_topic *out, const struct sluice_topic *t)
{
	if (!out)
		return;
	memcpy(out, t, topic_size(t->config_n));
	out->states = NULL;
	out->state_n = 0;
	out->refs = 0;
}

struct config_collect {
	struct sluice_topic_config v[SLUICE_TOPIC_CONFIGS_MAX];
	int32_t n;
	int32_t dropped;
};

static int collect_config(void *arg, const char *name, const char *value)
{
	struct config_collect *cc = arg;
	if (cc->n >= SLUICE_TOPIC_CONFIGS_MAX || strlen(name) >= SLUICE_TOPIC_CONFIG_KEY_MAX ||
	    strlen(value) >= SLUICE_TOPIC_CONFIG_VALUE_MAX) {
		cc->dropped++;
		return 0;
	}
	snprintf(cc->v[cc->n].key, sizeof cc->v[cc->n].key, "%s", name);
	snprintf(cc->v[cc->n].value, sizeof cc->v[cc->n].value, "%s", value);
	cc->n++;
	return 0;
}

static void partition_state_from(struct sluice_partition_state *st, const struct sluice_image_partition *ip)
{
	assert(ip->replicas.n >= 0 && ip->replicas.n <= SLUICE_REPLICAS_MAX);
	assert(ip->isr.n >= 0 && ip->isr.n <= SLUICE_REPLICAS_MAX);
	st->leader = ip->leader;
	st->leader_epoch = ip->leader_epoch;
	st->partition_epoch = ip->partition_epoch;
	st->replica_n = ip->replicas.n;
	st->isr_n = ip->isr.n;
	st->offline_n = 0;
	memcpy(st->replicas, ip->replicas.id, (size_t)ip->replicas.n * sizeof st->replicas[0]);
	memcpy(st->isr, ip->isr.id, (size_t)ip->isr.n * sizeof st->isr[0]);
	_Static_assert(sizeof ip->elr.id == sizeof st->elr && sizeof ip->last_known_elr.id == sizeof st->last_known_elr,
		       "the image's ELR lists fit a partition state");
	assert(ip->elr.n >= 0 && ip->elr.n <= SLUICE_REPLICAS_MAX);
	assert(ip->last_known_elr.n >= 0 && ip->last_known_elr.n <= SLUICE_REPLICAS_MAX);
	st->elr_n = ip->elr.n;
	st->last_known_elr_n = ip->last_known_elr.n;
	memcpy(st->elr, ip->elr.id, (size_t)ip->elr.n * sizeof st->elr[0]);
	memcpy(st->last_known_elr, ip->last_known_elr.id, (size_t)ip->last_known_elr.n * sizeof st->last_known_elr[0]);
}

/* The throttle bits of each partition's replica on node (the topic's
 * throttled replica lists, read from the image whatever their length). */
static void topic_throttles(const struct sluice_image *img, const struct sluice_image_topic *it, int32_t node,
			    struct sluice_partition_state *st)
{
	static const struct {
		const char *key;
		uint8_t bit;
	} lists[] = {{SLUICE_TOPIC_LEADER_THROTTLED, SLUICE_THROTTLE_LEADER},
		     {SLUICE_TOPIC_FOLLOWER_THROTTLED, SLUICE_THROTTLE_FOLLOWER}};
	uint8_t *flags = NULL;
	for (size_t k = 0; k < sizeof lists / sizeof lists[0]; k++) {
		const char *v = sluice_image_config(img, SLUICE_MREC_RESOURCE_TOPIC, it->name, lists[k].key);
		if (!v || !v[0])
			continue;
		if (!flags && !(flags = calloc((size_t)it->partition_n, 1))) {
			SLOG_WARN("meta", "topic %s: out of memory reading its replication throttles; not applied", it->name);
			return;
		}
		sluice_topic_throttled_mark(v, node, it->partition_n, flags, lists[k].bit);
	}
	for (int32_t p = 0; flags && p < it->partition_n; p++)
		st[p].throttle = flags[p];
	free(flags);
}

/* A snapshot topic for image topic it: one allocation holding the topic
 * with its configs, then its partitions' states (with this node's
 * replication throttles). */
static struct sluice_topic *topic_build(const struct sluice_image *img, const struct sluice_image_topic *it,
					int32_t node)
{
	struct config_collect cc;
	cc.n = cc.dropped = 0;
	(void)sluice_image_configs(img, SLUICE_MREC_RESOURCE_TOPIC, it->name, collect_config, &cc);
	if (cc.dropped)
		SLOG_WARN("meta", "topic %s: %d config(s) beyond what a broker keeps (%d, keys < %d, values < %d bytes) "
			  "are not applied here", it->name, cc.dropped, SLUICE_TOPIC_CONFIGS_MAX, SLUICE_TOPIC_CONFIG_KEY_MAX,
			  SLUICE_TOPIC_CONFIG_VALUE_MAX);
	size_t align = _Alignof(struct sluice_partition_state);
	size_t head = (topic_size(cc.n) + align - 1) / align * align;
	struct sluice_topic *t = calloc(1, head + (size_t)it->partition_n * sizeof(struct sluice_partition_state));
	if (!t)
		return NULL;
	snprintf(t->name, sizeof t->name, "%s", it->name);
	memcpy(t->id, it->id, 16);
	t->partitions = it->partition_n;
	t->config_n = cc.n;
	memcpy(t->configs, cc.v, (size_t)cc.n * sizeof cc.v[0]);
	sluice_topic_limits_parse(&t->limits, t->configs, t->config_n);
	struct sluice_partition_state *st = (struct sluice_partition_state *)(void *)((char *)t + head);
	for (int32_t p = 0; p < it->partition_n; p++)
		partition_state_from(&st[p], &it->partitions[p]);
	topic_throttles(img, it, node, st);
	t->states = st;
	t->state_n = it->partition_n;
	t->refs = 1;
	assert(t->partitions >= 1 && t->config_n <= SLUICE_TOPIC_CONFIGS_MAX);
	return t;
}

/* The unfenced brokers with their endpoint of our listener name. */
static struct mc_brokers *brokers_build(const struct mc *m)
{
	size_t n = sluice_image_broker_count(m->img);
	struct mc_brokers *bs = malloc(offsetof(struct mc_brokers, v) + (n ? n : 1) * sizeof(struct sluice_meta_broker));
	if (!bs)
		return NULL;
	bs->refs = 1;
	bs->n = 0;
	for (size_t i = 0; i < n; i++) {
		const struct sluice_image_broker *b = sluice_image_broker_at(m->img, i);
		const struct sluice_mrec_endpoint *ep = NULL;
		for (int32_t e = 0; e < b->endpoint_n && !ep; e++)
			if (!strcasecmp(b->endpoints[e].name, m->listener_name))
				ep = &b->endpoints[e];
		if (b->fenced || !ep)
			continue;
		struct sluice_meta_broker *o = &bs->v[bs->n++];
		memset(o, 0, sizeof *o);
		o->node_id = b->id;
		o->port = ep->port;
		snprintf(o->host, sizeof o->host, "%s", ep->host);
		snprintf(o->rack, sizeof o->rack, "%s", b->rack);
		o->shutting_down = b->in_controlled_shutdown;
	}
	assert(bs->n <= n);
	return bs;
}

/* One level of BROKER overrides collected from the image (up to what a
 * broker keeps; the rest counted). The strings are the image's: valid
 * until it changes, past the build that copies them. */
struct dyn_collect {
	struct sluice_broker_dynamic *v;
	uint32_t n, dropped;
};

static int collect_dynamic(void *arg, const char *name, const char *value)
{
	struct dyn_collect *dc = arg;
	if (dc->n >= SLUICE_BROKER_DYNAMIC_CONFIGS_MAX || strlen(name) > SLUICE_BROKER_CONFIG_NAME_MAX ||
	    strlen(value) > SLUICE_BROKER_CONFIG_VALUE_MAX) {
		dc->dropped++;
		return 0;
	}
	dc->v[dc->n].name = name;
	dc->v[dc->n].value = value;
	dc->n++;
	return 0;
}

/* This broker's dynamic configuration as the image holds it: NULL with no
 * override at either level; *failed when it could not be built (the
 * caller keeps the previous one). */
static struct sluice_broker_config *broker_config_build(struct mc *m, bool *failed)
{
	struct dyn_collect lv[2] = {{0}, {0}}; /* the cluster-wide default, this broker's */
	struct sluice_broker_config *bc = NULL;
	*failed = false;
	for (int i = 0; i < 2; i++) {
		lv[i].v = malloc(SLUICE_BROKER_DYNAMIC_CONFIGS_MAX * sizeof *lv[i].v);
		if (!lv[i].v)
			goto fail;
		(void)sluice_image_configs(m->img, SLUICE_MREC_RESOURCE_BROKER, i ? m->node_name : "", collect_dynamic,
					   &lv[i]);
		if (lv[i].dropped)
			SLOG_WARN("meta", "%u dynamic broker config(s) of %s beyond what a broker keeps (%d) are not applied",
				  lv[i].dropped, i ? "this broker" : "the cluster-wide default", SLUICE_BROKER_DYNAMIC_CONFIGS_MAX);
	}
	if (lv[0].n + lv[1].n > 0) {
		bc = sluice_broker_config_build(m->base, m->cfg.node_id, lv[0].v, lv[0].n, lv[1].v, lv[1].n);
		if (!bc)
			goto fail;
		SLOG_INFO("meta", "dynamic broker configs: %u of this broker, %u cluster-wide defaults in effect", bc->own_n,
			  bc->default_n);
	} else
		SLOG_INFO("meta", "dynamic broker configs: none; server.properties applies");
	free(lv[0].v);
	free(lv[1].v);
	return bc;
fail:
	free(lv[0].v);
	free(lv[1].v);
	*failed = true;
	return NULL;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(a, b);
}

static int cmp_topic_ptr(const void *a, const void *b)
{
	return strcmp((*(struct sluice_topic *const *)a)->name, (*(struct sluice_topic *const *)b)->name);
}

static bool is_dirty(const struct mc *m, const char *name)
{
	return m->all_dirty || bsearch(name, m->dirty, m->dirty_n, sizeof m->dirty[0], cmp_str) != NULL;
}

static void dirty_add(struct mc *m, const char *name)
{
	if (m->all_dirty)
		return;
	if (m->dirty_n == MC_DIRTY_MAX) {
		m->all_dirty = true;
		return;
	}
	snprintf(m->dirty[m->dirty_n++], sizeof m->dirty[0], "%s", name);
}

/* The topics of the new snapshot: image topics, each the previous
 * snapshot's (one more reference) unless the records since named it.
 * Topics without partitions yet (mid-creation) are left out. */
static int snap_fill_topics(struct mc *m, struct sluice_meta_snapshot *s, const struct sluice_meta_snapshot *old)
{
	size_t n = sluice_image_topic_count(m->img);
	s->topics = malloc((n + 1) * sizeof *s->topics);
	if (!s->topics)
		return -1;
	qsort(m->dirty, m->dirty_n, sizeof m->dirty[0], cmp_str);
	bool sorted = true;
	for (size_t i = 0; i < n; i++) {
		const struct sluice_image_topic *it = sluice_image_topic_at(m->img, i);
		if (it->partition_n <= 0)
			continue;
		struct sluice_topic *t = (struct sluice_topic *)(uintptr_t)sluice_meta_find(old, it->name, strlen(it->name));
		if (t && !is_dirty(m, it->name) && !memcmp(t->id, it->id, 16) && t->partitions == it->partition_n) {
			int refs = __atomic_add_fetch(&t->refs, 1, __ATOMIC_ACQ_REL);
			assert(refs >= 2); /* old's and this one */
		} else if (!(t = topic_build(m->img, it, m->cfg.node_id)))
			return -1;
		if (s->topic_n && strcmp(s->topics[s->topic_n - 1]->name, t->name) >= 0)
			sorted = false;
		s->topics[s->topic_n++] = t;
	}
	if (!sorted)
		qsort(s->topics, s->topic_n, sizeof *s->topics, cmp_topic_ptr);
	assert(s->topic_n <= n);
	return 0;
}

/* Publishes the image as a new snapshot (metadata thread only: the one
 * writer of current) and wakes whoever waits for its offset. */
static int snap_publish(struct mc *m)
{
	struct sluice_meta_snapshot *old = m->current, *s = calloc(1, sizeof *s);
	if (!s || snap_fill_topics(m, s, old) < 0)
		goto oom;
	if (m->brokers_dirty || m->all_dirty) {
		struct mc_brokers *bs = brokers_build(m);
		if (!bs)
			goto oom;
		if (bs->n == 0)
			free(bs);
		else {
			s->brokers = bs->v;
			s->broker_n = bs->n;
		}
	} else if (old->brokers) {
		int refs = __atomic_add_fetch(&brokers_of(old->brokers)->refs, 1, __ATOMIC_ACQ_REL);
		assert(refs >= 2);
		s->brokers = old->brokers;
		s->broker_n = old->broker_n;
	}
	bool bc_failed = false;
	if (m->broker_config_dirty || m->all_dirty)
		s->broker_config = broker_config_build(m, &bc_failed);
	if (bc_failed) {
		snap_free(s);
		s = NULL;
		goto oom;
	}
	if (!(m->broker_config_dirty || m->all_dirty) && old->broker_config) {
		sluice_broker_config_ref(old->broker_config);
		s->broker_config = old->broker_config;
	}
	pthread_mutex_lock(&m->lock);
	s->controller_id = m->controller_id;
	pthread_mutex_unlock(&m->lock);
	s->metadata_offset = sluice_image_offset(m->img);
	s->version = old->version + 1;
	s->refs = 1;
	pthread_mutex_lock(&m->pub_lock);
	__atomic_store_n(&m->current, s, __ATOMIC_RELEASE); /* read without the lock by mc_is_current */
	pthread_mutex_unlock(&m->pub_lock);
	mc_release(m, old);
	m->dirty_n = 0;
	m->all_dirty = m->brokers_dirty = m->broker_config_dirty = false;
	pthread_mutex_lock(&m->lock);
	m->applied_offset = s->metadata_offset;
	pthread_cond_broadcast(&m->changed);
	pthread_mutex_unlock(&m->lock);
	pthread_mutex_lock(&m->hook_lock);
	if (m->hook)
		m->hook(m->hook_arg);
	pthread_mutex_unlock(&m->hook_lock);
	return 0;
oom:
	if (s && s->topics)
		snap_free(s);
	else
		free(s);
	SLOG_ERR("meta", "out of memory publishing the metadata snapshot (offset %lld); kept the previous one",
		 (long long)sluice_image_offset(m->img));
	return -1;
}

/* ---- voters and the active controller ----------------------------------------------- */

/* "host:port" (host may be [v6]) into v; returns 0 or -1. */
static int parse_host_port(const char *s, size_t len, struct mc_voter *v)
{
	const char *colon = NULL;
	for (size_t i = 0; i < len; i++)
		if (s[i] == ':')
			colon = s + i;
	if (!colon)
		return -1;
	const char *h = s;
	size_t hl = (size_t)(colon - s);
	if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
		h++;
		hl -= 2;
	}
	char port[8];
	size_t pl = len - (size_t)(colon + 1 - s);
	if (hl == 0 || hl > MC_HOST_MAX || pl == 0 || pl >= sizeof port)
		return -1;
	memcpy(port, colon + 1, pl);
	port[pl] = '\0';
	char *end;
	long p = strtol(port, &end, 10);
	if (*end || p < 1 || p > 65535)
		return -1;
	memcpy(v->host, h, hl);
	v->host[hl] = '\0';
	v->port = (uint16_t)p;
	return 0;
}

/* controller.quorum.voters (id@host:port,...) or, with_ids false,
 * controller.quorum.bootstrap.servers (host:port,...). */
static int voters_parse(struct mc *m, const char *list, bool with_ids, char *err, size_t errlen)
{
	const char *key = with_ids ? "controller.quorum.voters" : "controller.quorum.bootstrap.servers";
	for (const char *p = list; *p;) {
		size_t len = strcspn(p, ",");
		const char *tok = p;
		p += len + (p[len] == ',');
		while (len && (*tok == ' ' || *tok == '\t'))
			tok++, len--;
		while (len && (tok[len - 1] == ' ' || tok[len - 1] == '\t'))
			len--;
		if (!len)
			continue;
		if (m->voter_n == MC_VOTERS_MAX) {
			snprintf(err, errlen, "%s: more than %d controllers", key, MC_VOTERS_MAX);
			return -1;
		}
		struct mc_voter *v = &m->voters[m->voter_n];
		v->id = -1;
		const char *at = memchr(tok, '@', len);
		if (with_ids) {
			char *end;
			long id = at ? strtol(tok, &end, 10) : -1;
			if (!at || end != at || id < 0 || id > INT32_MAX) {
				snprintf(err, errlen, "%s: '%.*s' is not id@host:port", key, (int)len, tok);
				return -1;
			}
			v->id = (int32_t)id;
			len -= (size_t)(at + 1 - tok);
			tok = at + 1;
		}
		if (parse_host_port(tok, len, v) < 0) {
			snprintf(err, errlen, "%s: '%.*s' is not host:port", key, (int)len, tok);
			return -1;
		}
		m->voter_n++;
	}
	if (m->voter_n == 0) {
		snprintf(err, errlen, "%s names no controller", key);
		return -1;
	}
	return 0;
}

/* The voter believed active failed (or said NOT_CONTROLLER): the next one. */
static void leader_next(struct mc *m, int failed)
{
	pthread_mutex_lock(&m->lock);
	if (m->leader == failed) {
		m->leader = (failed + 1) % m->voter_n;
		m->controller_id = -1;
	}
	m->stats.reconnects++;
	pthread_mutex_unlock(&m->lock);
}

/* A controller named the leader: that voter, if we know its id. */
static void leader_set(struct mc *m, int32_t id)
{
	pthread_mutex_lock(&m->lock);
	for (int i = 0; i < m->voter_n; i++)
		if (m->voters[i].id == id && id >= 0) {
			m->leader = i;
			m->controller_id = id;
		}
	pthread_mutex_unlock(&m->lock);
}

/* ---- one connection: framing, bounded waits, failover --------------------------------- */

/* The first flexible version of each request (INT16_MAX: never), for the
 * headers of what forward() relays; from Kafka's message definitions. */
static const int16_t flex_min[] = {
	9, 12, 6, 9, INT16_MAX, INT16_MAX, INT16_MAX, INT16_MAX, 8, 6,                  /* 0-9 */
	3, 6, 4, 4, 4, 5, 3, INT16_MAX, 3, 5,                                         /* 10-19 */
	4, 2, 2, 4, 3, 3, 3, 1, 3, 2,                                                 /* 20-29 */
	2, 2, 4, 2, 2, 2, 2, 2, 2, 2,                                                 /* 30-39 */
	2, 2, 2, 2, 1, 0, 0, INT16_MAX, 1, 1,                                         /* 40-49 */
	0, 0, 0, 1, 1, 0, 0, 0, 0, 0,                                                 /* 50-59 */
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0,                                                 /* 60-69 */
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0,                                                 /* 70-79 */
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0,                                                 /* 80-89 */
	0, 0, 0, 0, 0,                                                                /* 90-94 */
};
#define API_KEY_MAX ((int16_t)(sizeof flex_min / sizeof flex_min[0]))

static bool api_flexible(int16_t key, int16_t version)
{
	assert(key >= 0 && key < API_KEY_MAX);
	return version >= flex_min[key];
}

static void conn_init(struct mc_conn *c, const char *who)
{
	memset(c, 0, sizeof *c);
	c->who = who;
	c->fd = -1;
	kwr_init(&c->out, 4096, MC_REQUEST_BYTES_MAX + 4096);
}

static void conn_close(struct mc_conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

static void conn_free(struct mc_conn *c)
{
	conn_close(c);
	kwr_free(&c->out);
	free(c->in);
	c->in = NULL;
	c->in_cap = 0;
}

/* A thread failing over and over (backoff at its maximum: no controller
 * for a while) says so once at `level`, then only at debug level, until
 * an answer decodes again. */
static int conn_log_level(const struct mc_conn *c, int level)
{
	return c->backoff_ms >= MC_BACKOFF_MAX_MS ? SLUICE_LOG_DEBUG : level;
}

/* 100 ms, doubling to 1 s, until an answer decodes. */
static void backoff_grow(struct mc_conn *c)
{
	c->backoff_ms = c->backoff_ms ? c->backoff_ms * 2 : MC_BACKOFF_MIN_MS;
	if (c->backoff_ms > MC_BACKOFF_MAX_MS)
		c->backoff_ms = MC_BACKOFF_MAX_MS;
	assert(c->backoff_ms >= MC_BACKOFF_MIN_MS && c->backoff_ms <= MC_BACKOFF_MAX_MS);
}

/* Drops the connection after a failure (why: for the log) and moves the
 * leader guess on; the next connect waits the backoff first. */
static void conn_fail(struct mc *m, struct mc_conn *c, const char *why)
{
	if (c->fd >= 0 && !is_stopping(m))
		SLOG(conn_log_level(c, SLUICE_LOG_WARN), "meta", "%s connection to controller %s:%u: %s; trying the next one",
		     c->who, m->voters[c->voter].host, m->voters[c->voter].port, why);
	conn_close(c);
	leader_next(m, c->voter);
	backoff_grow(c);
}

/* Waits until fd is ready for events or the deadline: 1 ready, 0 timeout, -1 closing or error. */
static int io_wait(struct mc *m, int fd, short events, int64_t deadline)
{
	for (;;) {
		int64_t left = deadline - now_ms();
		if (left <= 0)
			return 0;
		struct pollfd p[2] = {{.fd = fd, .events = events}, {.fd = m->stop_fd, .events = POLLIN}};
		int r = poll(p, 2, left > 1000 ? 1000 : (int)left);
		if (r < 0 && errno != EINTR)
			return -1;
		if (is_stopping(m))
			return -1;
		if (r > 0 && p[0].revents)
			return 1;
	}
}

static int io_write(struct mc *m, int fd, const uint8_t *p, size_t n, int64_t deadline)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
			if (io_wait(m, fd, POLLOUT, deadline) <= 0)
				return -1;
			continue;
		}
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int io_read(struct mc *m, int fd, uint8_t *p, size_t n, int64_t deadline)
{
	while (n) {
		ssize_t r = recv(fd, p, n, 0);
		if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
			if (io_wait(m, fd, POLLIN, deadline) <= 0)
				return -1;
			continue;
		}
		if (r <= 0)
			return -1; /* closed by the controller, or an error */
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/* A non-blocking TCP connection to v within the deadline, or -1. */
static int tcp_connect(struct mc *m, const struct mc_voter *v, int64_t deadline)
{
	char port[8];
	snprintf(port, sizeof port, "%u", v->port);
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
	if (getaddrinfo(v->host, port, &hints, &res) != 0 || !res)
		return -1;
	int fd = -1;
	for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
		fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		int err = 0;
		socklen_t el = sizeof err;
		if (connect(fd, a->ai_addr, a->ai_addrlen) < 0 &&
		    (errno != EINPROGRESS || io_wait(m, fd, POLLOUT, deadline) <= 0 ||
		     getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err != 0)) {
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	if (fd >= 0) {
		int one = 1;
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	}
	return fd;
}

/* Connects c to the voter believed active, after c's backoff. */
static int conn_connect(struct mc *m, struct mc_conn *c)
{
	assert(c->fd < 0);
	if (!pause_ms(m, c->backoff_ms))
		return -1;
	pthread_mutex_lock(&m->lock);
	c->voter = m->leader;
	pthread_mutex_unlock(&m->lock);
	assert(c->voter >= 0 && c->voter < m->voter_n);
	c->fd = tcp_connect(m, &m->voters[c->voter], now_ms() + MC_CONNECT_TIMEOUT_MS);
	if (c->fd < 0) {
		if (!is_stopping(m))
			SLOG(conn_log_level(c, SLUICE_LOG_INFO), "meta", "%s: cannot connect to controller %s:%u; trying the next one",
			     c->who, m->voters[c->voter].host, m->voters[c->voter].port);
		conn_fail(m, c, "connect failed");
		return -1;
	}
	return 0;
}

enum call_result {
	CALL_OK = 0,
	CALL_UNSENT,  /* no connection, or the request was not written: nothing happened */
	CALL_LOST,    /* written, but no answer that frames (the connection is dropped) */
	CALL_STOPPED, /* closing */
	CALL_REFUSED, /* the request does not fit a frame (or memory): never sent */
};

static enum call_result call_failed(struct mc *m, struct mc_conn *c, enum call_result r, const char *why)
{
	if (is_stopping(m)) {
		conn_close(c);
		return CALL_STOPPED;
	}
	conn_fail(m, c, why);
	return r;
}

/* Sends body as api key/version on c (connecting first if needed) and
 * reads the answer; resp is then its body (after the response header). */
/* An idle connection that is readable was closed (or reset) by the
 * controller meanwhile, e.g. it died: sending on it would lose the
 * request, so it is dropped and the call connects anew. */
static void conn_drop_if_closed(struct mc *m, struct mc_conn *c)
{
	struct pollfd p = {.fd = c->fd, .events = POLLIN};
	if (c->fd < 0 || poll(&p, 1, 0) <= 0 || !p.revents)
		return;
	SLOG_INFO("meta", "%s: controller %s:%u closed the idle connection; connecting again", c->who,
		  m->voters[c->voter].host, m->voters[c->voter].port);
	conn_close(c); /* the same voter first: a dead one fails to connect and moves us on */
}

static enum call_result conn_call(struct mc *m, struct mc_conn *c, int16_t key, int16_t version,
				  const struct kwr *body, int64_t deadline, struct krd *resp)
{
	conn_drop_if_closed(m, c);
	if (c->fd < 0 && conn_connect(m, c) < 0)
		return is_stopping(m) ? CALL_STOPPED : CALL_UNSENT;
	bool flex = api_flexible(key, version);
	int32_t corr = ++c->correlation_id;
	kwr_reset(&c->out);
	kwr_i32(&c->out, 0);
	kwr_i16(&c->out, key);
	kwr_i16(&c->out, version);
	kwr_i32(&c->out, corr);
	kwr_cstr(&c->out, false, m->client_id);
	if (flex)
		kwr_tags_empty(&c->out);
	kwr_raw(&c->out, body->buf, body->len);
	if (c->out.err || body->err) {
		SLOG_ERR("meta", "%s: request api %d v%d does not fit %u bytes", c->who, key, version, MC_REQUEST_BYTES_MAX);
		(void)pause_ms(m, MC_BACKOFF_MAX_MS); /* (out of memory) no thread retries at once */
		return CALL_REFUSED;
	}
	kwr_patch_i32(&c->out, 0, (int32_t)(c->out.len - 4));
	if (io_write(m, c->fd, c->out.buf, c->out.len, deadline) < 0)
		return call_failed(m, c, CALL_UNSENT, "the request could not be written");
	uint8_t hdr[4];
	if (io_read(m, c->fd, hdr, 4, deadline) < 0)
		return call_failed(m, c, CALL_LOST, "no answer (closed or timed out)");
	uint32_t n = kbe32(hdr);
	if (n < 4 || n > MC_RESPONSE_BYTES_MAX)
		return call_failed(m, c, CALL_LOST, "an answer whose length is out of bounds");
	if (n > c->in_cap) {
		uint8_t *nb = realloc(c->in, n);
		if (!nb)
			return call_failed(m, c, CALL_LOST, "out of memory for the answer");
		c->in = nb;
		c->in_cap = n;
	}
	if (io_read(m, c->fd, c->in, n, deadline) < 0)
		return call_failed(m, c, CALL_LOST, "the answer was cut short");
	krd_init(resp, c->in, n);
	int32_t got = krd_i32(resp);
	if (flex && key != API_API_VERSIONS) /* ApiVersions answers with header v0 */
		krd_tags_skip(resp);
	if (resp->err || got != corr)
		return call_failed(m, c, CALL_LOST, "an answer with another correlation id, or a bad header");
	return CALL_OK;
}

/* After a decoded answer: the connection is good, the backoff starts over. */
static void conn_ok(struct mc *m, struct mc_conn *c)
{
	c->backoff_ms = 0;
	pthread_mutex_lock(&m->lock);
	if (m->voters[c->voter].id >= 0 && m->leader == c->voter)
		m->controller_id = m->voters[c->voter].id;
	pthread_mutex_unlock(&m->lock);
}

/* An answer that does not decode: the controller is broken, or not one. */
static void conn_garbage(struct mc *m, struct mc_conn *c, int16_t key, const struct krd *r)
{
	char why[160];
	snprintf(why, sizeof why, "api %d answer does not decode (%s at byte %zu)", key,
		 r->err_what ? r->err_what : "trailing bytes", krd_offset(r));
	conn_fail(m, c, why);
}

/* The active controller refused: try the next voter. */
static void conn_not_controller(struct mc *m, struct mc_conn *c)
{
	SLOG(conn_log_level(c, SLUICE_LOG_INFO), "meta",
	     "%s: controller %s:%u is not the active controller; trying the next one", c->who, m->voters[c->voter].host,
	     m->voters[c->voter].port);
	conn_close(c);
	leader_next(m, c->voter);
	backoff_grow(c);
}

/* A tagged-field section: returns the field tag `want` (as a reader over
 * its bytes) if present; the section is consumed. */
static bool tags_find(struct krd *r, uint32_t want, struct krd *field)
{
	bool found = false;
	uint32_t count = krd_uvarint(r);
	if (count > SLUICE_KAFKA_TAGGED_FIELDS_MAX) {
		krd_fail(r, "tagged field count");
		return false;
	}
	for (uint32_t i = 0; i < count && !r->err; i++) {
		uint32_t tag = krd_uvarint(r), size = krd_uvarint(r);
		const uint8_t *p = r->p;
		krd_skip(r, size);
		if (!r->err && tag == want) {
			krd_init(field, p, size);
			found = true;
		}
	}
	return found && !r->err;
}

/* The top-level SluiceMetadataOffset of an answer, -1 when absent. */
static int64_t tags_metadata_offset(struct krd *r)
{
	struct krd f;
	if (!tags_find(r, MC_TAG_SLUICE, &f))
		return -1;
	int64_t off = krd_i64(&f);
	return f.err ? -1 : off;
}

/* ---- registration and heartbeats (the heartbeat thread) ---------------------------- */

/* Kafka's security protocol ids by listener name; other names: PLAINTEXT. */
static int16_t security_protocol(const char *name, size_t len)
{
	static const char *const names[] = {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"};
	for (int16_t i = 0; i < 4; i++)
		if (strlen(names[i]) == len && !strncasecmp(name, names[i], len))
			return i;
	return 0;
}

/* The Listeners array of BrokerRegistration from NAME://host:port,... */
static void write_listeners(struct kwr *w, const char *list)
{
	struct {
		const char *name;
		size_t name_len;
		struct mc_voter ep;
	} v[SLUICE_MREC_LISTENERS_MAX];
	int32_t n = 0;
	for (const char *p = list; *p && n < SLUICE_MREC_LISTENERS_MAX;) {
		size_t len = strcspn(p, ",");
		const char *tok = p, *sep = strstr(tok, "://");
		p += len + (p[len] == ',');
		while (len && *tok == ' ')
			tok++, len--;
		if (!sep || sep >= tok + len || parse_host_port(sep + 3, len - (size_t)(sep + 3 - tok), &v[n].ep) < 0) {
			SLOG_WARN("meta", "listener '%.*s' is not NAME://host:port: not registered", (int)len, tok);
			continue;
		}
		v[n].name = tok;
		v[n].name_len = (size_t)(sep - tok);
		if (!strcmp(v[n].ep.host, "0.0.0.0") || !strcmp(v[n].ep.host, "::"))
			snprintf(v[n].ep.host, sizeof v[n].ep.host, "localhost");
		n++;
	}
	kwr_array(w, true, n);
	for (int32_t i = 0; i < n; i++) {
		kwr_string(w, true, v[i].name, (int32_t)v[i].name_len);
		kwr_cstr(w, true, v[i].ep.host);
		kwr_i16(w, (int16_t)v[i].ep.port);
		kwr_i16(w, security_protocol(v[i].name, v[i].name_len));
		kwr_tags_empty(w);
	}
}

/* BrokerRegistration v3; 0 registered, -1 not (retry). */
static int hb_register(struct mc *m, struct mc_conn *c)
{
	pthread_mutex_lock(&m->lock);
	int64_t previous = m->previous_epoch;
	pthread_mutex_unlock(&m->lock);
	struct kwr w;
	kwr_init(&w, 512, MC_REQUEST_BYTES_MAX);
	kwr_i32(&w, m->cfg.node_id);
	kwr_cstr(&w, true, m->cfg.cluster_id);
	kwr_uuid(&w, m->incarnation_id);
	write_listeners(&w, m->cfg.listeners);
	kwr_array(&w, true, 1); /* Features */
	kwr_cstr(&w, true, "metadata.version");
	kwr_i16(&w, MC_METADATA_VERSION_MIN);
	kwr_i16(&w, MC_METADATA_VERSION_MAX);
	kwr_tags_empty(&w);
	kwr_cstr(&w, true, m->cfg.rack[0] ? m->cfg.rack : NULL);
	kwr_bool(&w, false);    /* IsMigratingZkBroker */
	kwr_array(&w, true, 0); /* LogDirs */
	kwr_i64(&w, previous);  /* PreviousBrokerEpoch */
	kwr_tags_empty(&w);
	struct krd r;
	enum call_result cr = conn_call(m, c, API_BROKER_REGISTRATION, 3, &w, now_ms() + MC_REQUEST_TIMEOUT_MS, &r);
	kwr_free(&w);
	if (cr != CALL_OK)
		return -1;
	(void)krd_i32(&r); /* ThrottleTimeMs */
	int16_t error = krd_i16(&r);
	int64_t epoch = krd_i64(&r);
	krd_tags_skip(&r);
	if (r.err || krd_left(&r)) {
		conn_garbage(m, c, API_BROKER_REGISTRATION, &r);
		return -1;
	}
	if (error == KERR_NOT_CONTROLLER) {
		conn_not_controller(m, c);
		return -1;
	}
	conn_ok(m, c);
	pthread_mutex_lock(&m->lock);
	if (error || epoch < 0) {
		char why[sizeof m->last_error];
		snprintf(why, sizeof why, "BrokerRegistration answered %s (%d)", sluice_kafka_error_name(error), error);
		if (strcmp(why, m->last_error)) /* once per distinct refusal */
			SLOG_WARN("meta", "node %d: %s; retrying every %d ms", m->cfg.node_id, why, MC_BACKOFF_MAX_MS);
		memcpy(m->last_error, why, sizeof why);
	} else {
		m->broker_epoch = epoch;
		m->fenced = true;
		m->previous_epoch = -1;
		m->last_error[0] = '\0';
		m->stats.registrations++;
		pthread_cond_broadcast(&m->changed);
		SLOG_INFO("meta", "node %d registered with the controller: broker epoch %lld", m->cfg.node_id,
			  (long long)epoch);
	}
	pthread_mutex_unlock(&m->lock);
	return error || epoch < 0 ? -1 : 0;
}

/* BrokerHeartbeat v1 with this broker's metadata offset; 0 answered, -1 not. */
static int hb_beat(struct mc *m, struct mc_conn *c, int64_t epoch)
{
	pthread_mutex_lock(&m->lock);
	int64_t offset = m->applied_offset;
	bool want_shutdown = m->want_shutdown;
	pthread_mutex_unlock(&m->lock);
	struct kwr w;
	kwr_init(&w, 64, MC_REQUEST_BYTES_MAX);
	kwr_i32(&w, m->cfg.node_id);
	kwr_i64(&w, epoch);
	kwr_i64(&w, offset);
	kwr_bool(&w, false); /* WantFence */
	kwr_bool(&w, want_shutdown);
	kwr_tags_empty(&w);
	struct krd r;
	int64_t sent_ms = now_ms();
	enum call_result cr = conn_call(m, c, API_BROKER_HEARTBEAT, 1, &w, sent_ms + MC_REQUEST_TIMEOUT_MS, &r);
	kwr_free(&w);
	if (cr != CALL_OK)
		return -1;
	(void)krd_i32(&r);
	int16_t error = krd_i16(&r);
	bool caught_up = krd_bool(&r), fenced = krd_bool(&r), should_shutdown = krd_bool(&r);
	krd_tags_skip(&r);
	if (r.err || krd_left(&r)) {
		conn_garbage(m, c, API_BROKER_HEARTBEAT, &r);
		return -1;
	}
	if (error == KERR_NOT_CONTROLLER) {
		conn_not_controller(m, c);
		return -1;
	}
	conn_ok(m, c);
	(void)caught_up;
	pthread_mutex_lock(&m->lock);
	m->stats.heartbeats++;
	if (error == KERR_STALE_BROKER_EPOCH || error == KERR_BROKER_ID_NOT_REGISTERED) {
		SLOG_WARN("meta", "node %d: heartbeat answered %s: registering again", m->cfg.node_id,
			  sluice_kafka_error_name(error));
		m->broker_epoch = -1;
		m->fenced = true;
	} else if (error) {
		snprintf(m->last_error, sizeof m->last_error, "BrokerHeartbeat answered %s (%d)",
			 sluice_kafka_error_name(error), error);
	} else {
		if (m->fenced != fenced)
			SLOG_INFO("meta", "node %d is %s", m->cfg.node_id, fenced ? "fenced" : "unfenced");
		m->fenced = fenced;
		m->should_shutdown = should_shutdown;
		/* The controller heard from this broker no earlier than sent_ms:
		 * it fences no sooner than a session after that. */
		atomic_store(&m->lease_until_ms, fenced ? 0 : sent_ms + m->cfg.session_timeout_ms);
	}
	pthread_cond_broadcast(&m->changed);
	pthread_mutex_unlock(&m->lock);
	return error ? -1 : 0;
}

/* Until the next heartbeat is due (or kicked, or closing). */
static void hb_wait(struct mc *m, int64_t ms)
{
	int64_t deadline = now_ms() + ms;
	pthread_mutex_lock(&m->lock);
	while (!m->stopping && !m->hb_kick && now_ms() < deadline)
		cond_wait_until(&m->changed, &m->lock, deadline);
	m->hb_kick = false;
	pthread_mutex_unlock(&m->lock);
}

static void *hb_main(void *arg)
{
	struct mc *m = arg;
	struct mc_conn c;
	conn_init(&c, "heartbeat");
	while (!is_stopping(m)) {
		pthread_mutex_lock(&m->lock);
		int64_t epoch = m->broker_epoch;
		bool done = m->should_shutdown, shutting = m->want_shutdown;
		pthread_mutex_unlock(&m->lock);
		if (done) { /* the controller let us go: nothing more to say */
			hb_wait(m, MC_BACKOFF_MAX_MS);
			continue;
		}
		int rc = epoch < 0 ? hb_register(m, &c) : hb_beat(m, &c, epoch);
		if (rc < 0 && c.fd >= 0) /* a refusal on a good connection */
			hb_wait(m, MC_BACKOFF_MAX_MS);
		else if (rc == 0 && epoch >= 0)
			hb_wait(m, shutting ? MC_SHUTDOWN_HEARTBEAT_MS : m->cfg.heartbeat_interval_ms);
	}
	conn_free(&c);
	return NULL;
}

/* ---- the metadata log: fetch, apply, publish (the metadata thread) ------------------- */

struct apply_ctx {
	struct mc *m;
	struct sluice_image *img;
	bool snapshot; /* records of a snapshot: applied at offset -1 */
	bool failed;
	uint64_t applied;
	char err[200];
};

/* Which snapshot parts record r changes (the topic it names, or the brokers). */
static void mark_dirty(struct mc *m, const struct sluice_image *img, const struct sluice_mrec *r)
{
	const struct sluice_image_topic *t = NULL;
	switch (r->type) {
	case SLUICE_MREC_TOPIC:
		dirty_add(m, r->topic.name);
		break;
	case SLUICE_MREC_PARTITION:
		t = sluice_image_topic_by_id(img, r->partition.topic_id);
		break;
	case SLUICE_MREC_PARTITION_CHANGE:
		t = sluice_image_topic_by_id(img, r->partition_change.topic_id);
		break;
	case SLUICE_MREC_CONFIG:
		if (r->config.resource_type == SLUICE_MREC_RESOURCE_TOPIC)
			dirty_add(m, r->config.resource_name);
		else if (r->config.resource_type == SLUICE_MREC_RESOURCE_BROKER &&
			 (!r->config.resource_name[0] || !strcmp(r->config.resource_name, m->node_name)))
			m->broker_config_dirty = true;
		break;
	case SLUICE_MREC_REGISTER_BROKER:
	case SLUICE_MREC_UNREGISTER_BROKER:
	case SLUICE_MREC_FENCE_BROKER:
	case SLUICE_MREC_UNFENCE_BROKER:
	case SLUICE_MREC_BROKER_REGISTRATION_CHANGE:
		m->brokers_dirty = true;
		break;
	default: /* removed topics drop out of the rebuild; the rest is not in snapshots */
		break;
	}
	if (t)
		dirty_add(m, t->name);
}

static int apply_record(void *arg, int64_t offset, const struct sluice_mrec *r)
{
	struct apply_ctx *a = arg;
	if (a->failed)
		return -1;
	if (!a->snapshot) {
		int64_t at = sluice_image_offset(a->img);
		if (offset <= at)
			return 0; /* already applied */
		if (offset != at + 1) {
			snprintf(a->err, sizeof a->err, "record offset %lld follows %lld: records are missing",
				 (long long)offset, (long long)at);
			a->failed = true;
			return -1;
		}
	}
	char err[160];
	if (sluice_image_apply(a->img, r, a->snapshot ? -1 : offset, err, sizeof err) < 0) {
		snprintf(a->err, sizeof a->err, "%s record at offset %lld does not apply: %s",
			 sluice_mrec_type_name(r->type), (long long)offset, err);
		a->failed = true;
		return -1;
	}
	if (!a->snapshot)
		mark_dirty(a->m, a->img, r);
	a->applied++;
	return 0;
}

/* Applies the whole record batches at p[0..len); a cut-off last batch is
 * left. Returns the bytes consumed, or -1 with a->err set. */
static int64_t apply_batches(struct apply_ctx *a, const uint8_t *p, size_t len)
{
	size_t pos = 0;
	while (pos < len) {
		struct sluice_batch h;
		enum sluice_batch_result br = sluice_batch_parse(p + pos, len - pos, &h);
		if (br == SLUICE_BATCH_SHORT)
			break;
		if (br != SLUICE_BATCH_OK) {
			snprintf(a->err, sizeof a->err, "record batch at byte %zu: %s", pos, sluice_batch_result_name(br));
			return -1;
		}
		size_t n = (size_t)sluice_batch_total_bytes(&h);
		char err[160] = "";
		int64_t got = sluice_mlog_decode_batch(p + pos, n, apply_record, a, err, sizeof err);
		if (a->failed)
			return -1;
		if (got < 0) {
			snprintf(a->err, sizeof a->err, "record batch at byte %zu: %s", pos, err);
			return -1;
		}
		pos += n;
	}
	assert(pos <= len);
	return (int64_t)pos;
}

/* What a Fetch answer says of __cluster_metadata partition 0. */
struct fetch_part {
	bool found;
	int16_t error;
	int64_t hwm, log_start;
	int32_t leader_id; /* CurrentLeader, -1 unknown */
	const uint8_t *records;
	int32_t records_len;
};

static void fetch_read_partition(struct krd *r, bool ours, struct fetch_part *out)
{
	int32_t index = krd_i32(r);
	int16_t error = krd_i16(r);
	int64_t hwm = krd_i64(r);
	(void)krd_i64(r); /* LastStableOffset */
	int64_t log_start = krd_i64(r);
	int32_t aborted = krd_array(r, true, 17);
	for (int32_t i = 0; i < aborted && !r->err; i++) {
		krd_skip(r, 16);
		krd_tags_skip(r);
	}
	(void)krd_i32(r); /* PreferredReadReplica */
	const uint8_t *rec;
	int32_t rec_len = krd_bytes(r, true, &rec);
	struct krd leader;
	int32_t leader_id = -1;
	if (tags_find(r, 1, &leader)) { /* CurrentLeader */
		leader_id = krd_i32(&leader);
		if (leader.err)
			leader_id = -1;
	}
	if (!ours || index != 0 || r->err)
		return;
	out->found = true;
	out->error = error;
	out->hwm = hwm;
	out->log_start = log_start;
	out->leader_id = leader_id;
	out->records = rec;
	out->records_len = rec_len > 0 ? rec_len : 0;
}

/* Decodes a Fetch v12 answer; 0, or -1 (garbage). */
static int fetch_parse(struct krd *r, int16_t *top_error, struct fetch_part *out)
{
	memset(out, 0, sizeof *out);
	out->leader_id = -1;
	(void)krd_i32(r); /* ThrottleTimeMs */
	*top_error = krd_i16(r);
	(void)krd_i32(r); /* SessionId */
	int32_t topics = krd_array(r, true, 2);
	for (int32_t t = 0; t < topics && !r->err; t++) {
		bool ours = kstr_eq(krd_string(r, true), MC_METADATA_TOPIC);
		int32_t parts = krd_array(r, true, 37); /* the smallest partition */
		for (int32_t p = 0; p < parts && !r->err; p++)
			fetch_read_partition(r, ours, out);
		krd_tags_skip(r);
	}
	krd_tags_skip(r);
	return r->err || krd_left(r) ? -1 : 0;
}

static void fetch_encode(const struct mc *m, struct kwr *w, int64_t offset)
{
	kwr_i32(w, m->cfg.node_id); /* ReplicaId: an observer */
	kwr_i32(w, MC_FETCH_WAIT_MS);
	kwr_i32(w, 1); /* MinBytes */
	kwr_i32(w, MC_FETCH_BYTES_MAX);
	kwr_i8(w, 0);  /* IsolationLevel */
	kwr_i32(w, 0); /* SessionId */
	kwr_i32(w, -1); /* SessionEpoch: no session */
	kwr_array(w, true, 1);
	kwr_cstr(w, true, MC_METADATA_TOPIC);
	kwr_array(w, true, 1);
	kwr_i32(w, 0);      /* Partition */
	kwr_i32(w, -1);     /* CurrentLeaderEpoch */
	kwr_i64(w, offset); /* FetchOffset */
	kwr_i32(w, -1);     /* LastFetchedEpoch */
	kwr_i64(w, -1);     /* LogStartOffset */
	kwr_i32(w, MC_FETCH_BYTES_MAX);
	kwr_tags_empty(w);
	kwr_tags_empty(w);
	kwr_array(w, true, 0); /* ForgottenTopicsData */
	kwr_cstr(w, true, "");  /* RackId */
	kwr_tags_empty(w);
}

/* After an applied answer: publish, and record how far the log goes. */
static void fetch_applied(struct mc *m, uint64_t round, int64_t hwm, uint64_t applied, bool publish)
{
	if (publish)
		(void)snap_publish(m);
	pthread_mutex_lock(&m->lock);
	bool was = m->caught_up;
	m->caught_up = m->applied_offset + 1 >= hwm;
	if (m->caught_up && !was && m->fenced)
		m->hb_kick = true; /* tell the controller now, to be unfenced sooner */
	m->fetch_done = round;
	m->fetch_hwm = hwm;
	m->stats.fetches++;
	m->stats.records_applied += applied;
	pthread_cond_broadcast(&m->changed);
	pthread_mutex_unlock(&m->lock);
}

/* One long-poll Fetch of the metadata log and the records it brings. */
static void fetch_once(struct mc *m, struct mc_conn *c)
{
	struct kwr w;
	kwr_init(&w, 256, MC_REQUEST_BYTES_MAX);
	fetch_encode(m, &w, sluice_image_offset(m->img) + 1);
	pthread_mutex_lock(&m->lock);
	uint64_t round = ++m->fetch_sent;
	int32_t controller_before = m->controller_id;
	pthread_mutex_unlock(&m->lock);
	struct krd r;
	enum call_result cr = conn_call(m, c, API_FETCH, 12, &w, now_ms() + MC_FETCH_TIMEOUT_MS, &r);
	kwr_free(&w);
	if (cr != CALL_OK)
		return;
	int16_t top;
	struct fetch_part fp;
	if (fetch_parse(&r, &top, &fp) < 0 || (!top && !fp.found)) {
		conn_garbage(m, c, API_FETCH, &r);
		return;
	}
	int16_t error = top ? top : fp.error;
	if (error == KERR_NOT_CONTROLLER || error == KERR_NOT_LEADER_OR_FOLLOWER) {
		conn_not_controller(m, c);
		if (fp.leader_id >= 0)
			leader_set(m, fp.leader_id);
		return;
	}
	if (error == KERR_OFFSET_OUT_OF_RANGE) {
		SLOG_INFO("meta", "metadata offset %lld is no longer in the controller's log (from %lld): loading its snapshot",
			  (long long)sluice_image_offset(m->img) + 1, (long long)fp.log_start);
		/* again right after a load: a controller whose snapshot and log
		 * disagree; each load costs a transfer, so back off */
		unsigned streak = m->out_of_range_streak++;
		if (streak)
			(void)pause_ms(m, streak >= 4 ? MC_BACKOFF_MAX_MS : MC_BACKOFF_MIN_MS << (streak - 1));
		m->need_snapshot = true;
		return;
	}
	m->out_of_range_streak = 0;
	if (error) {
		char why[120];
		snprintf(why, sizeof why, "metadata fetch answered %s (%d)", sluice_kafka_error_name(error), error);
		conn_fail(m, c, why);
		return;
	}
	conn_ok(m, c);
	if (fp.leader_id >= 0)
		leader_set(m, fp.leader_id);
	struct apply_ctx a = {.m = m, .img = m->img};
	int64_t used = apply_batches(&a, fp.records, (size_t)fp.records_len);
	if (used == 0 && fp.records_len > 0)
		snprintf(a.err, sizeof a.err, "a fetch answer without a whole record batch (%d bytes)", fp.records_len);
	pthread_mutex_lock(&m->lock);
	bool controller_changed = m->controller_id != controller_before;
	pthread_mutex_unlock(&m->lock);
	fetch_applied(m, round, fp.hwm, a.applied,
		      a.applied || controller_changed || m->brokers_dirty || m->current->version == 1);
	if (used < 0 || (used == 0 && fp.records_len > 0)) {
		/* A record that does not apply here: start over from the controller's image. */
		m->need_snapshot = a.failed;
		SLOG_ERR("meta", "metadata log: %s%s", a.err, a.failed ? "; loading the controller's snapshot" : "");
		conn_fail(m, c, a.err);
	}
}

/* ---- snapshot load (FetchSnapshot), when the log no longer holds our offset ------------- */

/* A snapshot being loaded into an image of its own, which replaces ours
 * once complete: a load that fails half-way leaves the old one in place. */
struct snap_load {
	struct sluice_image *img;
	int64_t end, size, pos; /* SnapshotId.EndOffset (-1: the current one), total bytes, bytes had */
	uint8_t *pend;          /* bytes of a batch cut by the page end */
	size_t pend_len, pend_cap;
	uint64_t applied;
};

struct snap_page {
	bool found;
	int16_t error;
	int64_t end, size, position;
	const uint8_t *bytes;
	int32_t len;
};

static void snapshot_encode(const struct mc *m, struct kwr *w, int64_t end, int64_t pos)
{
	kwr_i32(w, m->cfg.node_id); /* ReplicaId */
	kwr_i32(w, MC_SNAPSHOT_PAGE_BYTES);
	kwr_array(w, true, 1);
	kwr_cstr(w, true, MC_METADATA_TOPIC);
	kwr_array(w, true, 1);
	kwr_i32(w, 0);   /* Partition */
	kwr_i32(w, -1);  /* CurrentLeaderEpoch */
	kwr_i64(w, end); /* SnapshotId */
	kwr_i32(w, -1);
	kwr_tags_empty(w);
	kwr_i64(w, pos); /* Position */
	kwr_tags_empty(w);
	kwr_tags_empty(w);
	kwr_tags_empty(w);
}

static int snapshot_parse(struct krd *r, int16_t *top, struct snap_page *out)
{
	memset(out, 0, sizeof *out);
	(void)krd_i32(r); /* ThrottleTimeMs */
	*top = krd_i16(r);
	int32_t topics = krd_array(r, true, 3);
	for (int32_t t = 0; t < topics && !r->err; t++) {
		bool ours = kstr_eq(krd_string(r, true), MC_METADATA_TOPIC);
		int32_t parts = krd_array(r, true, 37); /* the smallest partition */
		for (int32_t p = 0; p < parts && !r->err; p++) {
			int32_t index = krd_i32(r);
			struct snap_page pg = {.found = true};
			pg.error = krd_i16(r);
			pg.end = krd_i64(r);
			(void)krd_i32(r); /* Epoch */
			krd_tags_skip(r);
			pg.size = krd_i64(r);
			pg.position = krd_i64(r);
			pg.len = krd_bytes(r, true, &pg.bytes);
			krd_tags_skip(r);
			if (ours && index == 0 && !r->err)
				*out = pg;
		}
		krd_tags_skip(r);
	}
	krd_tags_skip(r);
	return r->err || krd_left(r) ? -1 : 0;
}

/* Whether page pg continues load sl (the first page sets its id and size). */
static bool snapshot_page_fits(struct snap_load *sl, const struct snap_page *pg)
{
	if (sl->end < 0) {
		if (pg->end < 0 || pg->size < 0 || pg->size > MC_SNAPSHOT_BYTES_MAX)
			return false;
		sl->end = pg->end;
		sl->size = pg->size;
	}
	int64_t len = pg->len > 0 ? pg->len : 0;
	return pg->end == sl->end && pg->size == sl->size && pg->position == sl->pos && len <= sl->size - sl->pos &&
	       (len > 0 || sl->pos == sl->size);
}

/* Appends the page to what was left of the previous one and applies the
 * whole batches; 0, or -1 with err. */
static int snapshot_take(struct mc *m, struct snap_load *sl, const struct snap_page *pg, char *err, size_t errlen)
{
	size_t len = pg->len > 0 ? (size_t)pg->len : 0;
	if (sl->pend_len + len > sl->pend_cap) {
		size_t cap = sl->pend_len + len;
		uint8_t *nb = realloc(sl->pend, cap ? cap : 1);
		if (!nb) {
			snprintf(err, errlen, "out of memory for a snapshot page");
			return -1;
		}
		sl->pend = nb;
		sl->pend_cap = cap;
	}
	if (len)
		memcpy(sl->pend + sl->pend_len, pg->bytes, len);
	sl->pend_len += len;
	struct apply_ctx a = {.m = m, .img = sl->img, .snapshot = true};
	int64_t used = apply_batches(&a, sl->pend, sl->pend_len);
	if (used < 0) {
		snprintf(err, errlen, "snapshot at byte %lld: %s", (long long)sl->pos, a.err);
		return -1;
	}
	memmove(sl->pend, sl->pend + used, sl->pend_len - (size_t)used);
	sl->pend_len -= (size_t)used;
	sl->pos += (int64_t)len;
	sl->applied += a.applied;
	if (sl->pend_len > MC_RESPONSE_BYTES_MAX || (sl->pos == sl->size && sl->pend_len)) {
		snprintf(err, errlen, "the snapshot ends inside a record batch (%zu bytes left)", sl->pend_len);
		return -1;
	}
	return 0;
}

/* One FetchSnapshot page: 0 taken, -1 the load starts over. */
static int snapshot_page(struct mc *m, struct mc_conn *c, struct snap_load *sl)
{
	struct kwr w;
	kwr_init(&w, 128, MC_REQUEST_BYTES_MAX);
	snapshot_encode(m, &w, sl->end, sl->pos);
	struct krd r;
	enum call_result cr = conn_call(m, c, API_FETCH_SNAPSHOT, 0, &w, now_ms() + MC_REQUEST_TIMEOUT_MS, &r);
	kwr_free(&w);
	if (cr != CALL_OK)
		return -1;
	int16_t top;
	struct snap_page pg;
	if (snapshot_parse(&r, &top, &pg) < 0 || (!top && !pg.found)) {
		conn_garbage(m, c, API_FETCH_SNAPSHOT, &r);
		return -1;
	}
	int16_t error = top ? top : pg.error;
	char why[256];
	if (error == KERR_NOT_CONTROLLER || error == KERR_NOT_LEADER_OR_FOLLOWER) {
		conn_not_controller(m, c);
		return -1;
	}
	if (error == KERR_SNAPSHOT_NOT_FOUND) { /* the controller moved on: the current one, from the start */
		SLOG_INFO("meta", "metadata snapshot ending at %lld is gone: loading the current one", (long long)sl->end);
		(void)pause_ms(m, MC_BACKOFF_MIN_MS);
		return -1;
	}
	if (error)
		snprintf(why, sizeof why, "FetchSnapshot answered %s (%d)", sluice_kafka_error_name(error), error);
	else if (!snapshot_page_fits(sl, &pg))
		snprintf(why, sizeof why, "a snapshot page that does not follow (end %lld size %lld position %lld, %d bytes)",
			 (long long)pg.end, (long long)pg.size, (long long)pg.position, pg.len);
	else if (snapshot_take(m, sl, &pg, why, sizeof why) == 0) {
		conn_ok(m, c);
		return 0;
	}
	conn_fail(m, c, why);
	return -1;
}

/* The loaded image replaces ours, and everything is published anew. */
static void snapshot_install(struct mc *m, struct snap_load *sl)
{
	sluice_image_set_offset(sl->img, sl->end - 1);
	struct sluice_image *old = m->img;
	m->img = sl->img;
	sl->img = NULL;
	sluice_image_free(old);
	m->need_snapshot = false;
	m->all_dirty = m->brokers_dirty = true;
	(void)snap_publish(m);
	pthread_mutex_lock(&m->lock);
	m->stats.snapshots_loaded++;
	m->stats.records_applied += sl->applied;
	pthread_mutex_unlock(&m->lock);
	SLOG_INFO("meta", "loaded the controller's metadata snapshot: %llu record(s), %lld bytes, up to offset %lld",
		  (unsigned long long)sl->applied, (long long)sl->size, (long long)sl->end - 1);
}

static void snapshot_load(struct mc *m, struct mc_conn *c)
{
	struct snap_load sl = {.img = sluice_image_new(), .end = -1, .size = -1};
	if (!sl.img) {
		SLOG_ERR("meta", "out of memory for a metadata image");
		(void)pause_ms(m, MC_BACKOFF_MAX_MS);
		return;
	}
	int rc;
	do
		rc = snapshot_page(m, c, &sl);
	while (rc == 0 && sl.pos < sl.size && !is_stopping(m));
	if (rc == 0 && sl.pos == sl.size)
		snapshot_install(m, &sl);
	if (sl.img)
		sluice_image_free(sl.img);
	free(sl.pend);
}

static void *fetch_main(void *arg)
{
	struct mc *m = arg;
	struct mc_conn c;
	conn_init(&c, "metadata");
	while (!is_stopping(m)) {
		if (m->need_snapshot)
			snapshot_load(m, &c);
		else
			fetch_once(m, &c);
	}
	conn_free(&c);
	return NULL;
}

/* ---- submitted batches: requests to the active controller (the admin thread) ----------- */

/* Waits until the published snapshot shows offset target (or the deadline). */
static bool wait_offset(struct mc *m, int64_t target, int64_t deadline)
{
	pthread_mutex_lock(&m->lock);
	while (m->applied_offset < target && !m->stopping && now_ms() < deadline)
		cond_wait_until(&m->changed, &m->lock, deadline);
	bool ok = m->applied_offset >= target;
	pthread_mutex_unlock(&m->lock);
	return ok;
}

/* For an answer without SluiceMetadataOffset: the high watermark seen by
 * a metadata fetch sent after the answer arrived, which includes the
 * change (the controller answers once it committed). -1: none in time. */
static int64_t hwm_after_now(struct mc *m, int64_t deadline)
{
	pthread_mutex_lock(&m->lock);
	uint64_t sent = m->fetch_sent;
	while (m->fetch_done <= sent && !m->stopping && now_ms() < deadline)
		cond_wait_until(&m->changed, &m->lock, deadline);
	int64_t hwm = m->fetch_done > sent ? m->fetch_hwm : 0;
	pthread_mutex_unlock(&m->lock);
	return hwm - 1;
}

/* A batch being run: how far the image must get before it completes. */
struct batch_run {
	struct mc *m;
	struct mc_conn *c;
	struct sluice_meta_batch *b;
	int64_t deadline;
	int64_t target;  /* the last metadata offset of its changes, -1: none */
	bool need_hwm;   /* a change was made and the answer did not say where */
};

static void change_fail(struct sluice_meta_change *c, int16_t error, const char *msg)
{
	c->error = error;
	snprintf(c->msg, sizeof c->msg, "%s", msg);
}

static bool has_name(const struct sluice_meta_change *c)
{
	return c->kind == SLUICE_META_CREATE_TOPIC || c->kind == SLUICE_META_DELETE_TOPIC ||
	       c->kind == SLUICE_META_CREATE_PARTITIONS || c->kind == SLUICE_META_SET_TOPIC_CONFIGS;
}

/* The most a change adds to its request: its name and configs, and with
 * a replica_node the assignment of each partition (12 bytes), with an
 * assignment its lists (MC_ASSIGNMENT_LIST_BYTES_MAX each, and 4 bytes a broker). */
static uint64_t change_bytes_max(const struct sluice_meta_change *c)
{
	uint64_t assignments = c->kind == SLUICE_META_CREATE_TOPIC && c->replica_node && c->partitions > 0
				       ? (uint64_t)c->partitions * 12
				       : 0;
	const struct sluice_assignment *a = c->assignment;
	if (a && a->n > 0)
		assignments = (uint64_t)a->n * MC_ASSIGNMENT_LIST_BYTES_MAX + (uint64_t)a->first[a->n] * 4;
	return MC_CHANGE_BYTES_MAX + assignments;
}

/* The end of the group of changes from i sent as one request: the same
 * kind, distinct names (Kafka refuses a request naming a topic twice),
 * within a frame. */
static uint32_t group_end(const struct sluice_meta_batch *b, uint32_t i)
{
	const struct sluice_meta_change *first = &b->changes[i];
	assert(has_name(first));
	uint64_t bytes = change_bytes_max(first);
	uint32_t j = i + 1;
	for (; j < b->change_n && j - i < MC_GROUP_CHANGES_MAX; j++) {
		const struct sluice_meta_change *c = &b->changes[j];
		bytes += change_bytes_max(c);
		if (c->kind != first->kind || bytes > MC_REQUEST_BYTES_MAX - 4096)
			break;
		bool dup = false;
		for (uint32_t k = i; k < j && !dup; k++)
			dup = b->changes[k].name_len == c->name_len && !memcmp(b->changes[k].name, c->name, c->name_len);
		if (dup)
			break;
	}
	assert(j > i && j - i <= MC_GROUP_CHANGES_MAX);
	return j;
}

static int32_t name_len32(const struct sluice_meta_change *c)
{
	return c->name_len > SLUICE_TOPIC_NAME_MAX + 1 ? SLUICE_TOPIC_NAME_MAX + 1 : (int32_t)c->name_len;
}

/* A manual assignment's lists as the request gave them (with_index:
 * CreateTopics' PartitionIndex; its own when given, else the list's
 * position), or a null array (CreatePartitions) when there is none. */
static void write_assignment(struct kwr *w, const struct sluice_assignment *a, bool with_index)
{
	if (!a || a->n <= 0) {
		kwr_array(w, true, with_index ? 0 : -1);
		return;
	}
	kwr_array(w, true, a->n);
	for (int32_t i = 0; i < a->n; i++) {
		if (with_index)
			kwr_i32(w, a->partition ? a->partition[i] : i);
		int32_t len = sluice_assignment_len(a, i);
		const int32_t *ids = sluice_assignment_list(a, i);
		kwr_array(w, true, len);
		for (int32_t k = 0; k < len; k++)
			kwr_i32(w, ids[k]);
		kwr_tags_empty(w);
	}
}

/* Assignments: every partition's one replica is node. */
static void write_assignments(struct kwr *w, int32_t partitions, int32_t node)
{
	kwr_array(w, true, partitions);
	for (int32_t p = 0; p < partitions; p++) {
		kwr_i32(w, p);
		kwr_array(w, true, 1);
		kwr_i32(w, node);
		kwr_tags_empty(w);
	}
}

static void encode_create(struct kwr *w, const struct sluice_meta_batch *b, uint32_t i, uint32_t j)
{
	kwr_array(w, true, (int32_t)(j - i));
	for (uint32_t k = i; k < j; k++) {
		const struct sluice_meta_change *c = &b->changes[k];
		kwr_string(w, true, c->name, name_len32(c));
		if (c->replica_node && c->partitions > 0) { /* placed by the submitter: Kafka wants -1, -1 then */
			kwr_i32(w, -1);
			kwr_i16(w, -1);
			write_assignments(w, c->partitions, *c->replica_node);
		} else if (c->assignment && c->assignment->n > 0) { /* the client's, as it sent them */
			kwr_i32(w, c->partitions);
			int32_t rf = c->replication_factor;
			kwr_i16(w, (int16_t)(rf > INT16_MAX ? INT16_MAX : rf < INT16_MIN ? INT16_MIN : rf));
			write_assignment(w, c->assignment, true);
		} else {
			kwr_i32(w, c->partitions);
			int32_t rf = c->replication_factor;
			kwr_i16(w, (int16_t)(rf > INT16_MAX ? INT16_MAX : rf < INT16_MIN ? INT16_MIN : rf));
			kwr_array(w, true, 0); /* Assignments */
		}
		int32_t n = c->config_n > 0 && c->configs ? c->config_n : 0;
		kwr_array(w, true, n);
		for (int32_t x = 0; x < n; x++) {
			kwr_cstr(w, true, c->configs[x].key);
			kwr_cstr(w, true, c->configs[x].value);
			kwr_tags_empty(w);
		}
		if (c->id) { /* SluiceTopicId: the id the topic had before (adoption) */
			kwr_uvarint(w, 1);
			kwr_uvarint(w, MC_TAG_SLUICE);
			kwr_uvarint(w, 16);
			kwr_uuid(w, c->id);
		} else
			kwr_tags_empty(w);
	}
	kwr_i32(w, MC_REQUEST_TIMEOUT_MS);
	kwr_bool(w, b->validate_only);
	kwr_tags_empty(w);
}

static void encode_delete(struct kwr *w, const struct sluice_meta_batch *b, uint32_t i, uint32_t j)
{
	kwr_array(w, true, (int32_t)(j - i));
	for (uint32_t k = i; k < j; k++)
		kwr_string(w, true, b->changes[k].name, name_len32(&b->changes[k]));
	kwr_i32(w, MC_REQUEST_TIMEOUT_MS);
	kwr_tags_empty(w);
}

static void encode_partitions(struct kwr *w, const struct sluice_meta_batch *b, uint32_t i, uint32_t j)
{
	kwr_array(w, true, (int32_t)(j - i));
	for (uint32_t k = i; k < j; k++) {
		kwr_string(w, true, b->changes[k].name, name_len32(&b->changes[k]));
		kwr_i32(w, b->changes[k].partitions);
		write_assignment(w, b->changes[k].assignment, false); /* null: the controller places them */
		kwr_tags_empty(w);
	}
	kwr_i32(w, MC_REQUEST_TIMEOUT_MS);
	kwr_bool(w, b->validate_only);
	kwr_tags_empty(w);
}

static const char *config_value(const struct sluice_topic_config *v, int32_t n, const char *key)
{
	for (int32_t i = 0; i < n; i++)
		if (!strcmp(v[i].key, key))
			return v[i].value;
	return NULL;
}

/* The IncrementalAlterConfigs operations that turn topic t's overrides
 * (as a snapshot shows it; NULL: none known) into c's: a SET of each new or
 * changed one, a DELETE of each one not kept. Written to w unless NULL;
 * returns how many. */
static int32_t config_ops(struct kwr *w, const struct sluice_meta_change *c, const struct sluice_topic *t)
{
	int32_t n = c->config_n > 0 && c->configs ? c->config_n : 0, ops = 0;
	for (int32_t x = 0; x < n; x++) {
		const char *cur = t ? config_value(t->configs, t->config_n, c->configs[x].key) : NULL;
		if (cur && !strcmp(cur, c->configs[x].value))
			continue;
		ops++;
		if (w) {
			kwr_cstr(w, true, c->configs[x].key);
			kwr_i8(w, 0); /* SET */
			kwr_cstr(w, true, c->configs[x].value);
			kwr_tags_empty(w);
		}
	}
	for (int32_t x = 0; t && x < t->config_n; x++) {
		if (config_value(c->configs, n, t->configs[x].key))
			continue;
		ops++;
		if (w) {
			kwr_cstr(w, true, t->configs[x].key);
			kwr_i8(w, 1); /* DELETE */
			kwr_cstr(w, true, NULL);
			kwr_tags_empty(w);
		}
	}
	assert(ops <= n + (t ? t->config_n : 0));
	return ops;
}

/* SET_TOPIC_CONFIGS replaces the overrides: IncrementalAlterConfigs with
 * the difference from the topic the snapshot s shows. */
static void encode_configs(struct kwr *w, const struct sluice_meta_batch *b, uint32_t i, uint32_t j,
			   const struct sluice_meta_snapshot *s)
{
	kwr_array(w, true, (int32_t)(j - i));
	for (uint32_t k = i; k < j; k++) {
		const struct sluice_meta_change *c = &b->changes[k];
		const struct sluice_topic *t = sluice_meta_find(s, c->name, c->name_len);
		kwr_i8(w, SLUICE_MREC_RESOURCE_TOPIC);
		kwr_string(w, true, c->name, name_len32(c));
		kwr_array(w, true, config_ops(NULL, c, t));
		(void)config_ops(w, c, t);
		kwr_tags_empty(w);
	}
	kwr_bool(w, b->validate_only);
	kwr_tags_empty(w);
}

/* An answer's entry for topic `name`: the change of the group [i, j)
 * naming it (searched from *hint on, where the controller's answers
 * usually are), or NULL. */
static struct sluice_meta_change *group_find(struct sluice_meta_batch *b, uint32_t i, uint32_t j, uint32_t *hint,
					     struct kstr name)
{
	assert(i < j && *hint >= i && *hint < j);
	for (uint32_t n = 0; n < j - i && name.ptr; n++) {
		uint32_t k = i + (*hint - i + n) % (j - i);
		struct sluice_meta_change *c = &b->changes[k];
		if (name.len == name_len32(c) && !memcmp(name.ptr, c->name, (size_t)name.len)) {
			*hint = k + 1 < j ? k + 1 : i;
			return c;
		}
	}
	return NULL;
}

static void answer_entry(struct sluice_meta_change *c, int16_t error, struct kstr msg, bool *not_controller)
{
	if (!c)
		return;
	c->error = error;
	snprintf(c->msg, sizeof c->msg, "%.*s", msg.ptr ? (int)msg.len : 0, msg.ptr ? msg.ptr : "");
	*not_controller |= error == KERR_NOT_CONTROLLER;
}

/* One CreatableTopicResult (v7). */
static void parse_create_entry(struct krd *r, struct sluice_meta_batch *b, uint32_t i, uint32_t j, uint32_t *hint,
			       bool *not_controller)
{
	struct kstr name = krd_string(r, true);
	uint8_t id[16];
	krd_uuid(r, id);
	int16_t error = krd_i16(r);
	struct kstr msg = krd_string(r, true);
	int32_t partitions = krd_i32(r);
	(void)krd_i16(r); /* ReplicationFactor */
	int32_t configs = krd_array(r, true, 6);
	for (int32_t x = 0; x < configs && !r->err; x++) {
		(void)krd_string(r, true);
		(void)krd_string(r, true);
		krd_skip(r, 3); /* ReadOnly, ConfigSource, IsSensitive */
		krd_tags_skip(r);
	}
	krd_tags_skip(r);
	struct sluice_meta_change *c = r->err ? NULL : group_find(b, i, j, hint, name);
	answer_entry(c, error, msg, not_controller);
	if (c && !error) {
		memcpy(c->topic_id, id, 16);
		c->topic_partitions = partitions;
	}
}

/* The answer to the group [i, j): each change's error and message, and
 * where the change ended in the metadata log (-1: not said). */
struct group_answer {
	bool not_controller;
	int64_t offset;
};

static int parse_group(struct krd *r, struct sluice_meta_batch *b, uint32_t i, uint32_t j, struct group_answer *ga)
{
	enum sluice_meta_change_kind kind = b->changes[i].kind;
	static const size_t entry_min[] = {
		[SLUICE_META_CREATE_TOPIC] = 28, [SLUICE_META_DELETE_TOPIC] = 5,
		[SLUICE_META_CREATE_PARTITIONS] = 5, [SLUICE_META_SET_TOPIC_CONFIGS] = 6,
	};
	assert(has_name(&b->changes[i]));
	(void)krd_i32(r); /* ThrottleTimeMs */
	int32_t n = krd_array(r, true, entry_min[kind]);
	uint32_t hint = i;
	for (int32_t e = 0; e < n && !r->err; e++) {
		if (kind == SLUICE_META_CREATE_TOPIC) {
			parse_create_entry(r, b, i, j, &hint, &ga->not_controller);
			continue;
		}
		struct kstr name = {0}, msg;
		int16_t error;
		if (kind == SLUICE_META_SET_TOPIC_CONFIGS) {
			error = krd_i16(r);
			msg = krd_string(r, true);
			int8_t type = krd_i8(r);
			name = krd_string(r, true);
			if (type != SLUICE_MREC_RESOURCE_TOPIC)
				name.ptr = NULL;
		} else {
			name = krd_string(r, true);
			error = krd_i16(r);
			msg = krd_string(r, true);
		}
		krd_tags_skip(r);
		answer_entry(r->err ? NULL : group_find(b, i, j, &hint, name), error, msg, &ga->not_controller);
	}
	ga->offset = tags_metadata_offset(r);
	return r->err || krd_left(r) ? -1 : 0;
}

/* Encodes the group [i, j) as its request; returns the api key, and the version in *version. */
static int16_t group_encode(struct kwr *w, const struct sluice_meta_batch *b, uint32_t i, uint32_t j,
			    const struct sluice_meta_snapshot *s, int16_t *version)
{
	switch (b->changes[i].kind) {
	case SLUICE_META_CREATE_TOPIC:
		encode_create(w, b, i, j);
		*version = 7;
		return API_CREATE_TOPICS;
	case SLUICE_META_DELETE_TOPIC:
		encode_delete(w, b, i, j);
		*version = 5;
		return API_DELETE_TOPICS;
	case SLUICE_META_CREATE_PARTITIONS:
		encode_partitions(w, b, i, j);
		*version = 3;
		return API_CREATE_PARTITIONS;
	default:
		assert(b->changes[i].kind == SLUICE_META_SET_TOPIC_CONFIGS && s);
		encode_configs(w, b, i, j, s);
		*version = 1;
		return API_INCREMENTAL_ALTER_CONFIGS;
	}
}

/* A deletion reports the topic it deletes, as the snapshot s shows it; a
 * validate-only one is answered from it. */
static void delete_outputs(const struct batch_run *br, uint32_t i, uint32_t j, const struct sluice_meta_snapshot *s)
{
	for (uint32_t k = i; k < j; k++) {
		struct sluice_meta_change *c = &br->b->changes[k];
		const struct sluice_topic *t = sluice_meta_find(s, c->name, c->name_len);
		if (t) {
			memcpy(c->topic_id, t->id, 16);
			c->topic_partitions = t->partitions;
			topic_copy_out(c->topic_out, t);
		} else if (br->b->validate_only)
			change_fail(c, KERR_UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.");
	}
}

/* Sends the group and sets its changes' results; on NOT_CONTROLLER or no
 * connection, again to the next voter until the batch's deadline. */
static const char *group_send(struct batch_run *br, uint32_t i, uint32_t j, const struct kwr *w, int16_t key,
			      int16_t version)
{
	struct mc *m = br->m;
	for (;;) {
		if (is_stopping(m))
			return "the broker is shutting down";
		int64_t now = now_ms();
		if (now >= br->deadline)
			return "no active controller answered in time";
		struct krd r;
		int64_t deadline = now + MC_REQUEST_TIMEOUT_MS < br->deadline ? now + MC_REQUEST_TIMEOUT_MS : br->deadline;
		enum call_result cr = conn_call(m, br->c, key, version, w, deadline, &r);
		if (cr == CALL_UNSENT)
			continue;
		if (cr == CALL_STOPPED)
			return "the broker is shutting down";
		if (cr == CALL_REFUSED)
			return "the request is too large for the controller";
		if (cr == CALL_LOST)
			return "the connection to the controller was lost before it answered; the change may have been made";
		struct group_answer ga = {.offset = -1};
		for (uint32_t k = i; k < j; k++)
			change_fail(&br->b->changes[k], KERR_UNKNOWN_SERVER_ERROR, "the controller's answer does not name this topic");
		if (parse_group(&r, br->b, i, j, &ga) < 0) {
			conn_garbage(m, br->c, key, &r);
			return "the controller's answer does not decode; the change may have been made";
		}
		if (ga.not_controller) {
			conn_not_controller(m, br->c);
			continue;
		}
		conn_ok(m, br->c);
		bool made = false;
		for (uint32_t k = i; k < j; k++)
			made |= br->b->changes[k].error == 0;
		if (made && !br->b->validate_only && ga.offset >= 0)
			br->target = ga.offset > br->target ? ga.offset : br->target;
		else if (made && !br->b->validate_only)
			br->need_hwm = true;
		return NULL;
	}
}

static void group_run(struct batch_run *br, uint32_t i, uint32_t j)
{
	struct mc *m = br->m;
	enum sluice_meta_change_kind kind = br->b->changes[i].kind;
	struct sluice_meta_snapshot *s = NULL;
	if (kind == SLUICE_META_DELETE_TOPIC || kind == SLUICE_META_SET_TOPIC_CONFIGS) {
		/* the topics as this batch's earlier changes left them */
		if (br->target >= 0)
			(void)wait_offset(m, br->target, br->deadline);
		s = mc_acquire(m);
	}
	if (kind == SLUICE_META_DELETE_TOPIC)
		delete_outputs(br, i, j, s);
	if (kind == SLUICE_META_DELETE_TOPIC && br->b->validate_only) { /* DeleteTopics has no validate-only */
		mc_release(m, s);
		return;
	}
	struct kwr w;
	kwr_init(&w, 1024, MC_REQUEST_BYTES_MAX);
	int16_t version = 0, key = group_encode(&w, br->b, i, j, s, &version);
	const char *fail = group_send(br, i, j, &w, key, version);
	for (uint32_t k = i; fail && k < j; k++)
		change_fail(&br->b->changes[k], KERR_REQUEST_TIMED_OUT, fail);
	kwr_free(&w);
	if (s)
		mc_release(m, s);
}

/* This broker's epoch once registered (-1: not by the deadline). */
static int64_t wait_registered(struct mc *m, int64_t deadline)
{
	pthread_mutex_lock(&m->lock);
	while (m->broker_epoch < 0 && !m->stopping && now_ms() < deadline)
		cond_wait_until(&m->changed, &m->lock, deadline);
	int64_t epoch = m->broker_epoch;
	pthread_mutex_unlock(&m->lock);
	return epoch;
}

/* AllocateProducerIds v0 once; 1 a block was taken, 0 try again, -1 failed with c's error set. */
static int pid_request(struct batch_run *br, struct sluice_meta_change *c, int64_t epoch)
{
	struct mc *m = br->m;
	struct kwr w;
	kwr_init(&w, 64, MC_REQUEST_BYTES_MAX);
	kwr_i32(&w, m->cfg.node_id);
	kwr_i64(&w, epoch);
	kwr_tags_empty(&w);
	struct krd r;
	enum call_result cr = conn_call(m, br->c, API_ALLOCATE_PRODUCER_IDS, 0, &w, now_ms() + MC_REQUEST_TIMEOUT_MS, &r);
	kwr_free(&w);
	if (cr == CALL_UNSENT)
		return 0;
	if (cr != CALL_OK) {
		change_fail(c, KERR_REQUEST_TIMED_OUT, "no answer from the controller to AllocateProducerIds");
		return -1;
	}
	(void)krd_i32(&r);
	int16_t error = krd_i16(&r);
	int64_t start = krd_i64(&r);
	int32_t len = krd_i32(&r);
	krd_tags_skip(&r);
	if (r.err || krd_left(&r) || (!error && (start < 0 || len <= 0 || start > INT64_MAX - len))) {
		conn_garbage(m, br->c, API_ALLOCATE_PRODUCER_IDS, &r);
		return 0;
	}
	if (error == KERR_NOT_CONTROLLER) {
		conn_not_controller(m, br->c);
		return 0;
	}
	conn_ok(m, br->c);
	if (error == KERR_STALE_BROKER_EPOCH || error == KERR_BROKER_ID_NOT_REGISTERED)
		return pause_ms(m, MC_BACKOFF_MIN_MS) ? 0 : -1; /* the heartbeat thread registers again */
	if (error) {
		c->error = error;
		snprintf(c->msg, sizeof c->msg, "AllocateProducerIds answered %s", sluice_kafka_error_name(error));
		return -1;
	}
	m->pid_next = start;
	m->pid_end = start + len;
	return 1;
}

/* A producer id from the block the controller handed this broker; a new
 * block once it is used up. */
static void pid_change(struct batch_run *br, struct sluice_meta_change *c)
{
	struct mc *m = br->m;
	if (br->b->validate_only)
		return;
	while (m->pid_next >= m->pid_end) {
		int rc = 0;
		if (is_stopping(m) || now_ms() >= br->deadline)
			change_fail(c, KERR_REQUEST_TIMED_OUT, "no producer id block from the controller in time");
		else {
			int64_t epoch = wait_registered(m, br->deadline);
			rc = epoch < 0 ? 0 : pid_request(br, c, epoch);
		}
		if (c->error || rc < 0) {
			if (!c->error)
				change_fail(c, KERR_REQUEST_TIMED_OUT, "the broker is shutting down");
			return;
		}
	}
	assert(m->pid_next >= 0 && m->pid_next < m->pid_end);
	c->producer_id = m->pid_next++;
}

/* A change's outputs: the topic t as the snapshot that shows the change
 * has it (validate-only: as it would be). */
static void change_outputs(struct sluice_meta_change *c, const struct sluice_topic *t, bool validate_only)
{
	if (validate_only && c->kind == SLUICE_META_CREATE_TOPIC) { /* NumPartitions of the answer is set */
		if (c->topic_out && c->name_len <= SLUICE_TOPIC_NAME_MAX) {
			memset(c->topic_out, 0, sizeof *c->topic_out);
			memcpy(c->topic_out->name, c->name, c->name_len);
			c->topic_out->partitions = c->topic_partitions;
		}
		return;
	}
	if (!t)
		return;
	memcpy(c->topic_id, t->id, 16);
	c->topic_partitions = t->partitions;
	topic_copy_out(c->topic_out, t);
	if (validate_only && c->kind == SLUICE_META_CREATE_PARTITIONS) {
		c->topic_partitions = c->partitions;
		if (c->topic_out)
			c->topic_out->partitions = c->partitions;
	}
}

/* Waits until the image shows every change the batch made, then fills
 * each change's outputs from the snapshot that shows them. */
static void batch_finish(struct batch_run *br)
{
	struct mc *m = br->m;
	struct sluice_meta_batch *b = br->b;
	int64_t deadline = now_ms() + MC_CATCHUP_TIMEOUT_MS;
	bool caught = true;
	if (br->need_hwm) {
		int64_t hwm = hwm_after_now(m, deadline);
		caught = hwm >= 0;
		br->target = hwm > br->target ? hwm : br->target;
	}
	if (br->target >= 0)
		caught = wait_offset(m, br->target, deadline) && caught;
	struct sluice_meta_snapshot *s = mc_acquire(m);
	for (uint32_t k = 0; k < b->change_n; k++) {
		struct sluice_meta_change *c = &b->changes[k];
		if (!has_name(c) || c->error)
			continue;
		if (!caught && !b->validate_only) {
			snprintf(c->msg, sizeof c->msg, "the controller made the change, but this broker's metadata did not "
				 "show it within %d ms", MC_CATCHUP_TIMEOUT_MS);
			c->error = KERR_REQUEST_TIMED_OUT;
			continue;
		}
		if (c->kind == SLUICE_META_DELETE_TOPIC) /* set from the snapshot before it */
			continue;
		change_outputs(c, sluice_meta_find(s, c->name, c->name_len), b->validate_only);
	}
	b->version = s->version;
	mc_release(m, s);
}

static void batch_run(struct mc *m, struct mc_conn *c, struct sluice_meta_batch *b)
{
	struct batch_run br = {.m = m, .c = c, .b = b, .deadline = now_ms() + MC_BATCH_TIMEOUT_MS, .target = -1};
	for (uint32_t k = 0; k < b->change_n; k++) {
		struct sluice_meta_change *ch = &b->changes[k];
		ch->error = 0;
		ch->msg[0] = '\0';
		ch->producer_id = -1;
		memset(ch->topic_id, 0, sizeof ch->topic_id);
		ch->topic_partitions = 0;
	}
	for (uint32_t i = 0; i < b->change_n;) {
		struct sluice_meta_change *ch = &b->changes[i];
		if (ch->kind == SLUICE_META_FORGET_DELETED) { /* the controller keeps no tombstones for brokers */
			i++;
		} else if (ch->kind == SLUICE_META_ALLOCATE_PRODUCER_ID) {
			pid_change(&br, ch);
			i++;
		} else if (!has_name(ch)) {
			snprintf(ch->msg, sizeof ch->msg, "unknown metadata change kind %d", (int)ch->kind);
			ch->error = KERR_INVALID_REQUEST;
			i++;
		} else {
			uint32_t j = group_end(b, i);
			group_run(&br, i, j);
			i = j;
		}
	}
	batch_finish(&br);
}

/* ---- forward(): a request relayed to the active controller ------------------------- */

/* An answer to AlterConfigs or IncrementalAlterConfigs (their responses
 * share one layout): whether a resource was refused with NOT_CONTROLLER
 * (the whole request goes to the next voter: a resource decided before
 * the leadership moved is decided again to the same result, as SET,
 * DELETE, APPEND of a present item and SUBTRACT of an absent one change
 * nothing the second time), and the SluiceMetadataOffset of a flexible
 * one (-1: absent). -1: garbage. */
static int alter_answer_scan(struct krd r, bool flex, bool *not_controller, int64_t *offset)
{
	*not_controller = false;
	*offset = -1;
	(void)krd_i32(&r); /* ThrottleTimeMs */
	int32_t n = krd_array(&r, flex, flex ? 6 : 7);
	for (int32_t i = 0; i < n && !r.err; i++) {
		*not_controller |= krd_i16(&r) == KERR_NOT_CONTROLLER;
		(void)krd_string(&r, flex); /* ErrorMessage */
		(void)krd_i8(&r);           /* ResourceType */
		(void)krd_string(&r, flex); /* ResourceName */
		if (flex)
			krd_tags_skip(&r);
	}
	if (flex)
		*offset = tags_metadata_offset(&r);
	return r.err || krd_left(&r) ? -1 : 0;
}

/* A relayed config change is answered once this broker's image shows it,
 * as a submitted batch is: the next request the client sends here sees
 * the new values. A NOT_CONTROLLER answer is retried on the next voter.
 * Returns false when the answer must not be relayed (the call is retried). */
static bool forward_write_settle(struct mc *m, struct mc_conn *c, const struct mc_forward *f, const struct krd *r,
				 int64_t deadline, bool *garbage)
{
	bool not_controller;
	int64_t offset;
	*garbage = false;
	if (alter_answer_scan(*r, api_flexible(f->api_key, f->api_version), &not_controller, &offset) < 0) {
		conn_garbage(m, c, f->api_key, r);
		*garbage = true;
		return false;
	}
	if (not_controller) {
		conn_not_controller(m, c);
		return false;
	}
	conn_ok(m, c);
	if (offset < 0)
		offset = hwm_after_now(m, deadline);
	if (offset >= 0 && !wait_offset(m, offset, deadline))
		SLOG_WARN("meta", "relayed config change: the image did not reach offset %lld in time; answering anyway",
			  (long long)offset);
	return true;
}

/* The top-level ErrorCode of an answer to the reassignment APIs (after
 * ThrottleTimeMs, and AllowReplicationFactorChange in AlterPartitionReassignments
 * v1), or KERR_UNKNOWN_SERVER_ERROR when it is too short. */
static int16_t reassign_top_error(const struct mc_forward *f, const struct krd *r)
{
	size_t at = f->api_key == API_ALTER_PARTITION_REASSIGNMENTS && f->api_version >= 1 ? 5 : 4;
	return krd_left(r) >= at + 2 ? (int16_t)kbe16(r->p + at) : KERR_UNKNOWN_SERVER_ERROR;
}

/* An answer to AlterPartitionReassignments (flexible in every version): the
 * SluiceMetadataOffset of its last record (-1: absent). -1: garbage. */
static int reassign_answer_scan(const struct mc_forward *f, struct krd r, int64_t *offset)
{
	*offset = -1;
	(void)krd_i32(&r); /* ThrottleTimeMs */
	if (f->api_version >= 1)
		(void)krd_bool(&r);
	(void)krd_i16(&r);
	(void)krd_string(&r, true);
	int32_t topics = krd_array(&r, true, 3);
	for (int32_t t = 0; t < topics && !r.err; t++) {
		(void)krd_string(&r, true);
		int32_t n = krd_array(&r, true, 8);
		for (int32_t p = 0; p < n && !r.err; p++) {
			(void)krd_i32(&r);
			(void)krd_i16(&r);
			(void)krd_string(&r, true);
			krd_tags_skip(&r);
		}
		krd_tags_skip(&r);
	}
	*offset = tags_metadata_offset(&r);
	return r.err || krd_left(&r) ? -1 : 0;
}

/* A relayed reassignment is answered once this broker's image shows it
 * (the client's next Metadata or ListPartitionReassignments here sees
 * it). Returns false when the answer must not be relayed (retried). */
static bool forward_reassign_settle(struct mc *m, struct mc_conn *c, const struct mc_forward *f,
				    const struct krd *r, int64_t deadline, bool *garbage)
{
	int64_t offset;
	*garbage = false;
	if (reassign_top_error(f, r) == KERR_NOT_CONTROLLER) {
		conn_not_controller(m, c);
		return false;
	}
	if (f->api_key == API_LIST_PARTITION_REASSIGNMENTS) {
		conn_ok(m, c);
		return true;
	}
	if (reassign_answer_scan(f, *r, &offset) < 0) {
		conn_garbage(m, c, f->api_key, r);
		*garbage = true;
		return false;
	}
	conn_ok(m, c);
	if (offset >= 0 && !wait_offset(m, offset, deadline))
		SLOG_WARN("meta", "relayed reassignment: the image did not reach offset %lld in time; answering anyway",
			  (long long)offset);
	return true;
}

static void forward_run(struct mc *m, struct mc_conn *c, struct mc_forward *f)
{
	struct kwr body = {.buf = f->body, .len = f->len, .cap = f->len, .cap_max = f->len};
	int64_t deadline = now_ms() + MC_REQUEST_TIMEOUT_MS;
	bool write = f->api_key == API_ALTER_CONFIGS || f->api_key == API_INCREMENTAL_ALTER_CONFIGS;
	bool reassign = f->api_key == API_ALTER_PARTITION_REASSIGNMENTS || f->api_key == API_LIST_PARTITION_REASSIGNMENTS;
	while (!is_stopping(m) && now_ms() < deadline) {
		struct krd r;
		enum call_result cr = conn_call(m, c, f->api_key, f->api_version, &body, deadline, &r);
		if (cr == CALL_UNSENT)
			continue;
		if (cr != CALL_OK)
			break;
		bool garbage = false;
		if (f->api_key == API_ALTER_PARTITION && krd_left(&r) >= 6 && (int16_t)kbe16(r.p + 4) == KERR_NOT_CONTROLLER) {
			conn_not_controller(m, c); /* ThrottleTimeMs, then the top-level ErrorCode */
			continue;
		}
		if (write && !forward_write_settle(m, c, f, &r, deadline, &garbage)) {
			if (garbage)
				break;
			continue;
		}
		if (reassign && !forward_reassign_settle(m, c, f, &r, deadline, &garbage)) {
			if (garbage)
				break;
			continue;
		}
		if (!write && !reassign)
			conn_ok(m, c);
		f->done(f->arg, 0, r.p, krd_left(&r));
		return;
	}
	f->done(f->arg, KERR_REQUEST_TIMED_OUT, NULL, 0);
}

static int mc_forward(void *self, int16_t api_key, int16_t api_version, const uint8_t *body, size_t len,
		      void (*done)(void *arg, int16_t error, const uint8_t *resp, size_t resp_len), void *arg)
{
	struct mc *m = self;
	assert(done && (body || len == 0));
	if (api_key < 0 || api_key >= API_KEY_MAX || api_version < 0 || len > SLUICE_META_FORWARD_BYTES_MAX)
		return -1;
	struct mc_forward *f = calloc(1, sizeof *f);
	uint8_t *copy = malloc(len ? len : 1);
	if (!f || !copy) {
		free(f);
		free(copy);
		return -1;
	}
	if (len)
		memcpy(copy, body, len);
	*f = (struct mc_forward){.api_key = api_key, .api_version = api_version, .body = copy, .len = len, .done = done,
				 .arg = arg};
	pthread_mutex_lock(&m->q_lock);
	bool full = m->q_stopping || m->f_n >= MC_FORWARDS_MAX;
	if (!full) {
		if (m->f_tail)
			m->f_tail->next = f;
		else
			m->f_head = f;
		m->f_tail = f;
		m->f_n++;
		pthread_cond_signal(&m->q_cond);
	}
	pthread_mutex_unlock(&m->q_lock);
	if (full) {
		free(copy);
		free(f);
		return -1;
	}
	return 0;
}

/* ---- alter_partition(): a leader's ISR changes, batched -------------------------------- */

/* As Kafka's AlterPartitionManager: the ISR changes submitted wait in one
 * queue (isr_q) and the admin thread sends every one waiting, up to
 * SLUICE_META_CONTROLLER_ALTER_PARTITIONS_MAX, as one AlterPartition v2;
 * the changes that come while it is out go together in the next. Each
 * change's done gets its own partition's answer; an error of the whole
 * request (no controller answered in time, a top-level error, an answer
 * that does not parse) is given to every change it carried. */
struct mc_isr_batch {
	uint32_t n;
	struct sluice_meta_isr_change *v[SLUICE_META_CONTROLLER_ALTER_PARTITIONS_MAX];
};

static bool isr_same_topic(const struct sluice_meta_isr_change *a, const struct sluice_meta_isr_change *b)
{
	return memcmp(a->topic_id, b->topic_id, 16) == 0;
}

static bool isr_same_partition(const struct sluice_meta_isr_change *a, const struct sluice_meta_isr_change *b)
{
	return a->partition == b->partition && isr_same_topic(a, b);
}

/* Moves the waiting changes into b (q_lock held), oldest first. A
 * partition appears once in a request (the controller refuses a
 * duplicate): a second change of one already taken stays, with those
 * after it, for the next request. */
static void isr_take(struct mc *m, struct mc_isr_batch *b)
{
	b->n = 0;
	while (m->isr_n > 0 && b->n < SLUICE_META_CONTROLLER_ALTER_PARTITIONS_MAX) {
		struct sluice_meta_isr_change *c = m->isr_q[m->isr_head];
		for (uint32_t i = 0; i < b->n; i++)
			if (isr_same_partition(b->v[i], c))
				return;
		b->v[b->n++] = c;
		m->isr_head = (m->isr_head + 1) % MC_ISR_QUEUED_MAX;
		m->isr_n--;
	}
	assert(b->n > 0 || m->isr_n == 0);
}

/* Orders v so that the changes of a topic are adjacent (one entry of
 * Topics each), topics in the order they first appear. */
static void isr_group(struct sluice_meta_isr_change **v, uint32_t n)
{
	for (uint32_t i = 1; i < n; i++) {
		if (isr_same_topic(v[i], v[i - 1]))
			continue;
		for (uint32_t j = i + 1; j < n; j++) {
			if (!isr_same_topic(v[j], v[i - 1]))
				continue;
			struct sluice_meta_isr_change *c = v[j];
			memmove(&v[i + 1], &v[i], (j - i) * sizeof v[0]);
			v[i] = c;
			break;
		}
	}
}

/* The AlterPartition v2 body for v[0..n), grouped (isr_group). */
static void isr_encode(struct kwr *w, int32_t node_id, int64_t broker_epoch, struct sluice_meta_isr_change *const *v,
		       uint32_t n)
{
	int32_t topics = 0;
	for (uint32_t i = 0; i < n; i++)
		topics += i == 0 || !isr_same_topic(v[i], v[i - 1]);
	kwr_i32(w, node_id);     /* BrokerId */
	kwr_i64(w, broker_epoch); /* BrokerEpoch */
	kwr_array(w, true, topics);
	for (uint32_t i = 0; i < n;) {
		uint32_t j = i + 1;
		while (j < n && isr_same_topic(v[j], v[i]))
			j++;
		kwr_uuid(w, v[i]->topic_id);
		kwr_array(w, true, (int32_t)(j - i));
		for (uint32_t k = i; k < j; k++) {
			const struct sluice_meta_isr_change *c = v[k];
			assert(c->isr_n >= 0 && c->isr_n <= SLUICE_REPLICAS_MAX);
			kwr_i32(w, c->partition);
			kwr_i32(w, c->leader_epoch);
			kwr_array(w, true, c->isr_n); /* NewIsr (v2) */
			for (int32_t r = 0; r < c->isr_n; r++)
				kwr_i32(w, c->isr[r]);
			kwr_i8(w, 0); /* LeaderRecoveryState: RECOVERED */
			kwr_i32(w, c->partition_epoch);
			kwr_tags_empty(w);
		}
		kwr_tags_empty(w);
		i = j;
	}
	kwr_tags_empty(w);
}

/* One partition of the answer into *st; its PartitionIndex and ErrorCode
 * through *index and *error. Returns false when its ISR is larger than
 * any replica set (the entry is read past, and refused by the caller). */
static bool isr_parse_partition(struct krd *r, int32_t *index, int16_t *error, struct sluice_partition_state *st)
{
	*st = (struct sluice_partition_state){0};
	*index = krd_i32(r);
	*error = krd_i16(r);
	st->leader = krd_i32(r);
	st->leader_epoch = krd_i32(r);
	int32_t n = krd_array(r, true, 4);
	for (int32_t i = 0; i < n && !r->err; i++) {
		int32_t id = krd_i32(r);
		if (st->isr_n < SLUICE_REPLICAS_MAX)
			st->isr[st->isr_n++] = id;
	}
	(void)krd_i8(r); /* LeaderRecoveryState */
	st->partition_epoch = krd_i32(r);
	krd_tags_skip(r);
	return n <= SLUICE_REPLICAS_MAX;
}

/* The answer to b's request: each change's error and result. A change the
 * answer does not name gets UNKNOWN_SERVER_ERROR (a broken controller),
 * as does every change when the answer does not parse or names more
 * partitions than were asked; a top-level error is every change's. */
static void isr_parse(const uint8_t *resp, size_t len, struct mc_isr_batch *b)
{
	for (uint32_t k = 0; k < b->n; k++)
		b->v[k]->error = KERR_UNKNOWN_SERVER_ERROR;
	struct krd r;
	krd_init(&r, resp, len);
	(void)krd_i32(&r); /* ThrottleTimeMs */
	int16_t top = krd_i16(&r);
	int32_t topics = krd_array(&r, true, 18);
	uint32_t seen = 0;
	for (int32_t t = 0; t < topics && !r.err; t++) {
		uint8_t id[16];
		krd_uuid(&r, id);
		int32_t parts = krd_array(&r, true, 16);
		for (int32_t p = 0; p < parts && !r.err; p++) {
			struct sluice_partition_state st;
			int32_t index;
			int16_t error;
			bool fits = isr_parse_partition(&r, &index, &error, &st);
			if (!r.err && ++seen > b->n)
				krd_fail(&r, "more partitions than the request named");
			for (uint32_t k = 0; k < b->n && !r.err; k++) {
				struct sluice_meta_isr_change *c = b->v[k];
				if (c->partition != index || memcmp(c->topic_id, id, 16) != 0)
					continue;
				c->error = fits ? error : KERR_UNKNOWN_SERVER_ERROR;
				c->result = st;
			}
		}
		krd_tags_skip(&r);
	}
	krd_tags_skip(&r);
	if (!r.err && krd_left(&r))
		krd_fail(&r, "bytes after the response");
	if (r.err)
		SLOG_WARN("meta", "AlterPartition v2 answer (api %d) does not parse at offset %zu of %zu: %s; "
			  "failing its %u ISR changes", API_ALTER_PARTITION, krd_offset(&r), len,
			  r.err_what ? r.err_what : "short", b->n);
	for (uint32_t k = 0; k < b->n && (r.err || top); k++)
		b->v[k]->error = r.err ? KERR_UNKNOWN_SERVER_ERROR : top;
}

/* forward_run's completion: every change of b answered, then done. */
static void isr_batch_done(void *arg, int16_t error, const uint8_t *resp, size_t len)
{
	struct mc_isr_batch *b = arg;
	if (error)
		for (uint32_t k = 0; k < b->n; k++)
			b->v[k]->error = error;
	else
		isr_parse(resp, len, b);
	for (uint32_t k = 0; k < b->n; k++) {
		struct sluice_meta_isr_change *c = b->v[k];
		b->v[k] = NULL;
		c->done(c); /* may free c */
	}
}

/* On the admin thread: the changes of b as one AlterPartition, answered. */
static void isr_batch_run(struct mc *m, struct mc_conn *conn, struct mc_isr_batch *b)
{
	assert(b->n > 0 && b->n <= SLUICE_META_CONTROLLER_ALTER_PARTITIONS_MAX);
	pthread_mutex_lock(&m->lock);
	int64_t epoch = m->broker_epoch; /* now: a re-registration since the submit gave a new one */
	m->stats.alter_partition_requests++;
	m->stats.alter_partition_changes += b->n;
	pthread_mutex_unlock(&m->lock);
	isr_group(b->v, b->n);
	struct kwr w;
	kwr_init(&w, 256 + (size_t)b->n * 32, SLUICE_META_FORWARD_BYTES_MAX);
	isr_encode(&w, m->cfg.node_id, epoch, b->v, b->n);
	if (w.err) { /* out of memory: the callers ask again */
		kwr_free(&w);
		isr_batch_done(b, KERR_REQUEST_TIMED_OUT, NULL, 0);
		return;
	}
	if (b->n > 1)
		SLOG_INFO("meta", "asking the controller for %u ISR changes in one AlterPartition", b->n);
	struct mc_forward f = {.api_key = API_ALTER_PARTITION, .api_version = 2, .body = w.buf, .len = w.len,
			       .done = isr_batch_done, .arg = b};
	forward_run(m, conn, &f);
	kwr_free(&w);
}

static int mc_alter_partition(void *self, struct sluice_meta_isr_change *c)
{
	struct mc *m = self;
	assert(c->done && c->isr_n >= 0 && c->isr_n <= SLUICE_REPLICAS_MAX);
	pthread_mutex_lock(&m->lock);
	int64_t epoch = m->broker_epoch;
	pthread_mutex_unlock(&m->lock);
	if (epoch < 0)
		return -1;
	pthread_mutex_lock(&m->q_lock);
	bool full = m->q_stopping || m->isr_n >= MC_ISR_QUEUED_MAX;
	if (!full) {
		m->isr_q[(m->isr_head + m->isr_n) % MC_ISR_QUEUED_MAX] = c;
		m->isr_n++;
		pthread_cond_signal(&m->q_cond);
	}
	pthread_mutex_unlock(&m->q_lock);
	return full ? -1 : 0;
}

/* ---- the admin thread and its queue ---------------------------------------------------- */

static void *admin_main(void *arg)
{
	struct mc *m = arg;
	struct mc_conn c;
	conn_init(&c, "admin");
	struct mc_isr_batch isr = {0};
	bool isr_turn = true;
	pthread_mutex_lock(&m->q_lock);
	for (;;) {
		while (!m->q_head && !m->f_head && !m->isr_n && !m->q_stopping)
			pthread_cond_wait(&m->q_cond, &m->q_lock);
		/* ISR changes and forwards take turns: neither waits behind a
		 * stream of the other. */
		if (m->isr_n && (isr_turn || !m->f_head)) {
			isr_take(m, &isr);
			pthread_mutex_unlock(&m->q_lock);
			isr_batch_run(m, &c, &isr);
			isr_turn = false;
		} else if (m->f_head) {
			isr_turn = true;
			struct mc_forward *f = m->f_head;
			m->f_head = f->next;
			if (!m->f_head)
				m->f_tail = NULL;
			m->f_n--;
			pthread_mutex_unlock(&m->q_lock);
			forward_run(m, &c, f);
			free(f->body);
			free(f);
		} else if (m->q_head) {
			struct sluice_meta_batch *b = m->q_head;
			m->q_head = b->next;
			if (!m->q_head)
				m->q_tail = NULL;
			b->next = NULL;
			uint32_t n = b->change_n; /* done may free b */
			pthread_mutex_unlock(&m->q_lock);
			batch_run(m, &c, b);
			b->done(b);
			pthread_mutex_lock(&m->q_lock);
			assert(m->q_changes >= n);
			m->q_changes -= n;
			pthread_cond_broadcast(&m->q_space);
			continue;
		} else
			break; /* stopping, and nothing is left */
		pthread_mutex_lock(&m->q_lock);
	}
	pthread_mutex_unlock(&m->q_lock);
	conn_free(&c);
	return NULL;
}

/* Queues b; wait: block while the queue is full instead of answering BUSY. */
static enum sluice_meta_submit_result queue_push(struct mc *m, struct sluice_meta_batch *b, bool wait)
{
	assert(b->done && (b->changes || b->change_n == 0));
	if (b->change_n > SLUICE_META_BATCH_CHANGES_MAX)
		return SLUICE_META_TOO_LARGE;
	pthread_mutex_lock(&m->q_lock);
	while (!m->q_stopping && m->q_changes + b->change_n > SLUICE_META_QUEUE_CHANGES_MAX && wait)
		pthread_cond_wait(&m->q_space, &m->q_lock);
	if (m->q_stopping || m->q_changes + b->change_n > SLUICE_META_QUEUE_CHANGES_MAX) {
		pthread_mutex_unlock(&m->q_lock);
		return SLUICE_META_BUSY;
	}
	m->q_changes += b->change_n;
	b->next = NULL;
	if (m->q_tail)
		m->q_tail->next = b;
	else
		m->q_head = b;
	m->q_tail = b;
	pthread_cond_signal(&m->q_cond);
	pthread_mutex_unlock(&m->q_lock);
	return SLUICE_META_SUBMITTED;
}

static enum sluice_meta_submit_result mc_submit(void *self, struct sluice_meta_batch *b)
{
	return queue_push(self, b, false);
}

/* ---- the synchronous operations, and batch_begin .. batch_commit ----------------------- */

static bool in_stage(const struct mc *m)
{
	pthread_t o = __atomic_load_n(&m->stage_owner, __ATOMIC_ACQUIRE);
	return o && pthread_equal(o, pthread_self());
}

static void sync_done(struct sluice_meta_batch *b)
{
	sem_post(b->arg);
}

/* Submits the changes as one batch and waits for it (not on the admin thread). */
static void sync_run(struct mc *m, struct sluice_meta_change *changes, uint32_t n, bool validate_only)
{
	assert(!m->admin_started || !pthread_equal(pthread_self(), m->admin_thread));
	sem_t sem;
	sem_init(&sem, 0, 0);
	struct sluice_meta_batch b = {.changes = changes, .change_n = n, .validate_only = validate_only, .done = sync_done,
				      .arg = &sem};
	if (queue_push(m, &b, true) != SLUICE_META_SUBMITTED) {
		for (uint32_t i = 0; i < n; i++)
			change_fail(&changes[i], KERR_REQUEST_TIMED_OUT, "the broker is shutting down");
	} else
		while (sem_wait(&sem) < 0 && errno == EINTR)
			;
	sem_destroy(&sem);
}

/* Copies change c into the staged batch (between batch_begin and
 * batch_commit): its result comes with batch_commit. */
static int16_t stage_add(struct mc *m, const struct sluice_meta_change *c)
{
	if (c->name && c->name_len > SLUICE_TOPIC_NAME_MAX)
		return KERR_INVALID_TOPIC_EXCEPTION;
	if (m->stage_n == SLUICE_META_BATCH_CHANGES_MAX)
		return KERR_POLICY_VIOLATION;
	if (m->stage_n == m->stage_cap) {
		uint32_t cap = m->stage_cap ? m->stage_cap * 2 : 64;
		struct sluice_meta_change *nc = realloc(m->stage, cap * sizeof *nc);
		if (nc)
			m->stage = nc;
		struct mc_stage_aux *na = nc ? realloc(m->stage_aux, cap * sizeof *na) : NULL;
		if (!na)
			return KERR_UNKNOWN_SERVER_ERROR;
		m->stage_aux = na;
		m->stage_cap = cap;
	}
	struct mc_stage_aux *x = &m->stage_aux[m->stage_n];
	int32_t n = c->config_n > 0 && c->configs ? c->config_n : 0;
	x->configs = n ? malloc((size_t)n * sizeof *x->configs) : NULL;
	if (n && !x->configs)
		return KERR_UNKNOWN_SERVER_ERROR;
	if (n)
		memcpy(x->configs, c->configs, (size_t)n * sizeof *x->configs);
	memset(x->name, 0, sizeof x->name);
	if (c->name)
		memcpy(x->name, c->name, c->name_len);
	x->has_id = c->id != NULL;
	if (c->id)
		memcpy(x->id, c->id, 16);
	x->has_replica_node = c->replica_node != NULL;
	x->replica_node = c->replica_node ? *c->replica_node : -1;
	assert(!c->assignment); /* the synchronous operations never give one */
	struct sluice_meta_change *s = &m->stage[m->stage_n++];
	*s = *c;
	s->config_n = n;
	s->topic_out = NULL; /* staged: the caller's struct need not outlive this call */
	assert(m->stage_n <= m->stage_cap);
	return 0;
}

/* Runs c: staged between batch_begin and batch_commit (unless it only
 * validates), else a batch of its own, submitted and waited for. */
static int16_t sync_change(struct mc *m, struct sluice_meta_change *c, bool validate_only, char *msg, size_t msglen)
{
	c->error = 0;
	c->msg[0] = '\0';
	c->producer_id = -1;
	if (in_stage(m) && !validate_only && c->kind != SLUICE_META_ALLOCATE_PRODUCER_ID) {
		c->error = stage_add(m, c);
		if (c->error)
			snprintf(c->msg, sizeof c->msg, "cannot stage this change (%s)", sluice_kafka_error_name(c->error));
	} else
		sync_run(m, c, 1, validate_only);
	if (msg && msglen)
		snprintf(msg, msglen, "%s", c->msg);
	return c->error;
}

static int16_t mc_create(void *self, const struct sluice_topic_spec *spec, bool validate_only, char *msg,
			 size_t msglen, struct sluice_topic *out)
{
	struct sluice_meta_change c = {.kind = SLUICE_META_CREATE_TOPIC, .name = spec->name, .name_len = spec->name_len,
				       .partitions = spec->partitions, .replication_factor = spec->replication_factor,
				       .configs = spec->configs, .config_n = spec->config_n, .id = spec->id,
				       .replica_node = spec->replica_node, .topic_out = out};
	return sync_change(self, &c, validate_only, msg, msglen);
}

static int16_t mc_delete(void *self, const char *name, size_t len, struct sluice_topic *out, char *msg, size_t msglen)
{
	struct sluice_meta_change c = {.kind = SLUICE_META_DELETE_TOPIC, .name = name, .name_len = len, .topic_out = out};
	return sync_change(self, &c, false, msg, msglen);
}

static void mc_forget_deleted(void *self, const uint8_t id[16])
{
	(void)self; /* the controller keeps the cluster's state: nothing for a broker to forget */
	(void)id;
}

static int64_t mc_allocate_producer_id(void *self)
{
	struct sluice_meta_change c = {.kind = SLUICE_META_ALLOCATE_PRODUCER_ID};
	(void)sync_change(self, &c, false, NULL, 0);
	return c.producer_id;
}

static int16_t mc_create_partitions(void *self, const char *name, size_t len, int32_t count, bool validate_only,
				    char *msg, size_t msglen)
{
	struct sluice_meta_change c = {.kind = SLUICE_META_CREATE_PARTITIONS, .name = name, .name_len = len,
				       .partitions = count};
	return sync_change(self, &c, validate_only, msg, msglen);
}

static int16_t mc_set_topic_configs(void *self, const char *name, size_t len, const struct sluice_topic_config *configs,
				    int32_t n, bool validate_only, char *msg, size_t msglen)
{
	struct sluice_meta_change c = {.kind = SLUICE_META_SET_TOPIC_CONFIGS, .name = name, .name_len = len,
				       .configs = configs, .config_n = n};
	return sync_change(self, &c, validate_only, msg, msglen);
}

/* The changes this thread makes until batch_commit are staged and sent
 * together as one batch (one request per kind, not per change). */
static void mc_batch_begin(void *self)
{
	struct mc *m = self;
	assert(!in_stage(m));
	pthread_mutex_lock(&m->stage_lock);
	assert(m->stage_n == 0);
	__atomic_store_n(&m->stage_owner, pthread_self(), __ATOMIC_RELEASE);
}

/* Sends the staged batch and waits: 0 when every change was made, else
 * the first failure's error with "<topic>: <message>" (the others may
 * have been made: the controller answers each change on its own). */
static int16_t mc_batch_commit(void *self, char *msg, size_t msglen)
{
	struct mc *m = self;
	assert(in_stage(m));
	__atomic_store_n(&m->stage_owner, (pthread_t)0, __ATOMIC_RELEASE);
	for (uint32_t i = 0; i < m->stage_n; i++) {
		struct sluice_meta_change *c = &m->stage[i];
		struct mc_stage_aux *x = &m->stage_aux[i];
		c->name = c->name ? x->name : NULL;
		c->configs = x->configs;
		c->id = x->has_id ? x->id : NULL;
		c->replica_node = x->has_replica_node ? &x->replica_node : NULL;
	}
	if (m->stage_n)
		sync_run(m, m->stage, m->stage_n, false);
	int16_t first = 0;
	if (msg && msglen)
		msg[0] = '\0';
	for (uint32_t i = 0; i < m->stage_n; i++) {
		struct sluice_meta_change *c = &m->stage[i];
		if (c->error && !first) {
			first = c->error;
			if (msg && msglen)
				snprintf(msg, msglen, "%s: %s", c->name ? c->name : "producer id", c->msg);
		}
		free(m->stage_aux[i].configs);
	}
	m->stage_n = 0;
	pthread_mutex_unlock(&m->stage_lock);
	return first;
}

static bool mc_lease_valid(void *self, int64_t now)
{
	struct mc *m = self;
	return now < atomic_load(&m->lease_until_ms);
}

static const struct sluice_meta_ops controller_ops = {
	.acquire = mc_acquire,
	.is_current = mc_is_current,
	.release = mc_release,
	.submit = mc_submit,
	.create_topic = mc_create,
	.delete_topic = mc_delete,
	.allocate_producer_id = mc_allocate_producer_id,
	.create_partitions = mc_create_partitions,
	.set_topic_configs = mc_set_topic_configs,
	.batch_begin = mc_batch_begin,
	.batch_commit = mc_batch_commit,
	.forget_deleted = mc_forget_deleted,
	.forward = mc_forward,
	.alter_partition = mc_alter_partition,
	.lease_valid = mc_lease_valid,
};

/* ---- open, readiness, controlled shutdown, close ------------------------------------------ */

/* The value of property key in cfg, through the generic accessor (so that
 * this file does not depend on which fields struct sluice_config has). */
static bool config_get(const struct sluice_config *cfg, const char *key, char *value, size_t len)
{
	const char *name;
	bool is_default;
	for (size_t i = 0; sluice_config_entry(cfg, i, &name, value, len, &is_default); i++)
		if (!strcmp(name, key))
			return true;
	value[0] = '\0';
	return false;
}

void sluice_meta_controller_config_from(struct sluice_meta_controller_config *out, const struct sluice_config *cfg)
{
	char v[SLUICE_CONFIG_STRING_MAX];
	memset(out, 0, sizeof *out);
	out->node_id = cfg->node_id;
	snprintf(out->cluster_id, sizeof out->cluster_id, "%s", cfg->cluster_id);
	snprintf(out->rack, sizeof out->rack, "%s", cfg->broker_rack);
	(void)config_get(cfg, "controller.quorum.voters", out->quorum_voters, sizeof out->quorum_voters);
	(void)config_get(cfg, "controller.quorum.bootstrap.servers", out->bootstrap_servers, sizeof out->bootstrap_servers);
	snprintf(out->listeners, sizeof out->listeners, "%s",
		 cfg->advertised_listeners[0] ? cfg->advertised_listeners : cfg->listeners);
	out->heartbeat_interval_ms = SLUICE_META_CONTROLLER_HEARTBEAT_MS_DEFAULT;
	if (config_get(cfg, "broker.heartbeat.interval.ms", v, sizeof v) && atoi(v) > 0)
		out->heartbeat_interval_ms = atoi(v);
	out->session_timeout_ms = SLUICE_META_CONTROLLER_SESSION_MS_DEFAULT;
	if (config_get(cfg, "broker.session.timeout.ms", v, sizeof v) && atoi(v) > 0)
		out->session_timeout_ms = atoi(v);
	out->base = cfg;
}

/* <dir>/sluice-broker-epoch: the broker epoch at the last clean shutdown,
 * read once and removed (a crash after this start must not reuse it). */
static int64_t epoch_file_take(const char *dir)
{
	char path[1100];
	snprintf(path, sizeof path, "%.1000s/%s", dir, MC_EPOCH_FILE);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	long long epoch = -1;
	if (fscanf(f, "%lld", &epoch) != 1 || epoch < 0) {
		SLOG_WARN("meta", "%s does not hold a broker epoch: ignored", path);
		epoch = -1;
	}
	fclose(f);
	if (unlink(path) < 0)
		SLOG_WARN("meta", "cannot remove %s: %s", path, strerror(errno));
	return epoch;
}

static void epoch_file_write(const char *dir, int64_t epoch)
{
	char path[1100], tmp[1200];
	snprintf(path, sizeof path, "%.1000s/%s", dir, MC_EPOCH_FILE);
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	int ok = f && fprintf(f, "%lld\n", (long long)epoch) > 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
	if (f && fclose(f) != 0)
		ok = 0;
	if (!ok || rename(tmp, path) < 0) {
		SLOG_WARN("meta", "cannot write %s: %s; the next start registers as after a crash", path, strerror(errno));
		(void)unlink(tmp);
	}
}

/* The settings of cc into m; -1 with err naming the key. */
static int mc_configure(struct mc *m, const struct sluice_meta_controller_config *cc, const char *dir, char *err,
			size_t errlen)
{
	m->cfg = *cc;
	if (cc->node_id < 0) {
		snprintf(err, errlen, "node.id must be set in cluster mode");
		return -1;
	}
	if (!cc->cluster_id[0]) {
		snprintf(err, errlen, "cluster.id must be set in cluster mode");
		return -1;
	}
	if (cc->heartbeat_interval_ms <= 0)
		m->cfg.heartbeat_interval_ms = SLUICE_META_CONTROLLER_HEARTBEAT_MS_DEFAULT;
	if (cc->session_timeout_ms <= 0)
		m->cfg.session_timeout_ms = SLUICE_META_CONTROLLER_SESSION_MS_DEFAULT;
	if (!cc->quorum_voters[0] && !cc->bootstrap_servers[0]) {
		snprintf(err, errlen, "controller.quorum.voters (or controller.quorum.bootstrap.servers) is not set");
		return -1;
	}
	if (voters_parse(m, cc->quorum_voters[0] ? cc->quorum_voters : cc->bootstrap_servers, cc->quorum_voters[0], err,
			 errlen) < 0)
		return -1;
	const char *sep = strstr(cc->listeners, "://");
	size_t nl = sep ? (size_t)(sep - cc->listeners) : 0;
	if (nl && nl <= SLUICE_MREC_NAME_MAX && !memchr(cc->listeners, ',', nl))
		snprintf(m->listener_name, sizeof m->listener_name, "%.*s", (int)nl, cc->listeners);
	else
		snprintf(m->listener_name, sizeof m->listener_name, "PLAINTEXT");
	snprintf(m->client_id, sizeof m->client_id, "sluice-broker-%d", cc->node_id);
	snprintf(m->node_name, sizeof m->node_name, "%d", cc->node_id);
	m->base = malloc(sizeof *m->base);
	if (!m->base) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (cc->base)
		*m->base = *cc->base;
	else
		sluice_config_defaults(m->base);
	m->cfg.base = NULL; /* the caller's: not kept */
	snprintf(m->dir, sizeof m->dir, "%.1000s", dir);
	if (getrandom(m->incarnation_id, 16, 0) != 16) {
		snprintf(err, errlen, "cannot draw an incarnation id: %s", strerror(errno));
		return -1;
	}
	m->incarnation_id[6] = (uint8_t)((m->incarnation_id[6] & 0x0f) | 0x40);
	m->incarnation_id[8] = (uint8_t)((m->incarnation_id[8] & 0x3f) | 0x80);
	return 0;
}

static struct mc *mc_new(void)
{
	struct mc *m = calloc(1, sizeof *m);
	if (!m)
		return NULL;
	m->stop_fd = -1;
	pthread_mutex_init(&m->lock, NULL);
	pthread_mutex_init(&m->pub_lock, NULL);
	pthread_mutex_init(&m->hook_lock, NULL);
	pthread_mutex_init(&m->q_lock, NULL);
	pthread_mutex_init(&m->stage_lock, NULL);
	cond_init_monotonic(&m->changed);
	pthread_cond_init(&m->q_cond, NULL);
	pthread_cond_init(&m->q_space, NULL);
	return m;
}

/* Everything but the threads; -1 with err. */
static int mc_init(struct mc *m, char *err, size_t errlen)
{
	m->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	m->img = sluice_image_new();
	m->dirty = malloc(MC_DIRTY_MAX * sizeof m->dirty[0]);
	m->current = calloc(1, sizeof *m->current);
	if (m->stop_fd < 0 || !m->img || !m->dirty || !m->current) {
		snprintf(err, errlen, "cannot set up the metadata client: %s", m->stop_fd < 0 ? strerror(errno) : "out of memory");
		return -1;
	}
	m->current->version = 1;
	m->current->refs = 1;
	m->current->controller_id = -1;
	m->current->metadata_offset = -1;
	m->controller_id = -1;
	m->broker_epoch = -1;
	m->applied_offset = -1;
	m->fenced = true;
	m->previous_epoch = epoch_file_take(m->dir);
	snprintf(m->last_error, sizeof m->last_error, "no controller answered yet");
	return 0;
}

static void mc_free(struct mc *m)
{
	assert(!m->hb_started && !m->fetch_started && !m->admin_started);
	if (m->current)
		mc_release(m, m->current);
	if (m->img)
		sluice_image_free(m->img);
	free(m->dirty);
	free(m->base);
	free(m->stage);
	free(m->stage_aux);
	if (m->stop_fd >= 0)
		close(m->stop_fd);
	pthread_mutex_destroy(&m->lock);
	pthread_mutex_destroy(&m->pub_lock);
	pthread_mutex_destroy(&m->hook_lock);
	pthread_mutex_destroy(&m->q_lock);
	pthread_mutex_destroy(&m->stage_lock);
	pthread_cond_destroy(&m->changed);
	pthread_cond_destroy(&m->q_cond);
	pthread_cond_destroy(&m->q_space);
	free(m);
}

/* Stops the threads: every blocked wait wakes, queued work fails. */
static void mc_stop(struct mc *m)
{
	pthread_mutex_lock(&m->lock);
	__atomic_store_n(&m->stopping, true, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&m->changed);
	pthread_mutex_unlock(&m->lock);
	uint64_t one = 1;
	if (m->stop_fd >= 0 && write(m->stop_fd, &one, sizeof one) != (ssize_t)sizeof one)
		SLOG_ERR("meta", "cannot wake the metadata client's threads: %s", strerror(errno));
	pthread_mutex_lock(&m->q_lock);
	m->q_stopping = true;
	pthread_cond_broadcast(&m->q_cond);
	pthread_cond_broadcast(&m->q_space);
	pthread_mutex_unlock(&m->q_lock);
	if (m->admin_started)
		pthread_join(m->admin_thread, NULL);
	if (m->fetch_started)
		pthread_join(m->fetch_thread, NULL);
	if (m->hb_started)
		pthread_join(m->hb_thread, NULL);
	m->admin_started = m->fetch_started = m->hb_started = false;
	assert(!m->q_head && !m->f_head && !m->isr_n && m->q_changes == 0);
}

int sluice_meta_controller_open_config(struct sluice_meta *out, const struct sluice_meta_controller_config *cc,
				       const char *dir, char *err, size_t errlen)
{
	struct mc *m = mc_new();
	if (!m) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (mc_configure(m, cc, dir, err, errlen) < 0 || mc_init(m, err, errlen) < 0) {
		mc_free(m);
		return -1;
	}
	m->hb_started = pthread_create(&m->hb_thread, NULL, hb_main, m) == 0;
	m->fetch_started = m->hb_started && pthread_create(&m->fetch_thread, NULL, fetch_main, m) == 0;
	m->admin_started = m->fetch_started && pthread_create(&m->admin_thread, NULL, admin_main, m) == 0;
	if (!m->admin_started) {
		snprintf(err, errlen, "cannot start the metadata client's threads: %s", strerror(errno));
		mc_stop(m);
		mc_free(m);
		return -1;
	}
	SLOG_INFO("meta", "node %d: cluster mode, %d controller(s) (%s), snapshots list listener %s", cc->node_id,
		  m->voter_n, cc->quorum_voters[0] ? cc->quorum_voters : cc->bootstrap_servers, m->listener_name);
	out->ops = &controller_ops;
	out->self = m;
	return 0;
}

int sluice_meta_controller_open(struct sluice_meta *m, const struct sluice_config *cfg, const char *dir, char *err,
				size_t errlen)
{
	struct sluice_meta_controller_config cc;
	sluice_meta_controller_config_from(&cc, cfg);
	return sluice_meta_controller_open_config(m, &cc, dir, err, errlen);
}

/* What wait_ready still waits for ("" when ready); lock held. */
static void ready_missing(const struct mc *m, char *err, size_t errlen)
{
	if (m->broker_epoch < 0)
		snprintf(err, errlen, "not registered with the controller (%s)", m->last_error);
	else if (!m->caught_up)
		snprintf(err, errlen, "the metadata log is not caught up (offset %lld, controller's end %lld)",
			 (long long)m->applied_offset, (long long)m->fetch_hwm);
	else if (m->fenced)
		snprintf(err, errlen, "registered (broker epoch %lld) but still fenced by the controller",
			 (long long)m->broker_epoch);
	else
		err[0] = '\0';
}

int sluice_meta_controller_wait_ready(struct sluice_meta *mm, unsigned timeout_ms, char *err, size_t errlen)
{
	struct mc *m = mm->self;
	assert(m && mm->ops == &controller_ops);
	int64_t deadline = now_ms() + timeout_ms;
	char missing[300];
	pthread_mutex_lock(&m->lock);
	for (;;) {
		ready_missing(m, missing, sizeof missing);
		if (!missing[0] || m->stopping || now_ms() >= deadline)
			break;
		cond_wait_until(&m->changed, &m->lock, deadline);
	}
	pthread_mutex_unlock(&m->lock);
	if (err && errlen)
		snprintf(err, errlen, "%s", missing);
	return missing[0] ? -1 : 0;
}

int sluice_meta_controller_shutdown(struct sluice_meta *mm, unsigned timeout_ms)
{
	struct mc *m = mm->self;
	assert(m && mm->ops == &controller_ops);
	int64_t deadline = now_ms() + timeout_ms;
	pthread_mutex_lock(&m->lock);
	m->want_shutdown = m->hb_kick = true;
	pthread_cond_broadcast(&m->changed);
	while (!m->should_shutdown && m->broker_epoch >= 0 && !m->stopping && now_ms() < deadline)
		cond_wait_until(&m->changed, &m->lock, deadline);
	bool agreed = m->should_shutdown;
	int64_t epoch = m->broker_epoch;
	pthread_mutex_unlock(&m->lock);
	if (agreed)
		SLOG_INFO("meta", "node %d: the controller agreed to the controlled shutdown", m->cfg.node_id);
	else
		SLOG_WARN("meta", "node %d: no controlled shutdown within %u ms: stopping anyway", m->cfg.node_id, timeout_ms);
	if (epoch >= 0) /* this broker's data is closed cleanly: the next start may take its place at once */
		epoch_file_write(m->dir, epoch);
	return agreed ? 0 : -1;
}

void sluice_meta_controller_close(struct sluice_meta *mm)
{
	struct mc *m = mm->self;
	if (!m)
		return;
	assert(mm->ops == &controller_ops && !in_stage(m));
	mc_stop(m);
	mc_free(m);
	mm->self = NULL;
}

bool sluice_meta_is_controller(const struct sluice_meta *m)
{
	return m && m->ops == &controller_ops;
}

void sluice_meta_controller_on_publish(struct sluice_meta *mm, void (*fn)(void *arg), void *arg)
{
	struct mc *m = mm->self;
	assert(m && mm->ops == &controller_ops);
	pthread_mutex_lock(&m->hook_lock);
	m->hook = fn;
	m->hook_arg = arg;
	pthread_mutex_unlock(&m->hook_lock);
}

void sluice_meta_controller_stats(const struct sluice_meta *mm, struct sluice_meta_controller_stats *out)
{
	struct mc *m = mm->self;
	assert(m && mm->ops == &controller_ops);
	pthread_mutex_lock(&m->lock);
	*out = m->stats;
	pthread_mutex_unlock(&m->lock);
}
