/* comm_fatal.c: how a fatal error (bs_die) ends a job of many processes
 * without MPI_Abort, whose banner OpenMPI prints beside the one line.
 *
 * The failing rank sends its exit status to every other rank (a reserved tag
 * on MPI_COMM_WORLD, apart from every collective) and listens for up to
 * FATAL_GRACE_S: for the same notice from every other rank (an error every
 * rank met: a flag, the layout, an input file), or for a "still working"
 * reply, which a rank waiting in a collective sends when the notice reaches
 * it (comm_fatal_poll). Every rank failed: rank 0 prints the line, every rank
 * finalizes MPI (so none exits before rank 0 has printed) and exits with the
 * status. Otherwise the failing rank prints it with its rank and exits; the
 * launcher ends the others (OpenMPI and MPICH end a job whose process exits
 * non-zero). A rank busy outside a collective cannot reply: then the failing
 * rank waits the whole grace. An error in a thread other than MPI's (a
 * checkpoint writer) is printed with the rank at once and ends the process
 * with _exit: MPI may be called from the main thread only, and exit's
 * handlers would race the main thread inside MPI.
 *
 * Deliberately not here: the launcher's own notice of a non-zero exit
 * (OpenMPI's mpirun prints 11 lines unless run with -q, and no process of
 * the job can silence it; MPICH's mpiexec prints none). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "comm/comm_internal.h"
#include "core/error.h"
#include "core/timer.h"

#define FATAL_TAG 32760        /* "I fail with status S" (comm/'s own tags are below 8192) */
#define FATAL_ALIVE_TAG 32761  /* "I am still working" */
#define FATAL_GRACE_S 5.0

/* Takes one pending notice or reply, if any: its tag, else -1. */
static int take_message(int *from) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, FATAL_TAG, MPI_COMM_WORLD, &flag, &st);
    if (!flag) MPI_Iprobe(MPI_ANY_SOURCE, FATAL_ALIVE_TAG, MPI_COMM_WORLD, &flag, &st);
    if (!flag) return -1;
    int value;
    MPI_Recv(&value, 1, MPI_INT, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    *from = st.MPI_SOURCE;
    return st.MPI_TAG;
}

void comm_fatal_poll(void) {
    int from, tag;
    static const int alive = 1; /* outlives the send: this rank goes on */
    while ((tag = take_message(&from)) >= 0) {
        MPI_Request req;
        if (tag != FATAL_TAG) continue;
        MPI_Isend(&alive, 1, MPI_INT, from, FATAL_ALIVE_TAG, MPI_COMM_WORLD, &req);
        MPI_Request_free(&req);
    }
}

/* Tells every other rank; true if every one of them fails too. */
static bool all_fail(int status, int rank, int size) {
    static int out; /* outlives the sends: the process exits with them in flight */
    char *heard = calloc((size_t)size, 1);
    if (!heard) return false;
    out = status;
    for (int r = 0; r < size; r++) {
        if (r == rank) continue;
        MPI_Request req;
        MPI_Isend(&out, 1, MPI_INT, r, FATAL_TAG, MPI_COMM_WORLD, &req);
        MPI_Request_free(&req);
    }
    int others = 0;
    double t0 = bs_now();
    while (others < size - 1 && bs_now() - t0 < FATAL_GRACE_S) {
        int from, tag = take_message(&from);
        if (tag == FATAL_ALIVE_TAG) break;
        if (tag == FATAL_TAG && !heard[from]) {
            heard[from] = 1;
            others++;
        }
        if (tag < 0) usleep(1000);
    }
    free(heard);
    return others == size - 1;
}

static void report(const char *msg, int status, void *ctx) {
    (void)ctx;
    int initialized = 0, finalized = 0, size = 1, rank = 0, main_thread = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) {
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Is_thread_main(&main_thread);
    }
    if (size > 1 && main_thread && all_fail(status, rank, size)) {
        if (rank == 0) bs_print_error(msg, 0);
        MPI_Finalize();
        return;
    }
    bs_print_error(msg, 1);
    if (initialized && !finalized && !main_thread) { /* exit's clean-up would race the main thread inside MPI */
        fflush(NULL);
        _exit(status);
    }
}

void comm_fatal_install(void) { bs_set_fatal_reporter(report, NULL); }
