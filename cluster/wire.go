package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// Wire format, version 1. Every message is
//
//	version  byte (wireVersion)
//	kind     byte (kindSync, kindState or kindReset)
//
// followed, for kindSync and kindState, by
//
//	origins  uvarint n, then n strings        (node names)
//	rules    uvarint n, then n × {namespace string, algorithm string,
//	                              count uvarint, period uvarint (ns), burst uvarint}
//	entries  uvarint n, then n × {rule uvarint, key string, remaining uvarint,
//	                              comps uvarint m, then m × {origin uvarint,
//	                              incarnation uvarint, count uvarint,
//	                              refunded uvarint (≤ count)}}
//
// and, for kindReset, by {namespace string, key string}, for kindLeave by
// {node name string}. A string is a
// uvarint length and that many bytes. Indices refer to the message's own
// tables, so every packet decodes on its own. Decoding checks every length
// against the bytes left and the limits below, and rejects trailing bytes.
const (
	wireVersion byte = 1

	kindSync  byte = 1 // changed keys, sent every sync interval
	kindState byte = 2 // every key, the push/pull anti-entropy state
	kindReset byte = 3 // a key reset on the sender
	kindLeave byte = 4 // the sender is leaving gracefully

	maxNameLen    = 512     // longest node name accepted on the wire
	maxAlgNameLen = 128     // longest algorithm name accepted on the wire
	maxOrigins    = 1024    // most node names in one message
	maxRules      = 1 << 16 // most rules in one message
	maxCounter    = 1 << 62 // largest cumulative counter accepted
)

// errBadMessage is wrapped by every decoding error.
var errBadMessage = errors.New("cluster: malformed gossip message")

// wireRule is what a receiver needs to evaluate a key it has never served.
type wireRule struct {
	ns    string
	alg   string
	limit ratelimit.Limit
}

// wireComp is one counter component: cumulative units admitted by origin
// in the record incarnation inc, and how many of them it refunded. Both
// only grow (a PN-counter), so max-merging is safe.
type wireComp struct {
	origin   string
	inc      uint64
	count    uint64
	refunded uint64
}

// wireEntry is one key's counters as known to the sender.
type wireEntry struct {
	rule      wireRule
	key       string
	remaining int64 // the sender's available units when it sent
	comps     []wireComp
}

// message is a decoded gossip message. One message may be decoded into
// again and again (see decode), reusing its storage.
type message struct {
	kind    byte
	entries []wireEntry
	// ns and key of a kindReset message; ns is the node name of a
	// kindLeave message.
	ns, key string

	comps []wireComp // backing store of every entry's comps
}

// encoder packs entries into messages of at most limit bytes.
type encoder struct {
	kind       byte
	limit      int
	origins    map[string]uint64
	originList []string
	rules      map[wireRule]uint64
	ruleList   []wireRule
	tableBytes int // encoded size of both tables' items
	body       []byte
	n          int
	// The table indices of the last rule and origin looked up: entries
	// in a row mostly share them, and comparing equal strings that share
	// their bytes is cheaper than hashing them.
	lastRule             wireRule
	lastOrigin           string
	lastRuleI, lastOrgI  uint64
	haveRule, haveOrigin bool
}

