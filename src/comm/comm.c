/* comm.c: process groups: MPI set-up and tear-down, node detection (or
 * emulation), partitions, small exact collectives, timeouts and accounting. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_internal.h"
#include "core/error.h"
#include "core/reason.h"
#include "core/timer.h"

/* At exit before comm_finalize (an error): a lone process finalizes quietly
 * (not from another thread, a checkpoint writer's error, while the main one
 * may be inside MPI); in a job, the launcher ends the other ranks when this
 * one exits (non-zero, or without finalizing), so no MPI_Abort and no banner
 * of its own. */
static void finalize_alone(void) {
    int initialized = 0, finalized = 0, size = 1, main_thread = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized) return;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Is_thread_main(&main_thread);
    if (size == 1 && main_thread) MPI_Finalize();
}

void comm_check(int rc, const Comm *comm, const char *what) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    bs_error("%s on the %s group failed: %s (a rank died?); aborting the job", what, comm->name, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* The host of group rank r (from the table comm_init gathered). */
static const char *host_of(const Comm *comm, int r) {
    MPI_Group group, world;
    int world_rank = MPI_UNDEFINED;
    MPI_Comm_group(comm->mpi, &group);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_translate_ranks(group, 1, &r, world, &world_rank);
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    return comm->hosts && world_rank != MPI_UNDEFINED ? comm->hosts + (size_t)world_rank * COMM_HOST_CHARS : "?";
}

void comm_timeout(Comm *comm, const char *what, size_t bytes, int waiting_on) {
    char who[128] = "another rank";
    if (waiting_on >= 0) snprintf(who, sizeof who, "rank %d on host %s", waiting_on, host_of(comm, waiting_on));
    char line[512];
    bs_reason(line, sizeof line, "comm_timeout",
              "%s (%s, %.1f MB) on the %s group timed out after %.0f s waiting for %s; aborting the job (raise the "
              "collective timeout if this rank is only slow)",
              what, comm_algo_name(comm->algo), (double)bytes / 1e6, comm->name, comm->timeout_s, who);
    bs_error("%s", line);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

int comm_next_tag(Comm *comm) {
    int slot = (int)(comm->op_sequence++ % OP_TAG_SLOTS);
    return slot * RING_MAX_SEGMENTS;
}

bool comm_parse_algo(const char *name, CommAlgo *out) {
    if (strcmp(name, "mpi") == 0) *out = COMM_ALGO_MPI;
    else if (strcmp(name, "ring") == 0) *out = COMM_ALGO_RING;
    else if (strcmp(name, "hierarchical") == 0) *out = COMM_ALGO_HIERARCHICAL;
    else return false;
    return true;
}

const char *comm_algo_name(CommAlgo algo) {
    switch (algo) {
    case COMM_ALGO_MPI: return "mpi";
    case COMM_ALGO_RING: return "ring";
    case COMM_ALGO_HIERARCHICAL: return "hierarchical";
    }
    return "?";
}

static Comm *wrap(MPI_Comm mpi, CommAlgo algo, double timeout_s, const char *name) {
    Comm *c = bs_calloc(1, sizeof *c);
    c->mpi = mpi;
    MPI_Comm_set_errhandler(mpi, MPI_ERRORS_RETURN);
    MPI_Comm_rank(mpi, &c->rank);
    MPI_Comm_size(mpi, &c->size);
    MPI_Comm_rank(MPI_COMM_WORLD, &c->world_rank);
    c->algo = algo;
    c->timeout_s = timeout_s;
    snprintf(c->name, sizeof c->name, "%.60s", name);
    return c;
}

/* Builds the node and cross groups of c (not recursively: they stay flat). */
static void setup_nodes(Comm *c, int ranks_per_node) {
    MPI_Comm node_mpi, cross_mpi;
    if (ranks_per_node > 0) {
        comm_check(MPI_Comm_split(c->mpi, c->world_rank / ranks_per_node, c->rank, &node_mpi), c, "node split");
    } else {
        comm_check(MPI_Comm_split_type(c->mpi, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node_mpi), c,
                   "node detection");
    }
    int local, lsize;
    MPI_Comm_rank(node_mpi, &local);
    MPI_Comm_size(node_mpi, &lsize);
    /* node index: the order of the nodes' first ranks */
    int leader = c->rank;
    MPI_Bcast(&leader, 1, MPI_INT, 0, node_mpi);
    int *leaders = bs_malloc(sizeof(int) * (size_t)c->size), *sizes = bs_malloc(sizeof(int) * (size_t)c->size);
    MPI_Allgather(&leader, 1, MPI_INT, leaders, 1, MPI_INT, c->mpi);
    MPI_Allgather(&lsize, 1, MPI_INT, sizes, 1, MPI_INT, c->mpi);
    int index = 0, nodes = 0;
    bool uniform = true;
    for (int i = 0; i < c->size; i++) {
        if (leaders[i] == i) { /* i leads a node */
            if (i < leader) index++;
            nodes++;
        }
        if (sizes[i] != lsize) uniform = false;
    }
    free(leaders);
    free(sizes);
    /* hierarchical part order: local index first, then node */
    int coords[2] = {local, index};
    int *all = bs_malloc(sizeof(int) * 2 * (size_t)c->size);
    MPI_Allgather(coords, 2, MPI_INT, all, 2, MPI_INT, c->mpi);
    c->hier_part = bs_malloc(sizeof(int) * (size_t)c->size);
    c->rank_local = bs_malloc(sizeof(int) * (size_t)c->size);
    c->rank_node = bs_malloc(sizeof(int) * (size_t)c->size);
    for (int i = 0; i < c->size; i++) {
        c->rank_local[i] = all[2 * i];
        c->rank_node[i] = all[2 * i + 1];
        c->hier_part[i] = all[2 * i] * nodes + all[2 * i + 1];
    }
    free(all);
    comm_check(MPI_Comm_split(c->mpi, local, index, &cross_mpi), c, "cross-node split");
    char name[sizeof c->name];
    snprintf(name, sizeof name, "%.50s/node", c->name);
    c->node = wrap(node_mpi, COMM_ALGO_RING, c->timeout_s, name);
    c->node->hosts = c->hosts;
    snprintf(name, sizeof name, "%.50s/cross", c->name);
    c->cross = wrap(cross_mpi, COMM_ALGO_RING, c->timeout_s, name);
    c->cross->hosts = c->hosts;
    c->node_index = index;
    c->num_nodes = nodes;
    c->local_index = local;
    c->local_size = lsize;
    c->uniform_nodes = uniform;
    c->ranks_per_node = ranks_per_node;
}

void comm_start(int *argc, char ***argv) {
    int initialized = 0, provided;
    MPI_Initialized(&initialized);
    if (initialized) return;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) bs_die("MPI_Init failed");
    atexit(finalize_alone);
    comm_fatal_install();
}

void comm_stop(void) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

Comm *comm_init(int *argc, char ***argv, CommAlgo algo, int ranks_per_node, double timeout_s, const char *name) {
    comm_start(argc, argv);
    Comm *world = wrap(MPI_COMM_WORLD, algo, timeout_s, name);
    char mine[COMM_HOST_CHARS] = "";
    gethostname(mine, sizeof mine - 1);
    char *hosts = bs_malloc((size_t)world->size * COMM_HOST_CHARS);
    comm_allgather_bytes(world, mine, COMM_HOST_CHARS, hosts); /* polls: a rank failing before it hears back */
    world->hosts = hosts;
    if (ranks_per_node > 0 && world->size % ranks_per_node != 0)
        bs_die_about("ranks_per_node", "%d ranks per node do not divide the %d processes", ranks_per_node, world->size);
    setup_nodes(world, ranks_per_node);
    if (algo == COMM_ALGO_HIERARCHICAL && !world->uniform_nodes)
        bs_die_about("ranks_per_node", "hierarchical collectives need the same number of ranks on every node");
    return world;
}

Comm *comm_split(Comm *parent, int color, int key, const char *name) {
    MPI_Comm sub;
    comm_check(MPI_Comm_split(parent->mpi, color < 0 ? MPI_UNDEFINED : color, key, &sub), parent, "group split");
    if (sub == MPI_COMM_NULL) return NULL;
    Comm *c = wrap(sub, parent->algo, parent->timeout_s, name);
    c->hosts = parent->hosts;
    setup_nodes(c, parent->ranks_per_node);
    return c;
}

static void free_flat(Comm *c) {
    while (c->free_ops) {
        CommOp *op = c->free_ops;
        c->free_ops = op->next_free;
        for (int p = 0; p < OP_MAX_PHASES; p++) ring_release(&op->phase[p]);
        free(op->counts);
        free(op->displs);
        free(op->scratch);
        free(op);
    }
    if (c->mpi != MPI_COMM_WORLD) MPI_Comm_free(&c->mpi);
    else free((char *)c->hosts);
    free(c->hier_part);
    free(c->rank_local);
    free(c->rank_node);
    free(c);
}

void comm_free(Comm *comm) {
    if (!comm) return;
    if (comm->node) free_flat(comm->node);
    if (comm->cross) free_flat(comm->cross);
    free_flat(comm);
}

void comm_finalize(Comm *world) {
    comm_barrier(world);
    comm_free(world);
    MPI_Finalize();
}

void comm_abort(Comm *comm, int code) {
    (void)comm;
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
}

int comm_rank(const Comm *comm) { return comm->rank; }
int comm_size(const Comm *comm) { return comm->size; }
int comm_world_rank(const Comm *comm) { return comm->world_rank; }
CommAlgo comm_algo(const Comm *comm) { return comm->algo; }
int comm_num_nodes(const Comm *comm) { return comm->num_nodes; }

Comm *comm_node_group(Comm *comm) { return comm->node; }

void comm_set_algo(Comm *comm, CommAlgo algo) {
    if (algo == COMM_ALGO_HIERARCHICAL && !comm->uniform_nodes)
        bs_die_about("ranks_per_node", "hierarchical collectives need the same number of ranks on every node");
    comm->algo = algo;
}

/* Part index of a group rank: rank order, or local index first (hierarchical). */
static int part_index(const Comm *comm, int rank) {
    return comm->algo == COMM_ALGO_HIERARCHICAL ? comm->hier_part[rank] : rank;
}

void part_range(size_t total, int parts, int q, size_t *offset, size_t *count) {
    size_t base = total / (size_t)parts, extra = total % (size_t)parts;
    *offset = (size_t)q * base + ((size_t)q < extra ? (size_t)q : extra);
    *count = base + ((size_t)q < extra ? 1 : 0);
}

void comm_partition(const Comm *comm, size_t total, int rank, size_t *offset, size_t *count) {
    part_range(total, comm->size, part_index(comm, rank), offset, count);
}

/* Waits for a single MPI request with the group's timeout. */
static void wait_request(Comm *comm, MPI_Request *req, const char *what, size_t bytes) {
    double t0 = bs_now(), polled = t0;
    int flag = 0;
    for (;;) {
        comm_check(MPI_Test(req, &flag, MPI_STATUS_IGNORE), comm, what);
        if (flag) break;
        double now = bs_now();
        if (now - polled > COMM_FATAL_POLL_S) {
            comm_fatal_poll();
            polled = now;
        }
        if (now - t0 > comm->timeout_s) comm_timeout(comm, what, bytes, -1);
    }
    comm->stats.wait_seconds += bs_now() - t0;
}

void comm_allreduce_double(Comm *comm, double *values, int n) {
    MPI_Request req;
    comm_check(MPI_Iallreduce(MPI_IN_PLACE, values, n, MPI_DOUBLE, MPI_SUM, comm->mpi, &req), comm, "all-reduce");
    wait_request(comm, &req, "all-reduce of statistics", (size_t)n * 8);
}

void comm_allreduce_max_double(Comm *comm, double *values, int n) {
    MPI_Request req;
    comm_check(MPI_Iallreduce(MPI_IN_PLACE, values, n, MPI_DOUBLE, MPI_MAX, comm->mpi, &req), comm, "all-reduce");
    wait_request(comm, &req, "all-reduce (max) of statistics", (size_t)n * 8);
}

void comm_broadcast_bytes(Comm *comm, void *data, size_t bytes, int root) {
    MPI_Request req;
    comm_check(MPI_Ibcast(data, (int)bytes, MPI_BYTE, root, comm->mpi, &req), comm, "broadcast");
    wait_request(comm, &req, "broadcast", bytes);
}

void comm_gather_bytes(Comm *comm, const void *data, size_t bytes, void *out, int root) {
    MPI_Request req;
    comm_check(MPI_Igather(data, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, root, comm->mpi, &req), comm,
               "gather");
    wait_request(comm, &req, "gather", bytes * (size_t)comm->size);
}

void comm_allgather_bytes(Comm *comm, const void *data, size_t bytes, void *out) {
    MPI_Request req;
    comm_check(MPI_Iallgather(data, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, comm->mpi, &req), comm,
               "all-gather");
    wait_request(comm, &req, "all-gather of statistics", bytes * (size_t)comm->size);
}

void comm_barrier(Comm *comm) {
    MPI_Request req;
    comm_check(MPI_Ibarrier(comm->mpi, &req), comm, "barrier");
    wait_request(comm, &req, "barrier", 0);
}

char *comm_gather_text(Comm *comm, const char *text, const char *sep, int root) {
    int len = (int)strlen(text);
    int *lens = bs_malloc(sizeof(int) * (size_t)comm->size);
    comm_gather_bytes(comm, &len, sizeof len, lens, root);
    char *joined = NULL;
    int *displs = NULL, *counts = NULL;
    size_t seplen = strlen(sep), total = 0;
    if (comm->rank == root) {
        displs = bs_malloc(sizeof(int) * (size_t)comm->size);
        counts = lens;
        for (int i = 0; i < comm->size; i++) {
            displs[i] = (int)total;
            total += (size_t)lens[i] + seplen;
        }
        joined = bs_malloc(total + 1);
    }
    MPI_Request req;
    comm_check(MPI_Igatherv(text, len, MPI_CHAR, joined, counts, displs, MPI_CHAR, root, comm->mpi, &req), comm,
               "gather");
    wait_request(comm, &req, "gather of text", (size_t)len);
    if (joined) { /* close the gaps with separators */
        for (int i = 0; i < comm->size - 1; i++) memcpy(joined + displs[i] + lens[i], sep, seplen);
        size_t end = displs[comm->size - 1] + (size_t)lens[comm->size - 1];
        joined[end] = '\0';
    }
    free(lens);
    free(displs);
    return joined;
}

void comm_gatherv_floats(Comm *comm, const float *data, size_t n, float *out, size_t *counts, int root) {
    int mine = (int)n;
    int *lens = bs_malloc(sizeof(int) * (size_t)comm->size), *displs = NULL;
    comm_gather_bytes(comm, &mine, sizeof mine, lens, root);
    if (comm->rank == root) {
        displs = bs_malloc(sizeof(int) * (size_t)comm->size);
        int total = 0;
        for (int i = 0; i < comm->size; i++) {
            displs[i] = total;
            total += lens[i];
            if (counts) counts[i] = (size_t)lens[i];
        }
    }
    MPI_Request req;
    comm_check(MPI_Igatherv(data, mine, MPI_FLOAT, out, lens, displs, MPI_FLOAT, root, comm->mpi, &req), comm,
               "gather");
    wait_request(comm, &req, "gather of parameters", n * sizeof(float));
    free(lens);
    free(displs);
}

void comm_set_trace(Comm *comm, Trace *trace) {
    comm->trace = trace;
    if (comm->node) comm->node->trace = NULL;
    if (comm->cross) comm->cross->trace = NULL;
}

CommStats comm_stats(const Comm *comm) { return comm->stats; }
void comm_reset_stats(Comm *comm) { memset(&comm->stats, 0, sizeof comm->stats); }
