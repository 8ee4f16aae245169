// Package cluster is a ratelimit.Store made of in-memory nodes kept in
// step by gossip over github.com/hashicorp/memberlist.
//
// Placeholder; see the full documentation below once written.
package cluster
