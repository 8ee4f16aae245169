// Package keyfmt renders keys for error messages and logs. Keys are opaque
// bytes; an error must name one without dumping a megabyte or raw control
// bytes into a log.
package keyfmt

import (
	"fmt"
	"unicode/utf8"
)

// maxQuoted is how many bytes of a key Quote shows.
const maxQuoted = 64

// Quote returns key as a Go-quoted string when it is valid UTF-8 and as hex
// otherwise, cut to its first 64 bytes with its length appended when longer.
func Quote(key string) string {
	shown, suffix := key, ""
	if len(key) > maxQuoted {
		shown, suffix = key[:maxQuoted], fmt.Sprintf("…(%d bytes)", len(key))
	}
	if utf8.ValidString(shown) {
		return fmt.Sprintf("%q%s", shown, suffix)
	}
	return fmt.Sprintf("%x%s", shown, suffix)
}
