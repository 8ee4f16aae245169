// Package grpclimit rate-limits gRPC servers and makes clients back off.
package grpclimit
