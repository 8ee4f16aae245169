package redisstore

import "strings"

// tagLen is the length of the hash tag written between braces: 3
// characters of the base64url alphabet carrying 18 bits of a hash of the
// tag source, enough to spread keys over all 16384 Redis Cluster slots and
// over a Ring's shards. A longer tag would only lengthen every key.
const tagLen = 3

// tagAlphabet is the base64url alphabet: no brace, no byte a Redis client
// or ACL pattern treats specially.
const tagAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

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
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			return key[open+1 : open+1+n]
		}
	}
	return key
}

// appendTag appends the encoded tag of src: tagLen characters of
// tagAlphabet, so it never contains a brace.
func appendTag(dst []byte, src string) []byte {
	// FNV-1a, 64 bits, inline (hash/fnv would copy src to a []byte), then
	// MurmurHash3's finalizer: FNV-1a alone leaves the top bits nearly equal
	// for sources differing only in their last bytes ("user:1", "user:2").
	h := uint64(14695981039346656037)
	for i := 0; i < len(src); i++ {
		h ^= uint64(src[i])
		h *= 1099511628211
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return append(dst, tagAlphabet[h>>58], tagAlphabet[h>>52&63], tagAlphabet[h>>46&63])
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
		dst = appendTag(dst, s.cfg.tag(namespace, key))
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

// keySlot returns the Redis Cluster hash slot of a key built by redisKey,
// following the cluster specification: CRC16 (XMODEM) of the content of
// the first "{…}" when it is not empty, else of the whole key, modulo 16384.
func keySlot(key string) uint16 {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			key = key[open+1 : open+1+n]
		}
	}
	return crc16(key) & 16383
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the
// checksum Redis Cluster uses for key slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
