package cluster

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/sluicehq/sluice/core/ratelimit"
)

// Config configures a Node. Start from DefaultLANConfig or
// DefaultLocalConfig and change what you need; the zero value is not
// usable (New reports what is missing). New copies what it needs, so a
// Config may be reused after New returns.
type Config struct {
	// Name identifies the node in the cluster; it must be unique among
	// the members and at most 512 bytes. A node that restarts under the
	// same name continues its own counters with a new incarnation. The
	// presets use the host name.
	Name string

	// BindAddr is the IP address gossip listens on (UDP and TCP), for
	// example "0.0.0.0" or "127.0.0.1".
	BindAddr string

	// BindPort is the gossip port, UDP and TCP. 0 picks a free port; read
	// it back with Node.Addr.
	BindPort int

	// AdvertiseAddr and AdvertisePort are the address peers use to reach
	// this node when it differs from the bind address (NAT, containers).
	// Empty and 0 mean the bind address and port.
	AdvertiseAddr string
	AdvertisePort int

	// Seeds are "host:port" addresses of existing members to join. New
	// succeeds when at least one answers, and then holds every counter the
	// cluster knew before it returns. Empty starts a new cluster.
	Seeds []string

	// SyncInterval is how often the node sends the consumption it admitted
	// since the last send straight to every member. It is S in the
	// overshoot bound of the package documentation: shorter is more
	// accurate and costs more packets. 10ms..10s.
	SyncInterval time.Duration

	// SecretKey, when non-empty, encrypts and authenticates all gossip
	// with AES-GCM; it must be 16, 24 or 32 bytes. Members without the same
	// key can neither join nor inject messages. Without it, anyone who can
	// reach the port can join and report consumption.
	SecretKey []byte

	// Label is written on every packet and stream; a node drops traffic
	// with another label, so two clusters sharing a network never merge.
	// At most 255 bytes; empty disables the check.
	Label string

	// Clock supplies the time decisions are made at (Unix nanoseconds).
	// Nil means ratelimit.SystemClock. Timers (sync, failure detection)
	// always run on the wall clock; a test clock only moves decisions.
	Clock ratelimit.Clock

	// Logger receives the node's warnings (capped counter jumps, dropped
	// messages) and, at debug level, memberlist's log. Nil discards.
	Logger *slog.Logger

	// Algorithms adds algorithms the node can look up by name for keys it
	// learns from peers before serving them itself. Every algorithm of
	// github.com/sluicehq/sluice/algorithms/catalog that is a
	// ratelimit.Charger is known already, and algorithms used in this
	// node's own checks are added automatically. A key learned under an
	// unknown name is counted but not charged; when the node first serves
	// it, it is treated as a key never heard of (startup allowance).
	Algorithms []ratelimit.Algorithm

	// FailedHold is how long a member that failed (stopped answering
	// without leaving) still counts in the reference size N_ref that
	// scales refill during a partition. During that time the visible
	// members refill at r·visible/N_ref, so a partition cannot multiply
	// the limit; after it, the failed member's share is reclaimed. A member
	// whose gossip port refuses connections (its process is gone, its host
	// up) is reclaimed as soon as that is seen, within about a second of
	// its detection; one that cannot be told from a partition (host down,
	// process stopped) under-admits by up to r·FailedHold/N_ref. 0
	// reclaims at once (AP mode: each side of a partition admits the full
	// limit).
	FailedHold time.Duration

	// ReconnectInterval is how often the node tries to join members that
	// failed (not left) again, for up to ReconnectTimeout after the
	// failure, so that the sides of a healed partition merge. 0 disables
	// reconnecting.
	ReconnectInterval time.Duration
	ReconnectTimeout  time.Duration

	// PushPullInterval is how often the node exchanges its full state
	// with a random member over TCP, repairing lost sync packets. 0
	// disables the periodic exchange (joins still do it).
	PushPullInterval time.Duration

	// MaxMessageBytes bounds every gossip message accepted or built,
	// including the full state sent on join; larger ones are dropped.
	// 64 KiB..20 MiB.
	MaxMessageBytes int

	// Memberlist, when non-nil, is the base memberlist configuration
	// (timeouts, probe intervals, Transport for tests). New copies it and
	// overwrites Name, the bind and advertise fields, Label, SecretKey,
	// PushPullInterval, the delegates and the logger from this Config.
	// Nil means memberlist.DefaultLANConfig.
	Memberlist *memberlist.Config
}

