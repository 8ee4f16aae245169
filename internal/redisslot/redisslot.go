// Package redisslot computes Redis Cluster hash slots and the hash tags
// redisstore writes into its keys, so that redisstore and the tier
// package's sharding agree on where a key lives. The tag encoding is part
// of redisstore's stored key layout (docs/redis.md "Key layout"): it
// changes only as a breaking change.
package redisslot

import "strings"

// Slots is the number of Redis Cluster hash slots.
const Slots = 16384

// TagLen is the length of the tag AppendTag writes: 3 characters of the
// base64url alphabet carrying 18 bits of a hash of the tag source, enough
// to spread keys over all 16384 slots and over a Ring's shards.
const TagLen = 3

// tagAlphabet is the base64url alphabet: no brace, no byte a Redis client
// or ACL pattern treats specially.
const tagAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// AppendTag appends the encoded tag of src to dst: TagLen characters of
// the base64url alphabet, so it never contains a brace.
func AppendTag(dst []byte, src string) []byte {
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

// TagSlot returns the slot of a key whose tag AppendTag wrote from src.
func TagSlot(src string) uint16 {
	var buf [TagLen]byte
	return CRC16(AppendTag(buf[:0], src)) & (Slots - 1)
}

// HashTag returns the content of the first "{…}" of key and true when
// that content is not empty: the part of the key Redis Cluster hashes.
func HashTag(key string) (string, bool) {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			return key[open+1 : open+1+n], true
		}
	}
	return "", false
}

// Slot returns the Redis Cluster hash slot of key, following the cluster
// specification: CRC16 of its hash tag when it has one, else of the whole
// key, modulo 16384.
func Slot(key string) uint16 {
	if tag, ok := HashTag(key); ok {
		key = tag
	}
	return CRC16(key) & (Slots - 1)
}

// CRC16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the
// checksum Redis Cluster uses for key slots.
func CRC16[T string | []byte](s T) uint16 {
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
