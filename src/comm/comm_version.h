/* comm_version.h: which MPI library this process runs on, for the record a
 * run directory keeps (cli/run_config.h). Only comm/ includes <mpi.h>. */
#ifndef BS_COMM_COMM_VERSION_H
#define BS_COMM_COMM_VERSION_H

#include <stddef.h>

/* The MPI library's own version line (MPI_Get_library_version, first line)
 * and the standard it implements ("MPI 3.1"), into buf. Callable before
 * MPI_Init. */
void comm_library_version(char *buf, size_t size);

#endif
