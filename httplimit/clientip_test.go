package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice/httplimit"
)

func TestClientIP(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	cases := []struct {
		name   string
		cfg    httplimit.IPConfig
		remote string
		header http.Header
		want   string
	}{
		{"peer without proxies", httplimit.IPConfig{}, "192.0.2.1:1234", nil, "192.0.2.1"},
		{"spoofed XFF from untrusted peer", httplimit.IPConfig{TrustedProxies: proxies}, "192.0.2.1:1234",
			http.Header{"X-Forwarded-For": {"203.0.113.9"}}, "192.0.2.1"},
		{"XFF rightmost untrusted", httplimit.IPConfig{TrustedProxies: proxies}, "10.1.1.1:80",
			http.Header{"X-Forwarded-For": {"1.1.1.1, 203.0.113.9, 10.2.2.2"}}, "203.0.113.9"},
		{"XFF over several lines", httplimit.IPConfig{TrustedProxies: proxies}, "10.1.1.1:80",
			http.Header{"X-Forwarded-For": {"1.1.1.1, 203.0.113.9", "10.2.2.2"}}, "203.0.113.9"},
		{"XFF all trusted: leftmost", httplimit.IPConfig{TrustedProxies: proxies}, "10.1.1.1:80",
			http.Header{"X-Forwarded-For": {"10.3.3.3, 10.2.2.2"}}, "10.3.3.3"},
		{"XFF garbage stops at the hop that wrote it", httplimit.IPConfig{TrustedProxies: proxies}, "10.1.1.1:80",
			http.Header{"X-Forwarded-For": {"203.0.113.9, nonsense, 10.2.2.2"}}, "10.2.2.2"},
		{"XFF with port", httplimit.IPConfig{TrustedProxies: proxies}, "10.1.1.1:80",
			http.Header{"X-Forwarded-For": {"203.0.113.9:5555"}}, "203.0.113.9"},
		{"X-Real-IP from trusted peer", httplimit.IPConfig{TrustedProxies: proxies, ForwardedHeader: "X-Real-IP"}, "10.1.1.1:80",
			http.Header{"X-Real-Ip": {"203.0.113.9"}, "X-Forwarded-For": {"1.1.1.1"}}, "203.0.113.9"},
		{"X-Real-IP ignored when XFF is configured", httplimit.IPConfig{TrustedProxies: proxies}, "10.1.1.1:80",
			http.Header{"X-Real-Ip": {"203.0.113.9"}}, "10.1.1.1"},
		{"Forwarded quoted IPv6 with port", httplimit.IPConfig{TrustedProxies: proxies, ForwardedHeader: "Forwarded", IPv6PrefixLen: 128}, "10.1.1.1:80",
			http.Header{"Forwarded": {`for=1.1.1.1, For="[2001:db8:cafe::17]:4711";proto=https;by=10.1.1.1`}}, "2001:db8:cafe::17"},
		{"Forwarded unknown stops", httplimit.IPConfig{TrustedProxies: proxies, ForwardedHeader: "Forwarded"}, "10.1.1.1:80",
			http.Header{"Forwarded": {`for=1.1.1.1, for=unknown`}}, "10.1.1.1"},
		{"IPv6 /64 by default", httplimit.IPConfig{}, "[2001:db8:1:2:3:4:5:6]:443", nil, "2001:db8:1:2::/64"},
		{"IPv6 /48", httplimit.IPConfig{IPv6PrefixLen: 48}, "[2001:db8:1:2:3:4:5:6]:443", nil, "2001:db8:1::/48"},
		{"IPv6 zone dropped", httplimit.IPConfig{IPv6PrefixLen: 128}, "[fe80::1%eth0]:443", nil, "fe80::1"},
		{"IPv4-mapped IPv6 is IPv4", httplimit.IPConfig{}, "[::ffff:192.0.2.1]:443", nil, "192.0.2.1"},
		{"IPv4 /24", httplimit.IPConfig{IPv4PrefixLen: 24}, "192.0.2.77:1", nil, "192.0.2.0/24"},
		{"trusted IPv6 proxy", httplimit.IPConfig{TrustedProxies: proxies}, "[fd00::1]:80",
			http.Header{"X-Forwarded-For": {"2001:db8:aa:bb::1, fd00::2"}}, "2001:db8:aa:bb::/64"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tc.remote
			r.Header = tc.header
			if r.Header == nil {
				r.Header = http.Header{}
			}
			got, err := httplimit.ClientIPWith(tc.cfg)(r)
			if err != nil || got != tc.want {
				t.Errorf("key %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestClientIPBadPeer(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "not-an-address"
	if _, err := httplimit.ClientIP()(r); !errors.Is(err, httplimit.ErrNoKey) {
		t.Errorf("error %v, want ErrNoKey", err)
	}
}

func TestClientIPInvalidConfigPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic for a /129 prefix")
		}
	}()
	httplimit.ClientIPWith(httplimit.IPConfig{IPv6PrefixLen: 129})
}

func TestKeys(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(http.ResponseWriter, *http.Request) {})
	type userKey struct{}
	r := httptest.NewRequest(http.MethodGet, "/items/42", nil)
	r.Header.Set("X-Api-Key", "k1")
	if got, _ := httplimit.Pattern(mux)(r); got != "GET /items/{id}" {
		t.Errorf("pattern %q", got)
	}
	if got, _ := httplimit.Join(httplimit.Method(), httplimit.Header("x-api-key"))(r); got != "GET\x00k1" {
		t.Errorf("joined %q", got)
	}
	anon := httplimit.FirstOf(httplimit.FromContext(userKey{}), httplimit.Header("X-Api-Key"))
	if got, _ := anon(r); got != "k1" {
		t.Errorf("anonymous fallback %q", got)
	}
	signedIn := r.WithContext(context.WithValue(r.Context(), userKey{}, "alice"))
	if got, _ := anon(signedIn); got != "alice" {
		t.Errorf("signed-in key %q", got)
	}
	if _, err := httplimit.Header("X-Missing")(r); !errors.Is(err, httplimit.ErrNoKey) {
		t.Errorf("missing header: %v", err)
	}
}
