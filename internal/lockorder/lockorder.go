// Package lockorder locks several shard mutexes at once without deadlock:
// every caller takes them in the same (address) order.
package lockorder

import (
	"cmp"
	"slices"
	"sync"
	"unsafe"
)

// Lock sorts mus by address, drops repeats, locks each and returns the
// sorted slice (sharing mus's memory) for Unlock.
func Lock(mus []*sync.Mutex) []*sync.Mutex {
	slices.SortFunc(mus, func(a, b *sync.Mutex) int {
		return cmp.Compare(uintptr(unsafe.Pointer(a)), uintptr(unsafe.Pointer(b)))
	})
	mus = slices.Compact(mus)
	for _, mu := range mus {
		mu.Lock()
	}
	return mus
}

// Unlock unlocks what Lock returned.
func Unlock(mus []*sync.Mutex) {
	for _, mu := range mus {
		mu.Unlock()
	}
}
