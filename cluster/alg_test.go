package cluster

import (
	"github.com/sluicehq/sluice/algorithms/tokenbucket"
	"github.com/sluicehq/sluice/core/ratelimit"
)

// plainAlg is a token bucket without the Charger capability.
type plainAlg struct{}

func (plainAlg) Name() string { return "plain" }

func (plainAlg) Decide(state []byte, now int64, l ratelimit.Limit, cost int64, dst []byte) (ratelimit.Outcome, []byte, error) {
	return tokenbucket.New().Decide(state, now, l, cost, dst)
}
