package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/sluicehq/sluice/policy"
)

const validateSynopsis = `Check rules files (envoy ratelimit YAML with Sluice extensions) the way
sluice serve loads them, and print every error as file:line: field: problem.
Each file is checked on its own (the first error of each file), then all
together (for example a domain defined twice). Exits 0 when valid, 3 when
not.

  sluice validate -rules /etc/sluice/rules
  sluice validate rules/api.yaml rules/web.yaml`

func runValidate(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := newFlagSet("validate", validateSynopsis, stderr)
	rules := fs.String("rules", "", "rules file or directory (or give paths as arguments)")
	paths, flagArgs := splitPositional(args)
	if err := parseFlags(fs, flagArgs, getenv); err != nil {
		return usageCode(err)
	}
	if *rules != "" {
		paths = append([]string{*rules}, paths...)
	}
	if len(paths) == 0 {
		fmt.Fprintln(stderr, "sluice validate: give -rules or paths")
		fs.Usage()
		return exitUsage
	}
	errs, domains := validateRules(paths)
	for _, err := range errs {
		fmt.Fprintln(stdout, formatConfigError(err))
	}
	if len(errs) > 0 {
		fmt.Fprintf(stdout, "%d error(s)\n", len(errs))
		return exitInvalidConfig
	}
	fmt.Fprintf(stdout, "ok: %d domain(s) %v\n", len(domains), domains)
	return exitOK
}

// splitPositional separates leading non-flag arguments from flags, so
// both "validate a.yaml -rules d" and "validate -rules d" work.
func splitPositional(args []string) (paths, flags []string) {
	for i, a := range args {
		if len(a) > 0 && a[0] == '-' {
			return paths, args[i:]
		}
		paths = append(paths, a)
	}
	return paths, nil
}

// validateRules checks every YAML file under paths alone, then all of
// them as one set, and returns every error found and the domains.
func validateRules(paths []string) ([]error, []string) {
	var errs []error
	var configs []policy.Config
	for _, p := range paths {
		files, err := policy.Files(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			c, err := policy.Parse(f, data)
			if err == nil {
				_, err = policy.NewSet(c)
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			configs = append(configs, c)
		}
	}
	if len(errs) > 0 {
		return errs, nil
	}
	set, err := policy.NewSet(configs...)
	if err != nil {
		return []error{err}, nil
	}
	return nil, set.Domains()
}

// formatConfigError writes err as file:line: field: problem.
func formatConfigError(err error) string {
	var ce *policy.ConfigError
	if !errors.As(err, &ce) {
		return err.Error()
	}
	where := ce.File
	if ce.Line > 0 {
		where = fmt.Sprintf("%s:%d", where, ce.Line)
	}
	if ce.Field != "" {
		return fmt.Sprintf("%s: %s: %v", where, ce.Field, ce.Err)
	}
	return fmt.Sprintf("%s: %v", where, ce.Err)
}
