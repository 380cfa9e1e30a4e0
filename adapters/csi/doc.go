// Package csi serves the CSI Identity, Controller and Node services over
// gRPC on a unix socket. It is a thin adapter: it checks that required
// fields are present, converts CSI messages to the use cases' types in
// package app, and maps their errors to the gRPC codes the CSI spec names,
// in one place (codes.go). It decides nothing itself.
package csi
