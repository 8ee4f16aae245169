package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// ErrNoKey reports that a Key found nothing to key the request by, such as
// a missing API-key header or an anonymous user. The middleware answers
// 400 unless the Key is wrapped in FirstOf with a fallback.
var ErrNoKey = errors.New("httplimit: no rate-limit key in the request")

// Key derives a rate-limit key (or a descriptor value) from a request. It
// must be safe for concurrent use; errors should wrap ErrNoKey.
type Key func(r *http.Request) (string, error)

// Header keys requests by the value of header name, for example an API
// key. A missing or empty header is ErrNoKey. Mind that a client can
// rotate a header it sets itself: prefer a key the server verified.
func Header(name string) Key {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		if v := r.Header.Get(name); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("%w: header %s is missing", ErrNoKey, name)
	}
}

// FromContext keys requests by the value that an earlier middleware, such
// as authentication, stored in the request's context under ctxKey: a
// string, or a fmt.Stringer. A missing or empty value is ErrNoKey.
func FromContext(ctxKey any) Key {
	return func(r *http.Request) (string, error) {
		switch v := r.Context().Value(ctxKey).(type) {
		case string:
			if v != "" {
				return v, nil
			}
		case fmt.Stringer:
			if s := v.String(); s != "" {
				return s, nil
			}
		}
		return "", fmt.Errorf("%w: no user in the request context", ErrNoKey)
	}
}

// Method keys requests by their method.
func Method() Key {
	return func(r *http.Request) (string, error) { return r.Method, nil }
}

// Pattern keys requests by the ServeMux pattern that matches them, such
// as "GET /items/{id}", so that every item shares one key. Inside a mux
// the request's own Request.Pattern is used; a middleware that wraps mux
// itself runs before routing, so mux is asked which pattern would match.
// A request that no pattern matches is keyed by "" (one shared key).
func Pattern(mux *http.ServeMux) Key {
	return func(r *http.Request) (string, error) {
		if r.Pattern != "" || mux == nil {
			return r.Pattern, nil
		}
		_, p := mux.Handler(r)
		return p, nil
	}
}

// FirstOf keys requests by the first of keys that finds a key: for
// example FirstOf(FromContext(userKey), ClientIP()) keys signed-in users
// by account and anonymous ones by address. When none finds one, it
// returns the last error.
func FirstOf(keys ...Key) Key {
	return func(r *http.Request) (string, error) {
		err := ErrNoKey
		for _, k := range keys {
			var s string
			if s, err = k(r); err == nil {
				return s, nil
			}
		}
		return "", err
	}
}

// Join keys requests by all of keys together, for example a user and a
// route. The parts are joined with a NUL byte, which no header value, IP
// address, method or pattern contains.
func Join(keys ...Key) Key {
	return func(r *http.Request) (string, error) {
		var b strings.Builder
		for i, k := range keys {
			s, err := k(r)
			if err != nil {
				return "", err
			}
			if i > 0 {
				b.WriteByte(0)
			}
			b.WriteString(s)
		}
		return b.String(), nil
	}
}
