package main

import (
	"context"
	"fmt"
	"math"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/policy"
)

// rlsServer serves envoy.service.ratelimit.v3.RateLimitService.
type rlsServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
	svc *service
}

// ShouldRateLimit decides all descriptors of req as one atomic composite.
// A malformed request gets InvalidArgument and consumes nothing; a store
// failure that the rules' failure policy did not answer gets Unavailable.
func (r *rlsServer) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := r.svc.shouldRateLimit(ctx, "grpc", req)
	if err != nil {
		if isBadRequest(err) {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return resp, nil
}

// shouldRateLimit is ShouldRateLimit for every API that speaks the RLS
// messages (gRPC and /json).
func (s *service) shouldRateLimit(ctx context.Context, api string, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ds, hits, err := s.fromRLS(req)
	if err != nil {
		if s.metrics != nil {
			s.metrics.requests.WithLabelValues(api, "invalid").Inc()
		}
		return nil, err
	}
	res, err := s.decide(ctx, api, req.GetDomain(), ds, hits)
	if err != nil && !answeredByPolicy(&res, err) {
		return nil, err
	}
	return toRLS(&res, hits), nil
}

// fromRLS converts an RLS request into the engine's descriptors and hit
// count, checking s.limits. The hit count is the request's hits_addend (0
// means 1, as in envoyproxy/ratelimit); a descriptor's own hits_addend
// overrides it, and all descriptors must then agree, since one atomic
// decision takes one cost.
func (s *service) fromRLS(req *rlsv3.RateLimitRequest) ([]policy.Descriptor, int64, error) {
	hits := max(int64(req.GetHitsAddend()), 1)
	in := req.GetDescriptors()
	if len(in) > s.limits.maxDescriptors {
		return nil, 0, fmt.Errorf("%w: %d descriptors, more than %d", errBadRequest, len(in), s.limits.maxDescriptors)
	}
	total := 0
	for _, d := range in {
		total += len(d.GetEntries())
	}
	if total > s.limits.maxDescriptors*s.limits.maxEntries {
		return nil, 0, fmt.Errorf("%w: %d descriptor entries in all", errBadRequest, total)
	}
	entries := make([]policy.Entry, total)
	ds := make([]policy.Descriptor, len(in))
	own := int64(-1)
	for i, d := range in {
		if d.GetLimit() != nil {
			return nil, 0, fmt.Errorf("%w: descriptor %d: per-descriptor limit overrides are not supported", errBadRequest, i)
		}
		if h := d.GetHitsAddend(); h != nil {
			v := h.GetValue()
			if v > uint64(s.limits.maxHits) {
				return nil, 0, fmt.Errorf("%w: descriptor %d: hits_addend %d above %d", errBadRequest, i, v, s.limits.maxHits)
			}
			if own >= 0 && own != int64(v) {
				return nil, 0, fmt.Errorf("%w: descriptors ask different hits_addend (%d, %d)", errBadRequest, own, v)
			}
			own = int64(v)
		}
		n := len(d.GetEntries())
		desc := entries[:n:n]
		entries = entries[n:]
		for j, e := range d.GetEntries() {
			desc[j] = policy.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		ds[i] = desc
	}
	if own >= 0 {
		hits = own
	}
	if err := s.limits.check(req.GetDomain(), ds, hits); err != nil {
		return nil, 0, err
	}
	return ds, hits, nil
}

// toRLS answers like envoyproxy/ratelimit: a status per descriptor in
// request order (OK without current_limit when no rule matched; OK with
// limit_remaining MaxUint32 when unlimited; a shadow-mode denial is OK),
// the overall code, and the draft-11 RateLimit fields as
// response_headers_to_add.
func toRLS(res *policy.Result, hits int64) *rlsv3.RateLimitResponse {
	// The response to a few descriptors, header values included, is one
	// allocation; a larger one takes one per part.
	var resp *rlsv3.RateLimitResponse
	var block []rlsStatus
	if n := len(res.Statuses); n <= smallAnswer {
		a := &rlsAnswer{}
		resp, block = &a.resp, a.parts[:n]
		resp.Statuses = a.statuses[:n]
		resp.ResponseHeadersToAdd = appendHeaders(a.headerPtrs[:0], a.headers[:0], res, hits)
	} else {
		resp = &rlsv3.RateLimitResponse{Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)}
		block = make([]rlsStatus, n)
		resp.ResponseHeadersToAdd = appendHeaders(nil, nil, res, hits)
	}
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	if !res.Allowed {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	for i := range res.Statuses {
		st := &res.Statuses[i]
		b := &block[i]
		out := &b.status
		resp.Statuses[i] = out
		out.Code = rlsv3.RateLimitResponse_OK
		switch {
		case !st.Matched:
		case st.Unlimited:
			out.LimitRemaining = math.MaxUint32
		default:
			d := &st.Decision
			if !d.Allowed && !st.Shadow {
				out.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			}
			lim := &b.limit
			lim.Name = d.Rule
			lim.RequestsPerUnit, lim.Unit = rlsUnit(d.Limit.Count, d.Limit.Period)
			out.CurrentLimit = lim
			out.LimitRemaining = uint32(min(max(d.Remaining, 0), math.MaxUint32))
			b.reset.Seconds, b.reset.Nanos = int64(d.ResetAfter/time.Second), int32(d.ResetAfter%time.Second)
			out.DurationUntilReset = &b.reset
		}
	}
	if len(resp.ResponseHeadersToAdd) == 0 {
		resp.ResponseHeadersToAdd = nil
	}
	return resp
}

// smallAnswer is the most descriptors whose response rlsAnswer holds.
const smallAnswer = 4

// rlsAnswer is a whole response to at most smallAnswer descriptors, with
// room for the three header values of appendHeaders, allocated at once.
type rlsAnswer struct {
	resp       rlsv3.RateLimitResponse
	statuses   [smallAnswer]*rlsv3.RateLimitResponse_DescriptorStatus
	parts      [smallAnswer]rlsStatus
	headers    [3]corev3.HeaderValue
	headerPtrs [3]*corev3.HeaderValue
}

// rlsStatus is one descriptor's part of a response, allocated with the
// others': its status, limit and duration until reset.
type rlsStatus struct {
	status rlsv3.RateLimitResponse_DescriptorStatus
	limit  rlsv3.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// rlsUnit expresses count per period in RLS units: the period's own unit
// when it is one (1s, 1m, 1h, 1d, 1w, 30d, 365d), otherwise the count
// scaled to the largest unit that divides the period evenly, otherwise
// UNKNOWN with the count as is.
func rlsUnit(count int64, period time.Duration) (uint32, rlsv3.RateLimitResponse_RateLimit_Unit) {
	clamp := uint32(min(max(count, 0), math.MaxUint32))
	for _, u := range rlsUnits {
		if period == u.length {
			return clamp, u.unit
		}
	}
	for _, u := range rlsUnits {
		if period > u.length && period%u.length == 0 && count%int64(period/u.length) == 0 {
			return uint32(min(max(count/int64(period/u.length), 0), math.MaxUint32)), u.unit
		}
	}
	return clamp, rlsv3.RateLimitResponse_RateLimit_UNKNOWN
}

// rlsUnits are the RLS units from the longest, with the lengths the rules
// give them (policy.Units: a month is 30 days, a year 365).
var rlsUnits = []struct {
	length time.Duration
	unit   rlsv3.RateLimitResponse_RateLimit_Unit
}{
	{365 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_YEAR},
	{30 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_MONTH},
	{7 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_WEEK},
	{24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY},
	{time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR},
	{time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE},
	{time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND},
}
