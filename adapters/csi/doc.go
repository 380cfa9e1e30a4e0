// Package csi serves the CSI Identity, Controller and Node services over
// gRPC on a unix socket. It is a thin adapter: it checks that required
// fields are present, converts CSI messages to the use cases' types
// (app/provision for the controller, app/publish for the node), and maps
// their errors to the gRPC codes the CSI spec names, in one place
// (codes.go). It decides nothing about a volume itself; whether the
// controller advertises expansion follows the deployment (NodeExpansion).
package csi