func newEncoder(kind byte, limit int) *encoder {
	return &encoder{kind: kind, limit: limit, origins: map[string]uint64{}, rules: map[wireRule]uint64{}}
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func (e *encoder) size() int {
	return 2 + uvarintLen(uint64(len(e.originList))) + uvarintLen(uint64(len(e.ruleList))) +
		e.tableBytes + uvarintLen(uint64(e.n)) + len(e.body)
}

func ruleSize(r wireRule) int {
	return uvarintLen(uint64(len(r.ns))) + len(r.ns) + uvarintLen(uint64(len(r.alg))) + len(r.alg) +
		uvarintLen(uint64(r.limit.Count)) + uvarintLen(uint64(r.limit.Period)) + uvarintLen(uint64(r.limit.Burst))
}

// add appends en to the message being built. It refuses (returning false
// and changing nothing) when the message already holds an entry and en
// would push it past the limit; a single entry is always accepted, so an
// oversized one travels alone.
func (e *encoder) add(en *wireEntry) bool {
	mark, no, nr, tb := len(e.body), len(e.originList), len(e.ruleList), e.tableBytes
	ri := e.lastRuleI
	if !e.haveRule || en.rule != e.lastRule {
		var ok bool
		ri, ok = e.rules[en.rule]
		if !ok {
			ri = uint64(len(e.ruleList))
			e.rules[en.rule] = ri
			e.ruleList = append(e.ruleList, en.rule)
			e.tableBytes += ruleSize(en.rule)
		}
		e.lastRule, e.lastRuleI, e.haveRule = en.rule, ri, true
	}
	e.body = binary.AppendUvarint(e.body, ri)
	e.body = binary.AppendUvarint(e.body, uint64(len(en.key)))
	e.body = append(e.body, en.key...)
	e.body = binary.AppendUvarint(e.body, uint64(max(en.remaining, 0)))
	e.body = binary.AppendUvarint(e.body, uint64(len(en.comps)))
	for _, c := range en.comps {
		oi := e.lastOrgI
		if !e.haveOrigin || c.origin != e.lastOrigin {
			var ok bool
			oi, ok = e.origins[c.origin]
			if !ok {
				oi = uint64(len(e.originList))
				e.origins[c.origin] = oi
				e.originList = append(e.originList, c.origin)
				e.tableBytes += uvarintLen(uint64(len(c.origin))) + len(c.origin)
			}
			e.lastOrigin, e.lastOrgI, e.haveOrigin = c.origin, oi, true
		}
		e.body = binary.AppendUvarint(e.body, oi)
		e.body = binary.AppendUvarint(e.body, c.inc)
		e.body = binary.AppendUvarint(e.body, c.count)
		e.body = binary.AppendUvarint(e.body, c.refunded)
	}
	if e.n > 0 && e.size() > e.limit {
		e.body = e.body[:mark]
		for _, o := range e.originList[no:] {
			delete(e.origins, o)
		}
		for _, r := range e.ruleList[nr:] {
			delete(e.rules, r)
		}
		e.originList, e.ruleList, e.tableBytes = e.originList[:no], e.ruleList[:nr], tb
		e.haveRule, e.haveOrigin = false, false
		return false
	}
	e.n++
	return true
}

// finish returns the encoded message and resets e for the next one.
func (e *encoder) finish() []byte { return e.finishTo(make([]byte, 0, e.size())) }

// finishTo is finish appending the message to out.
func (e *encoder) finishTo(out []byte) []byte {
	out = append(out, wireVersion, e.kind)
	out = binary.AppendUvarint(out, uint64(len(e.originList)))
	for _, o := range e.originList {
		out = appendString(out, o)
	}
	out = binary.AppendUvarint(out, uint64(len(e.ruleList)))
	for _, r := range e.ruleList {
		out = appendString(out, r.ns)
		out = appendString(out, r.alg)
		out = binary.AppendUvarint(out, uint64(r.limit.Count))
		out = binary.AppendUvarint(out, uint64(r.limit.Period))
		out = binary.AppendUvarint(out, uint64(r.limit.Burst))
	}
	out = binary.AppendUvarint(out, uint64(e.n))
	out = append(out, e.body...)
	clear(e.origins)
	clear(e.rules)
	e.originList, e.ruleList, e.tableBytes, e.body, e.n = e.originList[:0], e.ruleList[:0], 0, e.body[:0], 0
	e.haveRule, e.haveOrigin = false, false
	return out
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// encodeLeave returns the message announcing that name leaves.
func encodeLeave(name string) []byte {
	return appendString([]byte{wireVersion, kindLeave}, name)
}

// encodeReset returns the message announcing that ns/key was reset.
func encodeReset(ns, key string) []byte {
	out := []byte{wireVersion, kindReset}
	out = appendString(out, ns)
	return appendString(out, key)
}

// decoder reads a message, failing on the first inconsistency.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", errBadMessage, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) uvarint(what string, max uint64) uint64 { return d.number(what, "", max) }

// number reads a uvarint of at most max; what and suffix name it in the
// error (joined only then: the decoder allocates nothing per entry).
func (d *decoder) number(what, suffix string, max uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad %s%s", what, suffix)
		return 0
	}
	d.b = d.b[n:]
	if v > max {
		d.fail("%s%s %d over %d", what, suffix, v, max)
		return 0
	}
	return v
}

func (d *decoder) str(what string, min, max int) string {
	return strings.Clone(d.alias(what, min, max))
}

// alias reads a string of min..max bytes without copying it: the result
// shares the message's bytes. str copies.
func (d *decoder) alias(what string, min, max int) string {
	n := d.number(what, " length", uint64(max))
	if d.err != nil {
		return ""
	}
	if int(n) < min {
		d.fail("%s shorter than %d", what, min)
		return ""
	}
	if uint64(len(d.b)) < n {
		d.fail("%s truncated", what)
		return ""
	}
	s := unsafe.String(unsafe.SliceData(d.b), int(n))
	d.b = d.b[n:]
	return s
}

// decodeMessage parses b (at most maxBytes long) into a new message. It
// never panics; any truncated, oversized or inconsistent input is an error
// wrapping errBadMessage. The entries' keys alias b (see decode).
func decodeMessage(b []byte, maxBytes int) (message, error) {
	var m message
	if err := m.decode(b, maxBytes); err != nil {
		return message{}, err
	}
	return m, nil
}

// decode parses b into m, reusing m's entries and comps, so that the merge
// goroutine decodes without allocating per entry. Every entry's key
// aliases b, which must not change while m is in use (the merge
// goroutine's copies never do); a key kept beyond that must be cloned.
// On error m holds nothing usable.
func (m *message) decode(b []byte, maxBytes int) error {
	m.kind, m.ns, m.key = 0, "", ""
	m.release()
	if len(b) > maxBytes {
		return fmt.Errorf("%w: %d bytes over %d", errBadMessage, len(b), maxBytes)
	}
	if len(b) < 2 {
		return fmt.Errorf("%w: %d bytes", errBadMessage, len(b))
	}
	if b[0] != wireVersion {
		return fmt.Errorf("%w: version %d", errBadMessage, b[0])
	}
	m.kind = b[1]
	d := &decoder{b: b[2:]}
	switch m.kind {
	case kindReset:
		m.ns = d.str("namespace", 0, ratelimit.MaxKeyLen)
		m.key = d.str("key", 1, ratelimit.MaxKeyLen)
	case kindLeave:
		m.ns = d.str("node name", 1, maxNameLen)
	case kindSync, kindState:
		decodeEntries(d, m)
	default:
		return fmt.Errorf("%w: kind %d", errBadMessage, m.kind)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		m.release()
		return d.err
	}
	return nil
}

// release empties m's entries, keeping their storage, and drops the
// references they held (keys alias a message buffer: keeping them would
// keep that buffer alive).
func (m *message) release() {
	clear(m.entries)
	clear(m.comps)
	m.entries, m.comps = m.entries[:0], m.comps[:0]
}

func decodeEntries(d *decoder, m *message) {
	no := d.uvarint("origin count", maxOrigins)
	origins := make([]string, 0, min(no, uint64(len(d.b))))
	for range no {
		origins = append(origins, d.str("origin", 1, maxNameLen))
		if d.err != nil {
			return
		}
	}
	nr := d.uvarint("rule count", maxRules)
	rules := make([]wireRule, 0, min(nr, uint64(len(d.b))))
	for range nr {
		var r wireRule
		r.ns = d.str("namespace", 0, ratelimit.MaxKeyLen)
		r.alg = d.str("algorithm", 1, maxAlgNameLen)
		r.limit.Count = int64(d.uvarint("count", ratelimit.MaxCount))
		r.limit.Period = time.Duration(d.uvarint("period", uint64(ratelimit.MaxPeriod)))
		r.limit.Burst = int64(d.uvarint("burst", ratelimit.MaxCount))
		if d.err != nil {
			return
		}
		if err := r.limit.Validate(); err != nil {
			d.fail("rule %d: %v", len(rules), err)
			return
		}
		rules = append(rules, r)
	}
	// Every entry takes at least 4 bytes; entries are appended as they
	// decode, so a lying count cannot make the decoder allocate ahead.
	ne := d.uvarint("entry count", uint64(len(d.b))/4)
	if d.err != nil {
		return
	}
	if m.entries == nil {
		m.entries = make([]wireEntry, 0, min(ne, 1024))
	}
	for range ne {
		var en wireEntry
		ri := d.uvarint("rule index", uint64(max(len(rules)-1, 0)))
		en.key = d.alias("key", 1, ratelimit.MaxKeyLen)
		en.remaining = int64(d.uvarint("remaining", ratelimit.MaxCount))
		nc := d.uvarint("component count", uint64(len(origins)))
		if d.err != nil {
			return
		}
		if len(rules) == 0 {
			d.fail("entry without rules")
			return
		}
		en.rule = rules[ri]
		first := len(m.comps)
		for range nc {
			oi := d.uvarint("origin index", uint64(len(origins)-1))
			inc := d.uvarint("incarnation", 1<<63-1)
			count := d.uvarint("counter", maxCounter)
			refunded := d.uvarint("refunded", count)
			if d.err != nil {
				return
			}
			for _, c := range m.comps[first:] {
				if c.origin == origins[oi] {
					d.fail("origin %d twice in one entry", oi)
					return
				}
			}
			m.comps = append(m.comps, wireComp{origin: origins[oi], inc: inc, count: count, refunded: refunded})
		}
		// Full slice expression: an entry's comps never reach into the
		// next entry's. m.comps may move as it grows; the earlier
		// entries keep the array they were decoded into.
		en.comps = m.comps[first:len(m.comps):len(m.comps)]
		m.entries = append(m.entries, en)
	}
}
