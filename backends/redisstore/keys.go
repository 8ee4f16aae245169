package redisstore

import (
	"encoding/base64"
	"encoding/binary"
	"hash/fnv"
	"strings"
)

// tagLen is the length of the hash tag written between braces: 8 base64url
// characters carrying 48 bits of an FNV-1a hash of the tag source.
const tagLen = 8

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

// appendTag appends the encoded tag of src: fixed length, drawn from the
// base64url alphabet, so it never contains a brace.
func appendTag(dst []byte, src string) []byte {
	h := fnv.New64a()
	_, _ = h.Write([]byte(src)) // hash.Hash never returns an error
	var sum [8]byte
	binary.BigEndian.PutUint64(sum[:], h.Sum64())
	return base64.RawURLEncoding.AppendEncode(dst, sum[:6])
}

// redisKey returns the Redis key of (namespace, key):
//
//	prefix "{" tag "}" uvarint(len(namespace)) namespace key
//
// The prefix has no braces (New checks), the tag has none, the namespace
// is length-prefixed and the key runs to the end, so the mapping is
// injective: "a:b"+"c" and "a"+"b:c" never collide, and the slot of every
// key is the slot of its tag.
func (s *Store) redisKey(dst []byte, namespace, key string) []byte {
	dst = append(dst, s.cfg.prefix...)
	dst = append(dst, '{')
	dst = appendTag(dst, s.cfg.tag(namespace, key))
	dst = append(dst, '}')
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
