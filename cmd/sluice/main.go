package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes of every subcommand.
const (
	exitOK            = 0 // success; validate found no error
	exitFailure       = 1 // a runtime failure: a listener, the store or the load test failed
	exitUsage         = 2 // bad command line or environment variable
	exitInvalidConfig = 3 // the rules (or another file named by a flag) are invalid
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const mainUsage = `sluice is the Sluice rate-limit service and its tools.

usage: sluice <command> [flags]

commands:
  serve     serve Envoy's rate limit service (gRPC), POST /json, forward-auth,
            /metrics, /healthz and /readyz
  validate  check a rules file or directory; print every error with file, line, field
  loadtest  drive a running sluice serve and report latency, throughput and drift

Run 'sluice <command> -h' for a command's flags. Every flag can also be set
from the environment as SLUICE_<FLAG> (upper case, '-' as '_'); a flag on the
command line wins over the environment.

exit codes:
  0  success
  1  runtime failure (listener, store, load test errors)
  2  usage error (unknown command, bad flag or environment value)
  3  invalid configuration (rules or TLS files)
`

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, mainUsage)
		return exitUsage
	}
	switch args[0] {
	case "serve":
		return runServe(ctx, args[1:], getenv, stderr)
	case "validate":
		return runValidate(args[1:], getenv, stdout, stderr)
	case "loadtest":
		return runLoadtest(ctx, args[1:], getenv, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, mainUsage)
		return exitOK
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", args[0], mainUsage)
	return exitUsage
}
