{{- /*
Sluice rate-limiter state for PostgreSQL (github.com/sluicehq/sluice/backends/pgstore).
This file is a text/template rendered by Store.SchemaSQL with the configured, quoted names;
Store.Migrate runs the result. The package documentation shows it with the default options.

One row per (namespace, key); both are arbitrary bytes (NUL, invalid UTF-8), hence bytea.
state is the algorithm's opaque encoding; an empty state or an expires_at in the past means
"no state" (the key is fully available). Store.Sweep deletes rows past expires_at. There is
deliberately no index on expires_at: every decision rewrites expires_at, and an index on it
would prevent HOT updates of hot keys; a sweep batch scans the table instead.
*/ -}}
{{- if .Schema}}
CREATE SCHEMA IF NOT EXISTS {{.Schema}};
{{- end}}
CREATE {{if .Unlogged}}UNLOGGED {{end}}TABLE IF NOT EXISTS {{.Table}} (
    namespace  bytea       NOT NULL,
    key        bytea       NOT NULL,
    algorithm  text        NOT NULL,
    state      bytea       NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (namespace, key)
) WITH (fillfactor = 80);
