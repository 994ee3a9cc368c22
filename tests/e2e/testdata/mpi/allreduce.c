/* SPDX-License-Identifier: MIT */
/*
 * Reductions whose results each rank checks: the sum of one number per
 * rank, and of 1 Mi doubles per rank (8 MiB, through UCX's rendezvous),
 * ten times. Prints "rank R of N: reductions correct" or exits 1.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define N	(1 << 20)
#define ROUNDS	10

int main(int argc, char **argv)
{
	double *a = malloc(N * sizeof(double)), *b = malloc(N * sizeof(double));
	int rank, size;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (!a || !b)
		MPI_Abort(MPI_COMM_WORLD, 1);
	for (int r = 0; r < ROUNDS; r++) {
		long v = rank + 1 + r, sum = 0, want = (long)size * (size + 1) / 2 + (long)size * r;

		MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
		if (sum != want) {
			fprintf(stderr, "rank %d round %d: sum %ld, want %ld\n", rank, r, sum, want);
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
		for (int i = 0; i < N; i++)
			a[i] = (double)(rank + 1) * (i % 1000 + r);
		MPI_Allreduce(a, b, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
		for (int i = 0; i < N; i++)
			if (b[i] != (double)size * (size + 1) / 2 * (i % 1000 + r)) {
				fprintf(stderr, "rank %d round %d: element %d is %g\n", rank, r, i, b[i]);
				MPI_Abort(MPI_COMM_WORLD, 1);
			}
	}
	printf("rank %d of %d: reductions correct\n", rank, size);
	MPI_Finalize();
	return 0;
}