// DefaultLANConfig returns a Config for a cluster on one local network:
// memberlist's LAN timings, port 7946 on all interfaces, a 50 ms sync
// interval, push/pull every 30 s, failed members held in N_ref for 30 s
// and reconnected to every 10 s for a day.
func DefaultLANConfig() Config {
	host, _ := os.Hostname()
	ml := memberlist.DefaultLANConfig()
	ml.EnableCompression = false
	return Config{
		Name:              host,
		BindAddr:          "0.0.0.0",
		BindPort:          7946,
		SyncInterval:      50 * time.Millisecond,
		FailedHold:        30 * time.Second,
		ReconnectInterval: 10 * time.Second,
		ReconnectTimeout:  24 * time.Hour,
		PushPullInterval:  30 * time.Second,
		MaxMessageBytes:   8 << 20,
		Memberlist:        ml,
	}
}

// DefaultLocalConfig returns a Config for nodes on one machine (tests,
// examples): loopback, a free port, memberlist's local timings with a
// 400 ms probe interval and a suspicion of 1.2–3.6 s (a failed node is
// detected in about 1.5–4 s), a 25 ms sync interval, push/pull every second, failed
// members held for 10 s and reconnected to every 500 ms for a minute.
// Set Name to something unique per node.
func DefaultLocalConfig() Config {
	ml := memberlist.DefaultLocalConfig()
	ml.EnableCompression = false
	// Loopback answers in microseconds: probe often and suspect briefly,
	// so a failed node is detected in well under a second.
	ml.ProbeInterval = 400 * time.Millisecond
	ml.ProbeTimeout = 300 * time.Millisecond
	ml.SuspicionMult = 3
	ml.SuspicionMaxTimeoutMult = 3
	ml.GossipInterval = 50 * time.Millisecond
	// Retransmit each suspicion and death notice 4·⌈log10(N+1)⌉ times,
	// not 2·: in a partition most gossip targets are unreachable, and
	// with two transmissions a small side rarely hears its own members'
	// suspicions, so each node waits out a full unconfirmed suspicion per
	// member it lost (F then reaches about 6 s instead of 2–3 s).
	ml.RetransmitMult = 4
	return Config{
		Name:              "",
		BindAddr:          "127.0.0.1",
		BindPort:          0,
		SyncInterval:      25 * time.Millisecond,
		FailedHold:        10 * time.Second,
		ReconnectInterval: 500 * time.Millisecond,
		ReconnectTimeout:  time.Minute,
		PushPullInterval:  time.Second,
		MaxMessageBytes:   8 << 20,
		Memberlist:        ml,
	}
}

// validate reports the first unusable field, wrapping
// ratelimit.ErrInvalidOption.
func (c *Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: cluster: %s", ratelimit.ErrInvalidOption, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Name == "" || len(c.Name) > maxNameLen:
		return bad("name length %d outside 1..%d", len(c.Name), maxNameLen)
	case c.BindAddr == "":
		return bad("empty bind address")
	case c.BindPort < 0 || c.BindPort > 65535:
		return bad("bind port %d", c.BindPort)
	case c.AdvertisePort < 0 || c.AdvertisePort > 65535:
		return bad("advertise port %d", c.AdvertisePort)
	case c.SyncInterval < 10*time.Millisecond || c.SyncInterval > 10*time.Second:
		return bad("sync interval %s outside 10ms..10s", c.SyncInterval)
	case len(c.SecretKey) != 0 && len(c.SecretKey) != 16 && len(c.SecretKey) != 24 && len(c.SecretKey) != 32:
		return bad("secret key of %d bytes, want 16, 24 or 32", len(c.SecretKey))
	case len(c.Label) > 255:
		return bad("label of %d bytes over 255", len(c.Label))
	case c.FailedHold < 0:
		return bad("negative failed hold %s", c.FailedHold)
	case c.ReconnectInterval < 0 || c.ReconnectTimeout < 0:
		return bad("negative reconnect interval %s or timeout %s", c.ReconnectInterval, c.ReconnectTimeout)
	case c.PushPullInterval < 0:
		return bad("negative push/pull interval %s", c.PushPullInterval)
	case c.MaxMessageBytes < 64<<10 || c.MaxMessageBytes > 20<<20:
		return bad("max message bytes %d outside 64KiB..20MiB", c.MaxMessageBytes)
	}
	for i, a := range c.Algorithms {
		if a == nil {
			return bad("nil algorithm %d", i)
		}
	}
	return nil
}
