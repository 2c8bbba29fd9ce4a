/* comms.h: time of collectives and point-to-point transfers with an
 * alpha-beta model: time = steps x alpha + bytes on the busiest link /
 * bandwidth, for ring, tree and hierarchical algorithms, with the link class
 * (NVLink inside a node, the network between nodes) chosen by where the
 * group's ranks sit. Byte counts follow nccl-tests: an all-reduce of S bytes
 * moves 2 (n-1)/n S per rank, a reduce-scatter or all-gather (n-1)/n S.
 *
 * Measured fits from a calibration file replace the modelled links. */
#ifndef BS_PLAN_COMMS_H
#define BS_PLAN_COMMS_H

#include "plan/hardware.h"

typedef enum { COLL_ALLREDUCE, COLL_REDUCE_SCATTER, COLL_ALLGATHER, COLL_ALLTOALL } Collective;

/* Fraction of the line rate that collectives reach: NCCL's protocol costs
 * about 20% on NVLink (NVIDIA, nccl-tests issue 212: 370 of 450 GB/s on
 * H100); InfiniBand reaches about 90% (85-96 of 100 GB/s in nccl-tests
 * issue 119). */
#define NVLINK_EFFICIENCY 0.80
#define NETWORK_EFFICIENCY 0.90

/* NVLink SHARP (NVLS) on H100/H200: the NVSwitch reduces at about 273 GB/s
 * per GPU: NCCL's NVLS all-reduce reaches algbw 258, 265, 270, 273 GB/s on
 * 5 to 8 H100 at 2-4 GB (NVIDIA/nccl issue 1455, nccl-tests -b 2G -e 4G),
 * below the 360 GB/s the links carry, so the switch sets the rate. */
#define H100_NVLS_BW 273e9

/* Communication hidden behind compute is not free: NCCL's kernels occupy
 * streaming multiprocessors and HBM bandwidth while they run. The planner
 * charges this fraction of every overlapped second to the step (an
 * assumption of the planner, stated in docs/PLANNER.md; not fitted). */
#define OVERLAP_INTERFERENCE 0.1

/* Seconds of `comm` that cost the step when `compute` seconds run beside it. */
double overlapped_cost(double comm, double compute);
/* A transfer pipelined with compute in `steps` steps: each of the steps - 1
 * transfers runs beside one step's compute (a ring, or a product split in
 * chunks), so each costs max(0, transfer - compute) plus the interference
 * of its hidden part. */
double pipelined_cost(int steps, double transfer, double step_compute);

/* A group of n ranks with `per_node` of them in each node (per_node >= n:
 * the whole group is inside one node). */
typedef struct {
    int n, per_node;
} Group;

/* Ranks of a group whose members are `stride` ranks apart in rank order. */
Group group_of(int n, int stride, int gpus_per_node);

/* Fastest algorithm's time for S bytes; *algo (may be NULL) gets which. */
double collective_time(const Hardware *hw, Collective op, double bytes, Group g, CollectiveAlgo *algo);
/* One message of `bytes` between neighbours; inter-node unless same_node. */
double p2p_time(const Hardware *hw, double bytes, int same_node);

/* Bus bandwidths (bytes/s) collectives reach inside a node and, per GPU,
 * between nodes. */
double intra_node_busbw(const Hardware *hw);
double inter_node_busbw(const Hardware *hw);

#endif
