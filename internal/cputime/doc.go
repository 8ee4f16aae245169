// Package cputime reads the CPU time the process has used, for benchmarks
// that report it per operation beside the wall time: on a machine shared
// with other work, CPU time per call varies far less than wall time while
// other processes take turns on the cores. Callers report it only when it
// is positive, since Process returns 0 where the system cannot say.
package cputime
