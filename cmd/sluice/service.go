package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// decider is what the service needs from policy.Engine.
type decider interface {
	Decide(ctx context.Context, domain string, descriptors []policy.Descriptor, hits int64) (policy.Result, error)
}

// requestLimits caps what one request may ask; a request past a cap is
// refused before it reaches the engine.
type requestLimits struct {
	maxDescriptors int   // descriptors per request
	maxEntries     int   // entries per descriptor
	maxBodyBytes   int64 // bytes of a /json body or a gRPC message
	maxHits        int64 // hits_addend
}

var defaultLimits = requestLimits{maxDescriptors: 64, maxEntries: 16, maxBodyBytes: 64 << 10, maxHits: 1 << 20}

// service decides requests of every API (gRPC, /json, forward-auth)
// through one engine and records each decision in metrics and logs.
type service struct {
	engine  decider
	metrics *metrics // nil records nothing
	log     *slog.Logger
	limits  requestLimits
}

// errBadRequest wraps every refusal of a malformed request; it wraps
// sluice.ErrInvalid so one errors.Is separates caller mistakes.
var errBadRequest = fmt.Errorf("%w: bad request", sluice.ErrInvalid)

// isBadRequest reports whether err is the caller's mistake (gRPC
// InvalidArgument, HTTP 400): nothing was consumed.
func isBadRequest(err error) bool {
	return errors.Is(err, sluice.ErrInvalid) || errors.Is(err, policy.ErrUnknownDomain)
}

// decide asks the engine for one atomic decision over descriptors and
// records it. api names the caller's protocol in metrics and logs.
func (s *service) decide(ctx context.Context, api, domain string, ds []policy.Descriptor, hits int64) (policy.Result, error) {
	start := time.Now()
	res, err := s.engine.Decide(ctx, domain, ds, hits)
	elapsed := time.Since(start)
	if s.metrics != nil {
		s.metrics.observe(api, domain, &res, err, elapsed)
	}
	if err != nil && !isBadRequest(err) {
		s.log.LogAttrs(ctx, slog.LevelWarn, "decision failed", slog.String("api", api),
			slog.String("domain", domain), slog.Any("error", err))
	}
	return res, err
}

// validDescriptors checks what every API must send, before the engine
// sees it: a domain, 1..maxDescriptors descriptors of 1..maxEntries entries
// each with a non-empty key, and hits in 0..maxHits.
func (l *requestLimits) check(domain string, ds []policy.Descriptor, hits int64) error {
	switch {
	case domain == "":
		return fmt.Errorf("%w: empty domain", errBadRequest)
	case len(ds) == 0:
		return fmt.Errorf("%w: empty descriptor list", errBadRequest)
	case len(ds) > l.maxDescriptors:
		return fmt.Errorf("%w: %d descriptors, more than %d", errBadRequest, len(ds), l.maxDescriptors)
	case hits < 0 || hits > l.maxHits:
		return fmt.Errorf("%w: hits_addend %d outside 0..%d", errBadRequest, hits, l.maxHits)
	}
	for i, d := range ds {
		if len(d) == 0 {
			return fmt.Errorf("%w: descriptor %d has no entries", errBadRequest, i)
		}
		if len(d) > l.maxEntries {
			return fmt.Errorf("%w: descriptor %d has %d entries, more than %d", errBadRequest, i, len(d), l.maxEntries)
		}
		for j, e := range d {
			if e.Key == "" {
				return fmt.Errorf("%w: descriptor %d entry %d has an empty key", errBadRequest, i, j)
			}
		}
	}
	return nil
}

// errorf returns a bad-request error.
func errorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errBadRequest}, args...)...)
}

// answeredByPolicy reports whether a Decide error came with a failure
// policy's answer (a fail-closed rule's denial), which stands as the
// decision.
func answeredByPolicy(res *policy.Result, err error) bool {
	return !res.Allowed && len(res.Statuses) > 0 &&
		(errors.Is(err, sluice.ErrUnavailable) || errors.Is(err, sluice.ErrUnknownOutcome))
}
