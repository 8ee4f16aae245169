package redisstore

// NativeCounts returns how many native.lua calls the store made and how
// many of them fell back to the generic path (tests only).
func (s *Store) NativeCounts() (calls, fallbacks int64) {
	return s.nativeCalls.Load(), s.nativeFallbacks.Load()
}

// KeySlot exposes keySlot to the tests.
var KeySlot = keySlot

// TagLen exposes tagLen to the tests.
const TagLen = tagLen

// RedisKey exposes redisKey to the tests.
func (s *Store) RedisKey(namespace, key string) string {
	return string(s.redisKey(nil, namespace, key))
}

// WithAutoPipelineAlways is WithAutoPipeline sending even a lone command
// through the autopipeliner, so sequential tests exercise that path.
func WithAutoPipelineAlways() Option {
	return optionFunc(func(c *config) error {
		c.autoPipeline, c.apAlways = true, true
		return nil
	})
}
