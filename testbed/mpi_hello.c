/* The MPI test program of the ``mpi`` test image, built with MPICH (which speaks PMI2 to Slurm):
 * every rank prints its rank, the size and an allreduce, which needs the ranks to have met. */
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    int rank, size, sum, one;
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int length;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    one = rank + 1;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Get_library_version(version, &length);
    printf("rank %d of %d sum %d lib %.12s\n", rank, size, sum, version);
    MPI_Finalize();
    return 0;
}
