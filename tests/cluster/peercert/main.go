// Command peercert writes the test cluster's peer mutual-TLS files: a
// throw-away CA and one shared certificate (SAN ferry-peer, the name peers
// check) as ca.crt, tls.crt and tls.key in -dir, for the ferry-peer-tls
// Secret, and the CA's key as ca.key, for the ferry-peer-ca Secret that
// Ferry's signer issues every node's own certificate with. Production
// clusters bring their own (deploy/README.md).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ferry-csi/ferry/tests/pki"
)

func main() {
	dir := flag.String("dir", "", "output directory")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "peercert: -dir is required")
		os.Exit(2)
	}
	if err := run(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "peercert:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca, err := pki.NewCA(dir, "ferry-peer")
	if err != nil {
		return err
	}
	f, err := ca.Issue("ferry-peer")
	if err != nil {
		return err
	}
	if err := ca.WriteKey(filepath.Join(dir, "ca.key")); err != nil {
		return err
	}
	for from, to := range map[string]string{ca.CAFile: "ca.crt", f.Cert: "tls.crt", f.Key: "tls.key"} {
		if err := os.Rename(from, filepath.Join(dir, to)); err != nil {
			return err
		}
	}
	return nil
}
