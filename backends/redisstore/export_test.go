package redisstore

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

// TagLen is tagLen.
const TagLen = tagLen

// RedisKey returns the Redis key of (namespace, key).
func (s *Store) RedisKey(namespace, key string) string {
	return string(s.redisKey(nil, namespace, key))
}
