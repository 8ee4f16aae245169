package policy_test

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice/policy"
)

// FuzzLoad feeds arbitrary bytes to Parse and NewSet: neither may panic,
// and every refusal is a *ConfigError.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(messaging))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    value: a*b*\n    share_threshold: true\n    rate_limit: {unit: year, requests_per_unit: 3, plans: {pro: 5/year}}\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: a, unit: second, requests_per_unit: 1, replaces: [b]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := policy.Parse("fuzz.yaml", data)
		if err == nil {
			_, err = policy.NewSet(c)
		}
		var ce *policy.ConfigError
		if err != nil && !errors.As(err, &ce) {
			t.Fatalf("error %v (%T), want a *ConfigError", err, err)
		}
	})
}
