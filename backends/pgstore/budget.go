package pgstore

import "time"

// DefaultBudget returns the store budget of a sluice rule that sets none
// (see ratelimit.Budgeter): twice the lock margin plus 5 ms, 25 ms with
// the default margins. A call then keeps at least the lock margin between
// the server's lock_timeout and the client's deadline, so a lock wait ends
// on the server with an error reply and the connection stays in the pool;
// a client-side deadline would make pgx close the connection, and on a
// busy host the reconnections alone outlast a budget of a few
// milliseconds.
func (s *Store) DefaultBudget() time.Duration { return 2*s.cfg.lockMargin + 5*time.Millisecond }
