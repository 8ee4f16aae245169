package redisstore

import "github.com/sluicehq/sluice/internal/redisslot"

// TagFunc chooses the hash tag source of a check: keys whose sources are
// equal share a Redis Cluster slot. It receives the check's namespace and
// key and must be a pure function of them, safe for concurrent use.
type TagFunc func(namespace, key string) string

// DefaultTag is the TagFunc used when none is configured. It returns the
// content of the first "{…}" in key when there is one and it is not empty
// (the Redis Cluster convention, so "{user42}:ip" and "{user42}:day" share a
// slot), and otherwise the whole key. The namespace is ignored, so the same
// key checked under several rules (several namespaces) always shares a slot
// and a composite of those rules works on Redis Cluster without braces.
func DefaultTag(namespace, key string) string {
	if tag, ok := redisslot.HashTag(key); ok {
		return tag
	}
	return key
}

// redisKey appends the Redis key of (namespace, key) to dst:
//
//	prefix "{" tag "}:" rule ":" key   (tagged)
//	prefix rule ":" key                (untagged)
//
// where rule is the namespace escaped by appendRule. The prefix has no
// braces (WithPrefix checks), the tag has a fixed length and no brace, the
// rule has no ':' and the key runs to the end, so the mapping is
// injective and the slot of a tagged key is the slot of its tag. Untagged
// keys are written only for a single server, where slots do not matter.
func (s *Store) redisKey(dst []byte, namespace, key string) []byte {
	dst = append(dst, s.cfg.prefix...)
	if s.tagged {
		dst = append(dst, '{')
		dst = redisslot.AppendTag(dst, s.cfg.tag(namespace, key))
		dst = append(dst, '}', ':')
	}
	dst = appendRule(dst, namespace)
	dst = append(dst, ':')
	return append(dst, key...)
}

// appendRule appends namespace to dst with '%', ':', '{', '}' and every
// byte outside printable ASCII (space included) written as '%' and two
// upper-case hex digits, so the result can be typed in redis-cli, holds no
// separator and no brace, and decodes back to namespace.
func appendRule(dst []byte, namespace string) []byte {
	const hex = "0123456789ABCDEF"
	start := 0
	for i := 0; i < len(namespace); i++ {
		if c := namespace[i]; !ruleVerbatim(c) {
			dst = append(dst, namespace[start:i]...)
			dst = append(dst, '%', hex[c>>4], hex[c&15])
			start = i + 1
		}
	}
	return append(dst, namespace[start:]...)
}

// ruleVerbatim reports whether appendRule writes c as itself.
func ruleVerbatim(c byte) bool {
	return c > ' ' && c < 0x7f && c != '%' && c != ':' && c != '{' && c != '}'
}

// keySlot returns the Redis Cluster hash slot of a key built by redisKey.
func keySlot(key string) uint16 { return redisslot.Slot(key) }
