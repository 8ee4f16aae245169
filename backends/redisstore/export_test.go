package redisstore

import "github.com/sluicehq/sluice/internal/redisslot"

// Test-only hooks, exported to the package's external tests (package
// redisstore_test) and absent from the public API.

// WithTestClock is withTestClock: "now" comes from an injected clock
// instead of the server's TIME.
var WithTestClock = withTestClock

// WithoutNativeScripts is withoutNativeScripts: every algorithm takes the
// generic path.
var WithoutNativeScripts = withoutNativeScripts

// WithAutoPipelineAlways is WithAutoPipeline sending even a lone command
// through the autopipeliner, so sequential tests exercise that path.
func WithAutoPipelineAlways() Option {
	return optionFunc(func(c *config) error {
		c.autoPipeline, c.apAlways = true, true
		return nil
	})
}

// NativeCounts returns how many native.lua calls the store made and how
// many of them fell back to the generic path.
func (s *Store) NativeCounts() (calls, fallbacks int64) {
	return s.nativeCalls.Load(), s.nativeFallbacks.Load()
}

// KeySlot is keySlot.
var KeySlot = keySlot

// TagLen is redisslot.TagLen.
const TagLen = redisslot.TagLen

// RedisKey returns the Redis key of (namespace, key).
func (s *Store) RedisKey(namespace, key string) string {
	return string(s.redisKey(nil, namespace, key))
}

// BatchCounts returns how many batches the coalescer sent and how many
// calls they carried.
func (s *Store) BatchCounts() (batches, calls int64) {
	return s.batches.Load(), s.batchedCalls.Load()
}

// HoldBatches makes the coalescer of a single-server store queue every
// call until ReleaseBatches, as if batches were in flight.
func (s *Store) HoldBatches() {
	b := &s.routes.single
	b.mu.Lock()
	b.inFlight += maxBatchesInFlight
	b.sentCalls += lightLoadCalls
	b.mu.Unlock()
}

// ReleaseBatches ends HoldBatches and sends the queued calls, up to
// maxBatchChecks of them in one batch.
func (s *Store) ReleaseBatches() {
	b := &s.routes.single
	b.mu.Lock()
	b.inFlight -= maxBatchesInFlight
	b.sentCalls -= lightLoadCalls
	batch := b.takeLocked()
	b.mu.Unlock()
	if batch != nil {
		go s.sendBatchDetached(b, batch)
	}
}

// QueuedCalls returns how many calls wait in the single-server coalescer.
func (s *Store) QueuedCalls() int {
	b := &s.routes.single
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// BatchesInFlight returns how many batches of the single-server
// coalescer are under way (lone calls sent directly included).
func (s *Store) BatchesInFlight() int {
	b := &s.routes.single
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inFlight
}

// HoldingCalls is how many calls sent alone, without a deadline, fill
// every slot of the single-server coalescer: past them calls queue.
const HoldingCalls = max(maxBatchesInFlight, lightLoadCalls)
