/* comm_version.c: the MPI library's version (see comm_version.h). */
#include "comm/comm_version.h"

#include <mpi.h>
#include <stdio.h>
#include <string.h>

void comm_library_version(char *buf, size_t size) {
    char library[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int length = 0, version = 0, subversion = 0;
    MPI_Get_library_version(library, &length);
    MPI_Get_version(&version, &subversion);
    library[strcspn(library, "\n,")] = '\0'; /* OpenMPI: "Open MPI v4.1.4, package: ..." */
    snprintf(buf, size, "%s (MPI %d.%d)", library, version, subversion);
}
