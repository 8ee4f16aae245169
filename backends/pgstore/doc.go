// Package pgstore is a ratelimit.Store on PostgreSQL.
//
//	(doc in progress)
//
//	CREATE TABLE IF NOT EXISTS "sluice_ratelimit" (
//	    namespace  bytea       NOT NULL,
//	    key        bytea       NOT NULL,
//	    algorithm  text        NOT NULL,
//	    state      bytea       NOT NULL,
//	    expires_at timestamptz NOT NULL,
//	    PRIMARY KEY (namespace, key)
//	) WITH (fillfactor = 80);
package pgstore
