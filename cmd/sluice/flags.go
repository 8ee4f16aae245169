package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// envName is the environment variable that sets flag name: SLUICE_ and the
// name in upper case with '-' as '_'.
func envName(name string) string {
	return "SLUICE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// newFlagSet returns a flag set for a subcommand whose -h prints synopsis
// and every flag with its environment variable.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: sluice %s [flags]\n\n%s\n\nflags (each also from the environment variable shown):\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags sets every flag from its environment variable, then from
// args, so the command line wins. It returns flag.ErrHelp for -h.
func parseFlags(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		env := envName(f.Name)
		f.Usage += " [$" + env + "]"
		if v := getenv(env); v != "" && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", env, v, err)
			}
		}
	})
	if envErr != nil {
		fmt.Fprintf(fs.Output(), "%s: %v\n", fs.Name(), envErr)
		return envErr
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		err := fmt.Errorf("unexpected argument %q", fs.Arg(0))
		fmt.Fprintf(fs.Output(), "%s: %v\n", fs.Name(), err)
		return err
	}
	return nil
}

// usageCode is the exit code for a parseFlags error.
func usageCode(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}

// listFlag is a comma-separated list flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	*l = (*l)[:0]
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*l = append(*l, part)
		}
	}
	return nil
}
