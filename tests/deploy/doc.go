// Package deploy holds checks of the deploy/ manifests: that every document
// decodes strictly into its Kubernetes type, that kustomization.yaml lists
// every manifest, that the RBAC rules are least privilege, and that the
// objects agree with each other and with the ferry binary (its flags, its
// driver name, the StorageClass parameters it accepts). The checks are pure
// Go and need no cluster; they live in the *_test.go files of this package,
// each named for what it checks.
package deploy
