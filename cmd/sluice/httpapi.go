package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/httplimit"
)

// writeProblem answers with status and a problem+json body.
func writeProblem(w http.ResponseWriter, status int, detail string) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(httplimit.Problem{Title: http.StatusText(status), Status: status, Detail: detail})
}

// writeDecisionError answers a failed decision: 400 for the caller's
// mistake, 503 for a store the failure policy did not answer for.
func writeDecisionError(w http.ResponseWriter, err error) {
	if isBadRequest(err) {
		writeProblem(w, http.StatusBadRequest, err.Error())
		return
	}
	writeProblem(w, http.StatusServiceUnavailable, err.Error())
}

// readBody reads r's body up to limit bytes; a longer body is an error
// wrapping errBadRequest.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, errorf("body larger than %d bytes", limit)
		}
		return nil, errorf("reading body: %v", err)
	}
	return body, nil
}

// parseJSONRequest decodes an envoyproxy/ratelimit /json body: the
// RateLimitRequest message in protobuf's JSON mapping.
func parseJSONRequest(body []byte) (*rlsv3.RateLimitRequest, error) {
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		return nil, errorf("malformed JSON: %v", err)
	}
	return &req, nil
}

// handleJSON serves envoyproxy/ratelimit's POST /json: the same request
// and response JSON, 200 when allowed, 429 when over the limit, with the
// RateLimit fields as headers.
func (s *service) handleJSON(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeProblem(w, http.StatusMethodNotAllowed, "use POST")
		return
	}
	body, err := readBody(w, r, s.limits.maxBodyBytes)
	var req *rlsv3.RateLimitRequest
	if err == nil {
		req, err = parseJSONRequest(body)
	}
	if err != nil {
		if s.metrics != nil {
			s.metrics.requests.WithLabelValues("json", "invalid").Inc()
		}
		writeProblem(w, http.StatusBadRequest, err.Error())
		return
	}
	resp, err := s.shouldRateLimit(r.Context(), "json", req)
	if err != nil {
		writeDecisionError(w, err)
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		writeProblem(w, http.StatusInternalServerError, err.Error())
		return
	}
	h := w.Header()
	for _, hv := range resp.GetResponseHeadersToAdd() {
		h.Add(hv.GetKey(), hv.GetValue())
	}
	h.Set("Content-Type", "application/json")
	if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	_, _ = w.Write(out)
}
