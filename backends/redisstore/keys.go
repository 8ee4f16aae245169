package redisstore

import (
	"encoding/binary"
	"strings"
)

// tagLen is the length of the hash tag written between braces: 3
// characters of the base64url alphabet carrying 18 bits of a hash of the
// tag source. 18 bits spread keys over all 16384 Redis Cluster slots and
// over a Ring's shards; a longer tag would only lengthen every key. Redis 7
// keeps a key of up to 30 bytes in a 32-byte allocation and one of 31 to 44
// bytes in a 48-byte allocation, so each byte saved moves some keys into
// the smaller one.
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

// redisKey returns the Redis key of (namespace, key):
//
//	prefix "{" tag "}" uvarint(len(namespace)) namespace key   (tagged)
//	prefix uvarint(len(namespace)) namespace key               (untagged)
//
// The prefix has no braces (New checks), the tag has none, the namespace
// is length-prefixed and the key runs to the end, so the mapping is
// injective: "a:b"+"c" and "a"+"b:c" never collide, and the slot of every
// tagged key is the slot of its tag. Untagged keys are written only for a
// single server, where slots do not matter.
func (s *Store) redisKey(dst []byte, namespace, key string) []byte {
	dst = append(dst, s.cfg.prefix...)
	if s.tagged {
		dst = append(dst, '{')
		dst = appendTag(dst, s.cfg.tag(namespace, key))
		dst = append(dst, '}')
	}
	dst = binary.AppendUvarint(dst, uint64(len(namespace)))
	dst = append(dst, namespace...)
	return append(dst, key...)
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
