package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// stmtID names one statement of the decision path.
type stmtID int

const (
	stmtBegin stmtID = iota
	stmtTimeouts
	stmtSeed
	stmtLock
	stmtLockWithTimeouts
	stmtUpdate
	stmtCommit
	stmtRollback
	numStmts
)

// Type OIDs of the parameters the decision path binds (pg_type.oid).
const (
	oidBytea       = 17
	oidText        = 25
	oidTimestamptz = 1184
)

// Format codes for Bind: one code applies to every parameter or column.
var (
	allBinary = []int16{1}
	allText   []int16 // nil: text, the protocol's default
)

// statement is a statement of the decision path and the name it is
// prepared under on a connection.
type statement struct {
	name string
	sql  string
	oids []uint32 // parameter types, fixed so the server never infers others
}

// statements is the decision path of one Store: the statements in stmtID
// order, and setKey, which identifies the set in a connection's cache.
type statements struct {
	list   [numStmts]statement
	setKey string
}

func newStatements(q queries) statements {
	var st statements
	st.list = [numStmts]statement{
		stmtBegin:            {sql: beginSQL},
		stmtTimeouts:         {sql: q.setTimeouts, oids: []uint32{oidText, oidText, oidText}},
		stmtSeed:             {sql: q.seed, oids: []uint32{oidBytea, oidBytea, oidText}},
		stmtLock:             {sql: q.lock, oids: []uint32{oidBytea, oidBytea}},
		stmtLockWithTimeouts: {sql: q.lockWithTimeouts, oids: []uint32{oidBytea, oidBytea, oidText, oidText, oidText}},
		stmtUpdate:           {sql: q.update, oids: []uint32{oidBytea, oidBytea, oidText, oidBytea, oidTimestamptz}},
		stmtCommit:           {sql: "COMMIT"},
		stmtRollback:         {sql: "ROLLBACK"},
	}
	all := sha256.New()
	for i := range st.list {
		// The name depends only on the SQL text (which holds the table
		// name), so stores on the same table share prepared statements
		// and stores on different tables never collide.
		sum := sha256.Sum256([]byte(st.list[i].sql))
		st.list[i].name = "sluice_pgstore_" + hex.EncodeToString(sum[:12])
		all.Write(sum[:])
	}
	st.setKey = hex.EncodeToString(all.Sum(nil)[:12])
	return st
}

// customDataKey is the key of a connection's CustomData entry holding what
// the store prepared on it: a stmtCache.
const customDataKey = "github.com/sluicehq/sluice/backends/pgstore"

// stmtCache maps a statement set's key to its descriptions on one
// connection, or to nil when the connection sends the set unnamed. It
// lives in the connection's CustomData, so it dies with the connection: a
// connection the pool opens to replace a broken one starts empty and
// prepares again. Only the goroutine that holds the connection uses it.
type stmtCache map[string]*[numStmts]*pgconn.StatementDescription

// connStatements returns the descriptions of s's statements on conn,
// preparing them in one round trip the first time s uses conn. It returns
// nil, with nothing sent, when the connection is configured not to use
// named prepared statements (pgx's DefaultQueryExecMode other than
// QueryExecModeCacheStatement, for instance behind a pooler that does not
// support them): the statements are then sent unnamed, parsed on every use.
func (s *Store) connStatements(ctx context.Context, conn *pgx.Conn) (*[numStmts]*pgconn.StatementDescription, error) {
	pc := conn.PgConn()
	data := pc.CustomData()
	cache, _ := data[customDataKey].(stmtCache)
	if sds, ok := cache[s.stmts.setKey]; ok {
		return sds, nil // nil: unnamed, decided when s first used conn
	}
	if cache == nil {
		cache = stmtCache{}
		data[customDataKey] = cache
	}
	// Config returns a copy: look at it once per connection and store.
	if conn.Config().DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		cache[s.stmts.setKey] = nil
		return nil, nil
	}
	sds, err := s.prepare(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("pgstore: prepare statements: %w: %w", ratelimit.ErrUnavailable, err)
	}
	cache[s.stmts.setKey] = sds
	return sds, nil
}

