package main

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"

	"github.com/sluicehq/sluice/httplimit"
	"strings"

	"github.com/sluicehq/sluice/policy"
)

// A forward-auth request is the gateway's copy of a client request (Caddy
// forward_auth, Traefik ForwardAuth, nginx auth_request). The service
// builds descriptors from it by a template of sources:
//
//	remote_address;method,path;header:X-Api-Key=api_key
//
// Descriptors are separated by ';', entries by ','. A source is
// remote_address (the client IP, from X-Forwarded-For behind a trusted
// proxy), method (X-Forwarded-Method), path (the path of
// X-Forwarded-Uri), host (X-Forwarded-Host) or header:<Name>; '=key'
// names the entry's key (the default is the source's name, a header's in
// lower case). A descriptor whose header, or host, is absent is left out,
// as Envoy leaves out a request_headers action; a forwarded URI without a
// path has the path "/".

// sourceKind is where an entry's value comes from.
type sourceKind uint8

const (
	sourceRemoteAddress sourceKind = iota
	sourceMethod
	sourcePath
	sourceHost
	sourceHeader
)

type entrySource struct {
	kind   sourceKind
	key    string // the entry's key
	header string // canonical header name, for sourceHeader
}

// forwardAuth turns forwarded requests into descriptors.
type forwardAuth struct {
	domain      string // used when the request names none (?domain=)
	descriptors [][]entrySource
	clientIP    httplimit.Key // the client address behind trusted proxies
}

// newForwardAuth returns the forward-auth parser: domain for requests
// without ?domain=, the descriptor template, and the trusted proxies
// whose X-Forwarded-For is believed (httplimit.ClientIPWith; every IPv6
// address apart, like Envoy's remote_address).
func newForwardAuth(domain, template string, trusted []netip.Prefix) (*forwardAuth, error) {
	ds, err := parseDescriptorTemplate(template)
	if err != nil {
		return nil, err
	}
	return &forwardAuth{domain: domain, descriptors: ds,
		clientIP: httplimit.ClientIPWith(httplimit.IPConfig{TrustedProxies: trusted, IPv6PrefixLen: 128})}, nil
}

// parseDescriptorTemplate parses the template described above.
func parseDescriptorTemplate(spec string) ([][]entrySource, error) {
	var out [][]entrySource
	for desc := range strings.SplitSeq(spec, ";") {
		desc = strings.TrimSpace(desc)
		if desc == "" {
			continue
		}
		var entries []entrySource
		for item := range strings.SplitSeq(desc, ",") {
			item = strings.TrimSpace(item)
			src, key, renamed := strings.Cut(item, "=")
			var e entrySource
			switch {
			case src == "remote_address":
				e = entrySource{kind: sourceRemoteAddress, key: src}
			case src == "method":
				e = entrySource{kind: sourceMethod, key: src}
			case src == "path":
				e = entrySource{kind: sourcePath, key: src}
			case src == "host":
				e = entrySource{kind: sourceHost, key: src}
			case strings.HasPrefix(src, "header:") && len(src) > len("header:"):
				name := src[len("header:"):]
				e = entrySource{kind: sourceHeader, key: strings.ToLower(name), header: http.CanonicalHeaderKey(name)}
			default:
				return nil, fmt.Errorf("descriptor template: unknown source %q (want remote_address, method, path, host or header:<Name>)", src)
			}
			if renamed {
				if key == "" {
					return nil, fmt.Errorf("descriptor template: empty key for %q", src)
				}
				e.key = key
			}
			entries = append(entries, e)
		}
		out = append(out, entries)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("descriptor template %q has no descriptor", spec)
	}
	return out, nil
}

// parsePrefixes parses trusted proxies: CIDRs or single addresses.
func parsePrefixes(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: not a CIDR or an IP address", s)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// parseForwardAuth returns the domain and the descriptors of a forwarded
// request. Descriptors whose header is absent are left out, so the list
// may be empty: nothing applies.
func (fa *forwardAuth) parseForwardAuth(r *http.Request) (string, []policy.Descriptor, error) {
	domain := r.URL.Query().Get("domain")
	if domain == "" {
		domain = fa.domain
	}
	if domain == "" {
		return "", nil, errorf("empty domain: set ?domain= or -forward-auth-domain")
	}
	method := r.Header.Get("X-Forwarded-Method")
	if method == "" {
		method = r.Method
	}
	path := "/"
	if uri := r.Header.Get("X-Forwarded-Uri"); uri != "" {
		u, err := url.ParseRequestURI(uri)
		if err != nil {
			return "", nil, errorf("X-Forwarded-Uri %q: %v", uri, err)
		}
		if u.Path != "" { // an absolute URI without a path names the root
			path = u.Path
		}
	}
	host := r.Header.Get("X-Forwarded-Host")
	if host == "" {
		host = r.Host
	}
	var ip string
	ds := make([]policy.Descriptor, 0, len(fa.descriptors))
next:
	for _, tmpl := range fa.descriptors {
		d := make(policy.Descriptor, len(tmpl))
		for i, src := range tmpl {
			var v string
			switch src.kind {
			case sourceRemoteAddress:
				if ip == "" {
					var err error
					if ip, err = fa.clientIP(r); err != nil {
						return "", nil, fmt.Errorf("%w: client address: %w", errBadRequest, err)
					}
				}
				v = ip
			case sourceMethod:
				v = method
			case sourcePath:
				v = path
			case sourceHost:
				v = host
				if v == "" {
					continue next // a request without a host: no descriptor
				}
			case sourceHeader:
				v = strings.Join(r.Header.Values(src.header), ",")
				if v == "" {
					continue next // absent or empty: no descriptor
				}
			}
			d[i] = policy.Entry{Key: src.key, Value: v}
		}
		ds = append(ds, d)
	}
	return domain, ds, nil
}

// handleForwardAuth answers a gateway's forward-auth call through
// httplimit's middleware: 200 with the RateLimit fields to let the request
// through; 429 with Retry-After, the fields and a problem+json body to
// deny; 400 problem+json for a malformed forwarded request; 503 when the
// store failed and no failure policy answered.
func (s *service) handleForwardAuth(fa *forwardAuth) http.Handler {
	pass := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	return httplimit.Middleware(httplimit.ByFunc(func(r *http.Request, hits int64, q []httplimit.Quota) ([]httplimit.Quota, bool, error) {
		domain, ds, err := fa.parseForwardAuth(r)
		if err == nil && len(ds) > 0 {
			err = s.limits.check(domain, ds, hits)
		}
		if err != nil {
			if s.metrics != nil {
				s.metrics.requests.WithLabelValues("forward_auth", "invalid").Inc()
			}
			return q, false, err
		}
		if len(ds) == 0 {
			return q, true, nil // no descriptor could be built: nothing applies
		}
		res, err := s.decide(r.Context(), "forward_auth", domain, ds, hits)
		if err != nil && !answeredByPolicy(&res, err) {
			if isBadRequest(err) {
				err = fmt.Errorf("%w: %w", errBadRequest, err)
			}
			return q, false, err
		}
		return appendQuotas(q, &res), res.Allowed, err
	}))(pass)
}
