// Package app holds Ferry's use cases: what a CSI call (or, later, a
// replication event) means in terms of the ports. It validates requests with
// the domain's rules, serialises work per volume, keeps every operation
// idempotent, and returns errors the CSI adapter maps to gRPC codes in one
// place (adapters/csi/codes.go).
package app
