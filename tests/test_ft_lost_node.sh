#!/bin/sh
# test_ft_lost_node.sh PROGRAM ARGS...: stands between mpirun and each rank in
# the elastic test. It models a machine holding ranks 2 and up that is lost
# for good after the first failure: on every restart (BATCHSCALE_RESTART > 0,
# set by `batchscale run`) those ranks die by SIGKILL as they start, so the
# job cannot come back at its old size; otherwise it runs the program.
if [ "${BATCHSCALE_RESTART:-0}" -gt 0 ] && [ "${OMPI_COMM_WORLD_RANK:-0}" -ge 2 ]; then
    kill -9 $$
fi
exec "$@"
