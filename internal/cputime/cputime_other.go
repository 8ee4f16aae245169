//go:build !unix

package cputime

import "time"

// Process returns 0: this system has no getrusage.
func Process() time.Duration { return 0 }
