package cluster

import "time"

// DefaultBudget returns 0: a node decides locally and never waits on the
// network to answer, so a sluice.Limiter sets no deadline on its calls (see
// ratelimit.Budgeter).
func (n *Node) DefaultBudget() time.Duration { return 0 }