// prepare prepares s's statements on pc in one round trip, outside any
// transaction. Each name is closed first (closing a statement that does
// not exist is not an error), so that preparing again after the server
// lost some of them (DISCARD ALL, DEALLOCATE) cannot fail on a duplicate.
func (s *Store) prepare(ctx context.Context, pc *pgconn.PgConn) (*[numStmts]*pgconn.StatementDescription, error) {
	p := pc.StartPipeline(ctx)
	for _, st := range s.stmts.list {
		p.SendDeallocate(st.name)
		p.SendPrepare(st.name, st.sql, st.oids)
	}
	if err := p.Sync(); err != nil {
		_ = p.Close() // the error is the one Sync returned
		return nil, err
	}
	var sds [numStmts]*pgconn.StatementDescription
	err := func() error {
		for i := range sds {
			if _, err := pipelineResult[*pgconn.CloseComplete](p); err != nil {
				return err
			}
			sd, err := pipelineResult[*pgconn.StatementDescription](p)
			if err != nil {
				return err
			}
			// The pipeline leaves the name and text to the caller.
			sd.Name, sd.SQL = s.stmts.list[i].name, s.stmts.list[i].sql
			sds[i] = sd
		}
		_, err := pipelineResult[*pgconn.PipelineSync](p)
		return err
	}()
	if cerr := p.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return &sds, nil
}

// forgetStatements drops what the cache of conn says about s's statements,
// after the server reported that one of them no longer exists or no longer
// fits the table: the next attempt prepares them again.
func (s *Store) forgetStatements(conn *pgx.Conn) {
	if cache, ok := conn.PgConn().CustomData()[customDataKey].(stmtCache); ok {
		delete(cache, s.stmts.setKey)
	}
}

// stalePrepared reports whether err means a prepared statement of the
// connection is gone (26000, after DISCARD ALL or DEALLOCATE) or was
// planned for another shape of the table (0A000, "cached plan must not
// change result type", after an ALTER TABLE).
func stalePrepared(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return pgErr.Code == codeInvalidStatementName ||
		pgErr.Code == codeFeatureNotSupported && strings.Contains(pgErr.Message, "cached plan must not change result type")
}

// pipelineResult reads the next result of p and checks its type.
func pipelineResult[T any](p *pgconn.Pipeline) (T, error) {
	var zero T
	res, err := p.GetResults()
	if err != nil {
		return zero, err
	}
	r, ok := res.(T)
	if !ok {
		return zero, fmt.Errorf("pipeline: got result %T, want %T", res, zero)
	}
	return r, nil
}

// sender appends the decision path's statements to a batch, prepared by
// name or, when sds is nil, unnamed.
type sender struct {
	b     *pgconn.Batch
	sds   *[numStmts]*pgconn.StatementDescription
	stmts *statements
}

func (x sender) send(id stmtID, params [][]byte, paramFormats, resultFormats []int16) {
	if x.sds == nil {
		st := &x.stmts.list[id]
		x.b.ExecParams(st.sql, params, st.oids, paramFormats, resultFormats)
		return
	}
	x.b.ExecStatement(x.sds[id], params, paramFormats, resultFormats)
}

// postgresEpoch is 2000-01-01 00:00:00 UTC in Unix microseconds: binary
// timestamptz values count microseconds from it.
const postgresEpoch = 946_684_800 * 1_000_000

// appendTimestamptz appends the binary timestamptz encoding of the instant
// unixNano (in Unix nanoseconds, rounded down to the microsecond).
func appendTimestamptz(dst []byte, unixNano int64) []byte {
	us := unixNano / 1000
	if unixNano < 0 && unixNano%1000 != 0 {
		us-- // round towards the past
	}
	return binary.BigEndian.AppendUint64(dst, uint64(us-postgresEpoch))
}

// decodeTimestamptz decodes a binary timestamptz into Unix nanoseconds,
// saturating at the int64 range ('infinity' and '-infinity' included).
func decodeTimestamptz(src []byte) (int64, error) {
	if len(src) != 8 {
		return 0, fmt.Errorf("timestamptz of %d bytes, want 8", len(src))
	}
	us := int64(binary.BigEndian.Uint64(src))
	const (
		maxUs = math.MaxInt64/1000 - postgresEpoch
		minUs = math.MinInt64/1000 - postgresEpoch
	)
	switch {
	case us > maxUs:
		return math.MaxInt64, nil
	case us < minUs:
		return math.MinInt64, nil
	}
	return (us + postgresEpoch) * 1000, nil
}
