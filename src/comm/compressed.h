/* compressed.h: all-reduce, reduce-scatter and all-gather whose messages
 * are encoded by a codec (codec.h), non-blocking like comm.h's: each start
 * returns a CommOp advanced by comm_test / comm_wait, with the group's
 * timeout, its bytes counted in CommStats (bytes_sent: what went on the
 * wire; uncompressed_bytes: what the fp32 ring would have sent).
 *
 * Three schemes (the group's algorithm, mpi/ring/hierarchical, is not used;
 * all run on MPI point-to-point over the group):
 *
 *   ring      elementwise codecs (fp16, bf16, fp8, int8). The ring of comm.h
 *             (chunks cut into segments that move independently), each hop
 *             carrying encoded segments. Reduce steps re-encode the partial
 *             sum at every hop; the owner of a chunk encodes the final sum
 *             once and keeps the decoded values, and the all-gather forwards
 *             those bytes unchanged, so every rank ends with identical values.
 *             Every rank encodes every element exactly once (N - 1 hops plus
 *             the final encoding of the all-reduce), and the error grows
 *             with N: element i of the result is within
 *                 sum over its N encodings of (rel |p| + block_rel amax(p) + abs)
 *             of the exact sum, p the value encoded at that hop (a partial
 *             sum of up to N ranks' inputs), codec_bound's constants; for
 *             int8 this is at most N * sum_r amax_r(block) / 254 (about).
 *             Bytes sent per rank: 2 (N-1)/N of the encoded buffer for the
 *             all-reduce, (N-1)/N for reduce-scatter and all-gather.
 *   exchange  any codec; the only one for top-k and 1-bit (a ring cannot
 *             carry them: sparse sums densify, signs do not add). DeepSpeed's
 *             compressed all-reduce: (1) each rank encodes its chunk for
 *             every rank p (worker error feedback) and sends it to p (an
 *             all-to-all); (2) each rank decodes and sums the N encodings of
 *             its own chunk, adds its server residual, encodes the sum
 *             again (server error feedback) and (3) sends that to every rank
 *             (an all-gather), which decode it. Two encodings whatever N.
 *             Reduce-scatter stops after (2) with the dense sum, unencoded.
 *             Bytes sent per rank: the encodings of the N-1 other chunks plus
 *             N-1 copies of the own chunk's: about 2 (N-1)/N of the encoded
 *             buffer (1-bit: 2 (N-1)/N (n/8 + 4 N); top-k f: 2 (N-1)/N 8 f n).
 *   qgz       reduce-scatter only, elementwise codecs, no error feedback:
 *             ZeRO++'s quantized gradients (Wang et al. 2023; DeepSpeed's
 *             all_to_all_quant_reduce), hierarchical over the group's nodes
 *             (M nodes of L ranks, the same L on every node; rank (b, l) is
 *             node b's local index l and owns chunk C(b, l)):
 *               (1) inside the node, an all-to-all: each rank encodes every
 *                   chunk of its input and sends the M chunks C(*, l) to its
 *                   node peer l ("tensor slice reordering": the send buffer
 *                   is laid out by local index first, so each message is one
 *                   contiguous byte range); it decodes and sums in fp32 the
 *                   L encodings of its own local index's chunks it receives
 *                   (its own included);
 *               (2) across nodes, among the ranks of one local index, an
 *                   all-to-all: each encodes the node sum of C(b, l) again
 *                   and sends it to rank (b, l), which decodes and sums the
 *                   M node sums of its chunk: exactly its ZeRO shard.
 *             A step over one rank (L = 1 or M = 1) moves nothing and is
 *             skipped, encoding included: every element is encoded twice
 *             (once for a single node or nodes of one rank), whatever N.
 *             Each chunk is its own codec unit in both steps, so both
 *             encodings of an element use the same block. For int8 element
 *             i of the result is within
 *                 sum over nodes a of ( sum over a's ranks r of amax_r / 254
 *                                       + amax(P_a) / 254 )
 *             of the exact sum (plus codec_bound's float terms and the fp32
 *             sums), amax over i's block, P_a node a's sum of the decoded
 *             inputs (|P_a| <= sum_r amax_r (1 + 1/254)): at most about
 *             2 sum_r amax_r / 254, where the ring's grows with N.
 *             Bytes sent per rank: step 1 the encodings of the chunks of the
 *             L-1 other local indices, step 2 those of its local index's
 *             M-1 other chunks: (N-1)/N of the encoded buffer, as a flat
 *             reduce-scatter, but only step 2 ((M-1)/N of it, one
 *             encoding) crosses nodes. ZeRO++ keeps no residual (DeepSpeed's
 *             qgZ has none; LoCo, a later variant, adds one); it uses int4
 *             where the trainer here uses the int8 codec.
 *
 * Chunks follow the group's partition of an index space, as comm.h's
 * reduce-scatter: buf holds the window [window_offset, +n) of [0, total)
 * and group rank p's chunk is window ∩ its part (comm_partition). For a
 * plain all-reduce of a bucket pass (0, n, n); for 1-bit Adam over the whole
 * flat buffer pass (0, P, P): chunk p is then ZeRO shard p, so the server of
 * a chunk is the rank that updates it.
 *
 * Error feedback: the caller owns the residuals (they are optimizer-like
 * state: keep them across steps, save them in checkpoints).
 *   residual         n floats indexed like buf; every element is encoded by
 *                    this rank exactly once per operation, and its residual
 *                    becomes what that encoding did not send. Summed over the
 *                    ranks: result = sum of (inputs + residuals before)
 *                    - (residuals after) [- server residual change].
 *   server_residual  exchange all-reduce only: compressed_server_floats()
 *                    floats, this rank's chunk of the window.
 * Either may be NULL (no feedback for that encoding). A group of one returns
 * buf unchanged (nothing is sent, so nothing is encoded) and leaves the
 * residuals alone.
 *
 * Scratch: one CompressedScratch per operation in flight (say, per gradient
 * bucket); it grows to the largest operation it has served and is reused, so
 * steady-state steps allocate nothing. Starting an operation on a scratch
 * that is still in flight is an internal error. buf and the residuals must
 * not be touched until the operation completes. */
