package pgstore

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/core/ratelimit"
)

func TestTimestamptzCodec(t *testing.T) {
	for _, tc := range []struct {
		name     string
		unixNano int64
		want     int64 // decoded: unixNano rounded down to the microsecond
	}{
		{"unix epoch", 0, 0},
		{"postgres epoch", 946_684_800 * int64(time.Second), 946_684_800 * int64(time.Second)},
		{"sub-microsecond rounds down", 1_700_000_000_123_456_789, 1_700_000_000_123_456_000},
		{"before 1970 rounds down", -1_500, -2_000},
		{"largest instant", math.MaxInt64, math.MaxInt64 / 1000 * 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := appendTimestamptz(nil, tc.unixNano)
			got, err := decodeTimestamptz(b)
			if err != nil || got != tc.want {
				t.Errorf("decode(encode(%d)) = %d, %v; want %d", tc.unixNano, got, err, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want int64
	}{
		{"infinity", []byte{0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, math.MaxInt64},
		{"-infinity", []byte{0x80, 0, 0, 0, 0, 0, 0, 0}, math.MinInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := decodeTimestamptz(tc.in); err != nil || got != tc.want {
				t.Errorf("decode = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
	if _, err := decodeTimestamptz([]byte{1, 2, 3}); err == nil {
		t.Error("decode of 3 bytes: no error")
	}
}

// TestPreparedStatementsAfterServerLosesThem checks that the store
// prepares its statements again, within the same call, when the server
// no longer has them although the connection's cache says it does.
func TestPreparedStatementsAfterServerLosesThem(t *testing.T) {
	for _, sql := range []string{"DISCARD ALL", "DEALLOCATE ALL"} {
		t.Run(sql, func(t *testing.T) {
			var counter writeCounter
			pool := newPool(t, func(c *pgxpool.Config) {
				c.MaxConns = 1
				c.ConnConfig.DialFunc = counter.dial
			})
			s := newStoreOn(t, pool, WithTable(randomName("t_")))
			key := randomName("lost-")
			if _, err := s.Apply(t.Context(), take(key, 5, 1)); err != nil {
				t.Fatal(err)
			}
			// On the only connection, behind pgx's back (simple protocol).
			conn, err := pool.Acquire(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			_, err = conn.Conn().PgConn().Exec(t.Context(), sql).ReadAll()
			conn.Release()
			if err != nil {
				t.Fatal(err)
			}
			counter.take()
			o, err := s.Apply(t.Context(), take(key, 5, 1))
			if err != nil || !o.Allowed {
				t.Fatalf("Apply after %s = %+v, %v; want allowed", sql, o, err)
			}
			// The failed read phase, the preparation, then the transaction.
			if got := counter.take(); got != 4 {
				t.Errorf("Apply after %s: %d round trips, want 4", sql, got)
			}
			if got := remaining(t, s, key, 5); got != 3 {
				t.Errorf("remaining = %d, want 3 (two takes applied once each)", got)
			}
		})
	}
}

// TestPreparedStatementsOnReplacedConnection checks that a connection the
// pool opens to replace a terminated one gets the statements prepared
// again, and that nothing is applied twice on the way.
func TestPreparedStatementsOnReplacedConnection(t *testing.T) {
	pool := newPool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	admin := newPool(t, nil)
	s := newStoreOn(t, pool, WithTable(randomName("t_")))
	key := randomName("replaced-")
	if _, err := s.Apply(t.Context(), take(key, 10, 1)); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	pid := conn.Conn().PgConn().PID()
	conn.Release()
	var ok bool
	if err := admin.QueryRow(t.Context(), "SELECT pg_terminate_backend($1::int, 10000)", int32(pid)).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d) = %t, %v", pid, ok, err)
	}
	allowed := 1
	for i := range 3 {
		o, err := s.Apply(t.Context(), take(key, 10, 1))
		if err != nil {
			// Only the call that meets the dead connection may fail,
			// and it certainly applied nothing.
			if i > 0 || !errors.Is(err, ratelimit.ErrUnavailable) {
				t.Fatalf("call %d after the backend was terminated: %v", i, err)
			}
			continue
		}
		if !o.Allowed {
			t.Fatalf("call %d: denied with units left", i)
		}
		allowed++
	}
	if got, want := remaining(t, s, key, 10), int64(10-allowed); got != want {
		t.Errorf("remaining = %d, want %d (%d takes allowed)", got, want, allowed)
	}
	conn, err = pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if conn.Conn().PgConn().PID() == pid {
		t.Fatalf("the pool still uses backend %d", pid)
	}
	var n int
	if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'sluice_pgstore_%'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != int(numStmts) {
		t.Errorf("new connection has %d of the store's prepared statements, want %d", n, numStmts)
	}
}

// TestUnnamedStatements checks the path for connections that must not
// use named prepared statements: nothing is prepared, decisions are still
// exact and take the same round trips (3 for new keys, then 2).
func TestUnnamedStatements(t *testing.T) {
	var counter writeCounter
	pool := newPool(t, func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
		c.ConnConfig.DialFunc = counter.dial
	})
	s := newStoreOn(t, pool, WithTable(randomName("t_")))
	key := randomName("unnamed-")
	composite := []ratelimit.Check{take(key+"a", 2, 1), take(key+"b", 2, 1)}
	out := make([]ratelimit.Outcome, len(composite))
	for i, want := range []bool{true, true, false} {
		counter.take()
		ok, err := s.ApplyAll(t.Context(), composite, out)
		if err != nil || ok != want {
			t.Fatalf("composite %d = %t, %v; want %t", i, ok, err, want)
		}
		want := int64(2)
		if i == 0 {
			want = 3 // seeds the new keys
		}
		if got := counter.take(); got != want {
			t.Errorf("composite %d: %d round trips, want %d", i, got, want)
		}
	}
	var n int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'sluice_pgstore_%'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d named statements prepared, want 0", n)
	}
}

// TestSeedDoesNotWaitBehindWriter checks that a decision on a key whose
// row exists queues on the row lock, and not in the seed: an INSERT … ON
// CONFLICT DO NOTHING alone waits for any transaction that has updated the
// row, and every such waiter wakes at its commit.
func TestSeedDoesNotWaitBehindWriter(t *testing.T) {
	s, pool := newStore(t)
	key := randomName("writer-")
	if _, err := s.Apply(t.Context(), take(key, 10, 1)); err != nil {
		t.Fatal(err)
	}
	writer, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = writer.Rollback(context.Background()) }()
	if _, err := writer.Exec(t.Context(), "UPDATE "+s.Table()+" SET state = state WHERE key = $1", []byte(key)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.Apply(ctx, take(key, 10, 1))
		done <- err
	}()
	// Find the statement the decision waits in (bounded: 5s).
	var waiting string
	for deadline := time.Now().Add(5 * time.Second); waiting == "" && time.Now().Before(deadline); {
		err := pool.QueryRow(t.Context(), "SELECT query FROM pg_stat_activity WHERE wait_event_type = 'Lock' "+
			"AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()", s.Table()).Scan(&waiting)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		if waiting == "" {
			time.Sleep(10 * time.Millisecond) // polling the server's view
		}
	}
	if err := writer.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Apply after the writer committed: %v", err)
	}
	if !strings.HasPrefix(waiting, "SELECT algorithm") {
		t.Errorf("the decision waited in %q, want the lock statement", waiting)
	}
}
