package httplimit

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// IPConfig says how ClientIPWith finds a request's client address.
// The zero value trusts no proxy and groups IPv6 clients by /64.
type IPConfig struct {
	// TrustedProxies are the networks of the proxies in front of the
	// server. Only a peer in one of them is believed about the client; the
	// forwarding chain is walked from the right, past every trusted hop, to
	// the first untrusted address, which is the client. Empty: the peer
	// (Request.RemoteAddr) is the client and forwarding headers are ignored.
	TrustedProxies []netip.Prefix
	// ForwardedHeader is the one header the trusted proxies set:
	// "X-Forwarded-For" (the default), "Forwarded" (RFC 7239) or
	// "X-Real-IP". Name the one your proxies write: a header they do not
	// write is passed through from the client, who can then claim any
	// address.
	ForwardedHeader string
	// IPv6PrefixLen groups IPv6 clients by their first bits: one host
	// usually holds a whole /64, so the default is 64. 128 keys each
	// address apart.
	IPv6PrefixLen int
	// IPv4PrefixLen groups IPv4 clients likewise; the default is 32.
	IPv4PrefixLen int
}

// ClientIP keys requests by client address, believing the X-Forwarded-For
// header only from a peer in trusted, and keying IPv6 clients by /64.
// Without trusted proxies it keys by the peer address. See IPConfig.
func ClientIP(trusted ...netip.Prefix) Key {
	return ClientIPWith(IPConfig{TrustedProxies: trusted})
}

// ClientIPWith keys requests by client address as cfg says. The key is
// the address ("192.0.2.7") or, when grouped, the prefix
// ("2001:db8:1:2::/64"). It panics on an invalid cfg, like regexp.MustCompile:
// a configuration error is found at startup.
func ClientIPWith(cfg IPConfig) Key {
	c, err := cfg.normalized()
	if err != nil {
		panic(err)
	}
	return func(r *http.Request) (string, error) {
		host, addr, err := c.client(r)
		if err != nil {
			return "", err
		}
		if addr.Is4() && c.IPv4PrefixLen == 32 && host != "" {
			return host, nil // already canonical: no allocation
		}
		bits := c.IPv6PrefixLen
		if addr.Is4() {
			bits = c.IPv4PrefixLen
		}
		if bits == addr.BitLen() {
			return addr.String(), nil
		}
		p, _ := addr.Prefix(bits)
		return p.String(), nil
	}
}

func (cfg IPConfig) normalized() (IPConfig, error) {
	if cfg.IPv6PrefixLen == 0 {
		cfg.IPv6PrefixLen = 64
	}
	if cfg.IPv4PrefixLen == 0 {
		cfg.IPv4PrefixLen = 32
	}
	if cfg.IPv6PrefixLen < 1 || cfg.IPv6PrefixLen > 128 || cfg.IPv4PrefixLen < 1 || cfg.IPv4PrefixLen > 32 {
		return cfg, fmt.Errorf("httplimit: prefix lengths /%d (IPv4) and /%d (IPv6) out of range", cfg.IPv4PrefixLen, cfg.IPv6PrefixLen)
	}
	switch cfg.ForwardedHeader = http.CanonicalHeaderKey(cfg.ForwardedHeader); cfg.ForwardedHeader {
	case "":
		cfg.ForwardedHeader = "X-Forwarded-For"
	case "X-Forwarded-For", "Forwarded", "X-Real-Ip":
	default:
		return cfg, fmt.Errorf("httplimit: forwarded header %q is not X-Forwarded-For, Forwarded or X-Real-IP", cfg.ForwardedHeader)
	}
	trusted := make([]netip.Prefix, len(cfg.TrustedProxies))
	for i, p := range cfg.TrustedProxies {
		trusted[i] = p.Masked()
	}
	cfg.TrustedProxies = trusted
	return cfg, nil
}

func (cfg *IPConfig) trusted(a netip.Addr) bool {
	for _, p := range cfg.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// client returns the client address of r and, when it is the peer's own
// IPv4 address as written in RemoteAddr, that text.
func (cfg *IPConfig) client(r *http.Request) (string, netip.Addr, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return "", netip.Addr{}, fmt.Errorf("%w: peer address %q: %w", ErrNoKey, r.RemoteAddr, err)
	}
	if peer.Zone() != "" || peer.Is4In6() {
		peer, host = peer.WithZone("").Unmap(), ""
	}
	if len(cfg.TrustedProxies) == 0 || !cfg.trusted(peer) {
		return host, peer, nil
	}
	lines := r.Header.Values(cfg.ForwardedHeader)
	if cfg.ForwardedHeader == "X-Real-Ip" {
		if len(lines) > 0 {
			if a, ok := parseNode(strings.TrimSpace(lines[len(lines)-1])); ok {
				return "", a, nil
			}
		}
		return host, peer, nil
	}
	// Walk the chain from the right: the nearest proxy appended the last
	// entry. Stop at the first untrusted address; an entry that is not an
	// address ends the walk at the trusted hop that wrote it.
	client := peer
	for i := len(lines) - 1; i >= 0; i-- {
		entries := splitList(lines[i])
		for j := len(entries) - 1; j >= 0; j-- {
			node := entries[j]
			if cfg.ForwardedHeader == "Forwarded" {
				node = forwardedFor(node)
			}
			a, ok := parseNode(node)
			if !ok {
				return "", client, nil
			}
			client = a
			if !cfg.trusted(a) {
				return "", a, nil
			}
		}
	}
	// Every hop is trusted: the leftmost is the client.
	if client == peer {
		return host, peer, nil
	}
	return "", client, nil
}

// splitList splits a comma-separated header line, keeping commas inside
// quoted strings, and trims the entries.
func splitList(line string) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(line); i++ {
		switch line[i] {
		case '\\':
			if quoted {
				i++
			}
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				out = append(out, strings.TrimSpace(line[start:i]))
				start = i + 1
			}
		}
	}
	return append(out, strings.TrimSpace(line[start:]))
}

// forwardedFor returns the for= node of one Forwarded element, unquoted,
// or "" when there is none.
func forwardedFor(elem string) string {
	for pair := range strings.SplitSeq(elem, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), "for") {
			v = strings.TrimSpace(v)
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			return v
		}
	}
	return ""
}

// parseNode parses an address as forwarding headers write it: "192.0.2.1",
// "192.0.2.1:8080", "2001:db8::1", "[2001:db8::1]" or "[2001:db8::1]:8080".
// "unknown" and obfuscated identifiers are not addresses.
func parseNode(s string) (netip.Addr, bool) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		s = s[1:end]
	} else if strings.Count(s, ":") == 1 {
		s, _, _ = strings.Cut(s, ":")
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}
