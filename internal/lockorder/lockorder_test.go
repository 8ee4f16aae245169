package lockorder_test

import (
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/lockorder"
)

func TestLockTakesEachMutexOnceAndUnlockReleases(t *testing.T) {
	var a, b sync.Mutex
	locked := lockorder.Lock([]*sync.Mutex{&b, &a, &b})
	if len(locked) != 2 {
		t.Fatalf("Lock returned %d mutexes, want 2 (the repeat dropped)", len(locked))
	}
	if a.TryLock() || b.TryLock() {
		t.Fatal("a mutex is not held after Lock")
	}
	lockorder.Unlock(locked)
	if !a.TryLock() || !b.TryLock() {
		t.Fatal("a mutex is still held after Unlock")
	}
}

func TestLockOppositeOrdersConcurrentSafe(t *testing.T) {
	var a, b sync.Mutex
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for range 1000 {
				mus := []*sync.Mutex{&a, &b}
				if g%2 == 1 {
					mus[0], mus[1] = mus[1], mus[0]
				}
				lockorder.Unlock(lockorder.Lock(mus))
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("callers locking in opposite orders deadlocked")
	}
}