#ifndef BS_COMM_COMPRESSED_H
#define BS_COMM_COMPRESSED_H

#include <stdbool.h>
#include <stddef.h>

#include "comm/codec.h"
#include "comm/comm.h"

typedef enum { COMPRESSED_RING, COMPRESSED_EXCHANGE, COMPRESSED_QGZ } CompressedScheme;

typedef struct {
    Codec codec;
    CompressedScheme scheme; /* ring: elementwise codecs only */
    bool average;            /* the result is the mean over the group instead of the sum */
    float *residual;         /* see above; NULL: no worker error feedback */
    float *server_residual;  /* see above; NULL: no server error feedback */
} Compression;

typedef struct CompressedScratch CompressedScratch;

CompressedScratch *compressed_scratch_new(void);
void compressed_scratch_free(CompressedScratch *scratch);
/* Bytes the scratch holds now (for memory accounting). */
size_t compressed_scratch_bytes(const CompressedScratch *scratch);

/* ring for elementwise codecs, exchange for top-k and 1-bit. */
CompressedScheme compressed_default_scheme(const Codec *codec);
/* "ring" or "exchange" (--compression-scheme); false otherwise. qgz is not
 * parsed here: the trainer selects it with --zero-quant-grads. */
bool compressed_parse_scheme(const char *name, CompressedScheme *out);
const char *compressed_scheme_name(CompressedScheme scheme);

/* Every rank ends with the (compressed) sum (or mean) over the group of the
 * window, the same values on every rank. */
CommOp *comm_start_compressed_allreduce(Comm *comm, CompressedScratch *scratch, const Compression *z, float *buf,
                                        size_t window_offset, size_t n, size_t total);
/* Afterwards buf holds the sum (or mean) of window ∩ own part at its place;
 * the rest of buf is unspecified. The exchange scheme's result there is the
 * exact sum of what the ranks sent (one encoding: the error does not grow
 * with N); qgz's encodes twice (node, then across nodes); the ring's
 * re-encodes at each hop. qgz needs the same number of ranks on every node
 * of the group (it dies with one line otherwise). */
CommOp *comm_start_compressed_reduce_scatter(Comm *comm, CompressedScratch *scratch, const Compression *z, float *buf,
                                             size_t window_offset, size_t n, size_t total);
/* Ring all-gather of window ∩ own part, encoded once by its owner (an
 * elementwise codec, no feedback): ZeRO++'s qwZ with int8. The owner's own
 * part of buf is replaced by the decoded values too, so every rank holds the
 * same parameters: gather into a buffer apart from the fp32 master shard. */
CommOp *comm_start_compressed_allgather(Comm *comm, CompressedScratch *scratch, const Codec *codec, float *buf,
                                        size_t window_offset, size_t n, size_t total);

/* Floats of server residual the exchange all-reduce of this window needs
 * on this rank (its chunk), and the chunk's place in buf. */
size_t compressed_server_floats(const Comm *comm, size_t window_offset, size_t n, size_t total);
void compressed_own_chunk(const Comm *comm, size_t window_offset, size_t n, size_t total, size_t *rel_offset,
                          size_t *count);

typedef enum { COMPRESSED_OP_ALLREDUCE, COMPRESSED_OP_REDUCE_SCATTER, COMPRESSED_OP_ALLGATHER } CompressedOpKind;
/* Bytes this rank sends for one such operation, from the formats alone
 * (what CommStats will count; for planning and for tests). */
size_t compressed_bytes_per_op(const Comm *comm, CompressedOpKind kind, const Codec *codec, CompressedScheme scheme,
                               size_t window_offset, size_t n, size_t total);

#endif
